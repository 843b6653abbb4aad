#include "core/thread_pool.h"

#include <chrono>
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

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

}  // namespace

thread_pool::thread_pool(int n_threads, int spin_us)
    : n_threads_(n_threads < 1 ? 1 : n_threads), spin_us_(spin_us < 0 ? 0 : spin_us) {
    workers_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back(&thread_pool::worker_main, this, i);
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_.store(true);
    }
    start_cv_.notify_all();
    for (auto& w : workers_) w.join();
}

template <typename Pred>
bool thread_pool::spin_until(Pred&& ready) const {
    if (spin_us_ == 0) return ready();
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::microseconds(spin_us_);
    // A short burst of pauses (the usual gap between two loops of a forward pass is a few
    // microseconds), then yields, so a thread that shares its core with others lets them run.
    for (uint32_t i = 0;; ++i) {
        if (ready()) return true;
        if (i < 4096) {
            cpu_relax();
        } else {
            std::this_thread::yield();
        }
        if ((i & 63) == 63 && clock::now() >= deadline) return ready();
    }
}

void thread_pool::run(int tasks, task_fn fn, void* ctx) {
    fn_ = fn;
    ctx_ = ctx;
    pending_.store(tasks - 1, std::memory_order_relaxed);
    const uint64_t generation = (epoch_.load(std::memory_order_relaxed) >> kTaskBits) + 1;
    epoch_.store(generation << kTaskBits | static_cast<uint64_t>(tasks),
                 std::memory_order_seq_cst);  // publishes the loop
    if (workers_sleeping_.load(std::memory_order_seq_cst) > 0) {
        // A sleeper is inside wait() or before its last check under the lock.
        { std::lock_guard<std::mutex> lock(mu_); }
        start_cv_.notify_all();
    }
    t_in_task = true;
    fn(ctx, 0);
    t_in_task = false;
    if (spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) return;
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    if (pending_.load(std::memory_order_seq_cst) != 0) {
        sleeps_.fetch_add(1, std::memory_order_relaxed);
        done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_seq_cst) == 0; });
    }
    caller_sleeping_.store(false, std::memory_order_relaxed);
}

void thread_pool::worker_main(int id) {
    uint64_t seen = 0;  // epoch of the last loop looked at
    t_in_task = true;
    for (;;) {
        auto changed = [&] {
            return stop_.load(std::memory_order_seq_cst) ||
                   epoch_.load(std::memory_order_seq_cst) != seen;
        };
        if (!spin_until(changed)) {
            std::unique_lock<std::mutex> lock(mu_);
            workers_sleeping_.fetch_add(1, std::memory_order_seq_cst);
            if (!changed()) {
                sleeps_.fetch_add(1, std::memory_order_relaxed);
                start_cv_.wait(lock, changed);
            }
            workers_sleeping_.fetch_sub(1, std::memory_order_relaxed);
        }
        if (stop_.load(std::memory_order_acquire)) return;
        seen = epoch_.load(std::memory_order_acquire);
        const int tasks = static_cast<int>(seen & ((uint64_t{1} << kTaskBits) - 1));
        if (id >= tasks) continue;  // not counted in this loop: fn_ / ctx_ are not ours to read
        fn_(ctx_, id);
        if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
            caller_sleeping_.load(std::memory_order_seq_cst)) {
            { std::lock_guard<std::mutex> lock(mu_); }
            done_cv_.notify_one();
        }
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
