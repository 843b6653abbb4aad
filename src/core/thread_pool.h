// Persistent worker threads for data-parallel loops.
//
// Owns: the pool of n - 1 workers (the calling thread is worker 0) and parallel_for with a
// deterministic static partition: index range [0, n) is cut into n_threads contiguous slices,
// slice i always going to thread i. Kernels that compute each output element with the same code
// whatever slice it lands in therefore give bit-identical results for any thread count.
// Does not own: per-thread scratch (the caller indexes its own by the thread id).
//
// Hand-off: a forward pass is a long sequence of short parallel loops, so waking sleeping
// workers through the kernel for each one (a futex wake and a context switch, tens of
// microseconds) would cost as much as small loops themselves. Idle workers therefore poll for
// the next loop for `spin_us` microseconds (pause, then yield so an oversubscribed machine
// still progresses) before they sleep on a condition variable, and the caller polls for the
// end of a loop the same way. Between tokens, or when the engine is idle, they sleep.
//
// One parallel_for runs at a time; calls from inside a task run inline on the calling thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace magnetar {

class thread_pool {
  public:
    // Microseconds an idle worker (or the waiting caller) polls before it sleeps.
    static constexpr int kDefaultSpinUs = 200;

    // n_threads >= 1 (1: everything runs on the caller). spin_us = 0: always sleep.
    explicit thread_pool(int n_threads, int spin_us = kDefaultSpinUs);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(begin, end, thread) for the slices of [0, n); no heap allocation. Slices smaller
    // than min_per_thread elements are merged so tiny loops do not wake every worker.
    template <typename Fn>
    void parallel_for(int64_t n, Fn&& fn, int64_t min_per_thread = 1) {
        if (n <= 0) return;
        const int64_t max_tasks =
            min_per_thread > 1 ? (n + min_per_thread - 1) / min_per_thread : n;
        const int tasks = static_cast<int>(max_tasks < n_threads_ ? max_tasks : n_threads_);
        if (tasks <= 1 || in_task()) {
            fn(int64_t{0}, n, 0);
            return;
        }
        struct ctx_t {
            Fn* fn;
            int64_t n;
            int tasks;
        } ctx{&fn, n, tasks};
        run(
            tasks,
            [](void* p, int task) {
                auto* c = static_cast<ctx_t*>(p);
                const int64_t b = c->n * task / c->tasks;
                const int64_t e = c->n * (task + 1) / c->tasks;
                if (b < e) (*c->fn)(b, e, task);
            },
            &ctx);
    }

    // Physical cores of this machine (distinct core ids), at least 1.
    static int physical_cores();

    // Times a worker or the caller went to sleep on a condition variable since construction
    // (the benchmark reports it per loop).
    uint64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }
    int spin_us() const { return spin_us_; }

  private:
    using task_fn = void (*)(void*, int);
    void run(int tasks, task_fn fn, void* ctx);
    void worker_main(int id);
    static bool in_task();

    // Polls `ready` for up to spin_us_; true once it holds.
    template <typename Pred>
    bool spin_until(Pred&& ready) const;

    int n_threads_;
    int spin_us_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable start_cv_;
    std::condition_variable done_cv_;
    // The loop being run: fn_ / ctx_ are written by run() before it publishes the loop in
    // epoch_ (generation << kTaskBits | tasks, one atomic so a worker reads both together) and
    // read only by the workers it counts in pending_; run() returns, and may start the next
    // loop, only when they are done.
    static constexpr int kTaskBits = 20;
    task_fn fn_ = nullptr;
    void* ctx_ = nullptr;
    std::atomic<uint64_t> epoch_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
    // Sleepers announce themselves (sequentially consistent) before their last check, and the
    // other side reads the flag after its own write, so no wake-up is lost.
    std::atomic<int> workers_sleeping_{0};
    std::atomic<bool> caller_sleeping_{false};
    std::atomic<uint64_t> sleeps_{0};
};

}  // namespace magnetar
