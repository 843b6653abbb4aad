#include "cli/dot_throughput.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "backend/cpu/simd/simd.h"
#include "cli/common.h"
#include "core/thread_pool.h"

namespace magnetar::cli {

namespace {

using loop_fn = uint64_t (*)(uint64_t rounds, uint64_t* macs);

// Median of `passes` timed passes of the loop on every thread, in 1e9 operations (2 per
// multiply-add) per second.
double measure(thread_pool& pool, loop_fn fn, int threads, int passes, double pass_ms) {
    // Calibrate on one thread: rounds per pass so one unit takes about pass_ms.
    uint64_t rounds = uint64_t{1} << 16;
    uint64_t macs = 0;
    for (;;) {
        const auto t0 = std::chrono::steady_clock::now();
        fn(rounds, &macs);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        if (ms >= 5.0 || rounds >= (uint64_t{1} << 40)) {
            rounds = std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(rounds) *
                                                                 pass_ms / std::max(ms, 1e-3)));
            break;
        }
        rounds *= 4;
    }
    std::atomic<uint64_t> sink{0};
    std::vector<double> rates;
    for (int p = 0; p < passes; ++p) {
        std::atomic<uint64_t> done{0};
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(threads, [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) {
                uint64_t m = 0;
                sink.fetch_xor(fn(rounds, &m), std::memory_order_relaxed);
                done.fetch_add(m, std::memory_order_relaxed);
            }
        });
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s > 0) rates.push_back(2.0 * static_cast<double>(done.load()) / s * 1e-9);
    }
    volatile uint64_t keep = sink.load();
    (void)keep;
    return median(rates);
}

}  // namespace

dot_throughput measure_dot_throughput(int threads, int passes, double pass_ms) {
    threads = std::max(1, threads);
    passes = std::max(1, passes);
    thread_pool pool(threads);
    dot_throughput r;
    r.threads = threads;
    r.passes = passes;
    r.int8_gops = measure(pool, cpu::simd::peak_int8, threads, passes, pass_ms);
    r.f32_gflops = measure(pool, cpu::simd::peak_f32, threads, passes, pass_ms);
    return r;
}

}  // namespace magnetar::cli
