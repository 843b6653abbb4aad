// `magnetar bench pool`: the hand-off cost of the thread pool that runs every parallel loop of
// the forward pass, polling workers (the engine's setting) against workers that always sleep
// (spin 0), in one process.
//
// A decode step is a long chain of short loops separated by short serial stretches (norms,
// routing, bookkeeping on the calling thread). Each scenario runs such a chain: `work` µs of
// busy work per thread inside each loop and `gap` µs of serial work on the caller between
// loops. Reported per loop: wall µs, the overhead over the ideal (work + gap), and how often a
// thread went to sleep (a futex wait, later a wake-up through the kernel).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_command.h"
#include "core/error.h"
#include "core/format.h"
#include "core/thread_pool.h"

namespace magnetar::cli {

namespace {

using clock_type = std::chrono::steady_clock;

struct args {
    int threads = 0;
    int loops = 20000;
    int spin_us = thread_pool::kDefaultSpinUs;
    std::string csv;
};

// Busy work for about `us` microseconds (wall clock).
void busy(double us) {
    if (us <= 0) return;
    const auto end = clock_type::now() + std::chrono::duration<double, std::micro>(us);
    while (clock_type::now() < end) {
    }
}

struct result {
    double us_per_loop = 0;
    double sleeps_per_loop = 0;
};

result run_chain(thread_pool& pool, int loops, double work_us, double gap_us) {
    const int n = pool.size();
    const uint64_t sleeps0 = pool.sleeps();
    const auto t0 = clock_type::now();
    for (int i = 0; i < loops; ++i) {
        pool.parallel_for(n, [&](int64_t, int64_t, int) { busy(work_us); });
        busy(gap_us);
    }
    const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    result r;
    r.us_per_loop = s * 1e6 / loops;
    r.sleeps_per_loop = static_cast<double>(pool.sleeps() - sleeps0) / loops;
    return r;
}

int bench(const args& a) {
    if (a.loops < 1) throw Error("--loops must be at least 1");
    if (a.spin_us < 1) throw Error("--spin-us must be at least 1 (0 is the baseline)");
    const int threads = a.threads > 0 ? a.threads : thread_pool::physical_cores();
    struct scenario {
        double work_us, gap_us;
    };
    const std::vector<scenario> scenarios = {{0, 0},   {2, 2},    {10, 5},
                                             {50, 10}, {10, 100}, {10, 500}};
    thread_pool sleeping(threads, 0);
    thread_pool polling(threads, a.spin_us);
    std::FILE* csv = nullptr;
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> csv_file(nullptr, &std::fclose);
    if (!a.csv.empty()) {
        csv_file.reset(std::fopen(a.csv.c_str(), "w"));
        if (!csv_file) throw Error(a.csv + ": cannot write");
        csv = csv_file.get();
        std::fprintf(csv, "threads,work_us,gap_us,mode,us_per_loop,overhead_us,sleeps_per_loop\n");
    }
    std::printf(
        "thread pool hand-off: %d threads, %d loops per row; polling workers spin %d us "
        "before they sleep\n",
        threads, a.loops, a.spin_us);
    std::printf("%8s %8s | %-28s | %-28s | %s\n", "work us", "gap us", "sleeping: us/loop (over)",
                "polling: us/loop (over)", "speed-up");
    for (const scenario& sc : scenarios) {
        // Short warm-up for each, then the measured chains, alternating to share any drift.
        run_chain(sleeping, a.loops / 10 + 1, sc.work_us, sc.gap_us);
        run_chain(polling, a.loops / 10 + 1, sc.work_us, sc.gap_us);
        const result s = run_chain(sleeping, a.loops, sc.work_us, sc.gap_us);
        const result p = run_chain(polling, a.loops, sc.work_us, sc.gap_us);
        const double ideal = sc.work_us + sc.gap_us;
        std::printf(
            "%8.0f %8.0f | %8.2f (%6.2f) %5.2f sleeps | %8.2f (%6.2f) %5.2f sleeps | %.2fx\n",
            sc.work_us, sc.gap_us, s.us_per_loop, s.us_per_loop - ideal, s.sleeps_per_loop,
            p.us_per_loop, p.us_per_loop - ideal, p.sleeps_per_loop,
            p.us_per_loop > 0 ? s.us_per_loop / p.us_per_loop : 0.0);
        if (csv) {
            for (const auto& [mode, r] : {std::pair<const char*, result>{"sleeping", s},
                                          std::pair<const char*, result>{"polling", p}}) {
                std::fprintf(csv, "%d,%.0f,%.0f,%s,%.3f,%.3f,%.3f\n", threads, sc.work_us,
                             sc.gap_us, mode, r.us_per_loop, r.us_per_loop - ideal,
                             r.sleeps_per_loop);
            }
        }
    }
    return 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    sub.add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
    sub.add_option("--loops", a->loops, "Parallel loops per measured chain")->capture_default_str();
    sub.add_option("--spin-us", a->spin_us, "Polling time of the polling pool, microseconds")
        ->capture_default_str();
    sub.add_option("--csv", a->csv, "Also write the rows as CSV here");
    sub.footer(
        "Each row: a chain of parallel loops, each with `work` us of busy work per thread, "
        "separated by `gap` us of serial work on the caller; overhead = us per loop - "
        "(work + gap).");
    return [a]() { return bench(*a); };
}

}  // namespace

MAGNETAR_BENCH_COMMAND(pool, "pool",
                       "Thread-pool hand-off per parallel loop: polling against sleeping workers",
                       setup);

}  // namespace magnetar::cli
