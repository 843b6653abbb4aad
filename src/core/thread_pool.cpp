#include "core/thread_pool.h"

#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace magnetar {

namespace {
thread_local bool t_in_task = false;
}

bool thread_pool::in_task() {
    return t_in_task;
}

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    workers_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back(&thread_pool::worker_main, this, i);
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    start_cv_.notify_all();
    for (auto& w : workers_) w.join();
}

void thread_pool::run(int tasks, task_fn fn, void* ctx) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        fn_ = fn;
        ctx_ = ctx;
        tasks_ = tasks;
        pending_ = tasks - 1;
        ++generation_;
    }
    start_cv_.notify_all();
    t_in_task = true;
    fn(ctx, 0);
    t_in_task = false;
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
}

void thread_pool::worker_main(int id) {
    uint64_t seen = 0;
    t_in_task = true;
    for (;;) {
        task_fn fn;
        void* ctx;
        {
            std::unique_lock<std::mutex> lock(mu_);
            start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            if (id >= tasks_) continue;
            fn = fn_;
            ctx = ctx_;
        }
        fn(ctx, id);
        bool last;
        {
            std::lock_guard<std::mutex> lock(mu_);
            last = --pending_ == 0;
        }
        if (last) done_cv_.notify_one();
    }
}

int thread_pool::physical_cores() {
    // Distinct (package, core) pairs from sysfs; hyper-threads share a core id.
    std::set<std::pair<std::string, std::string>> cores;
    const unsigned n = std::thread::hardware_concurrency();
    for (unsigned c = 0; c < n; ++c) {
        const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
        std::ifstream pkg(base + "physical_package_id"), core(base + "core_id");
        std::string p, k;
        if (!(pkg >> p) || !(core >> k)) break;
        cores.emplace(p, k);
    }
    if (!cores.empty()) return static_cast<int>(cores.size());
    return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace magnetar
