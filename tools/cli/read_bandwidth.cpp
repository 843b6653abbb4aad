#include "cli/read_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/simd/simd.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/format.h"
#include "core/thread_pool.h"

namespace magnetar::cli {

namespace {

struct free_deleter {
    void operator()(void* p) const { std::free(p); }
};

constexpr size_t kSlice = size_t{1} << 20;  // work unit of one thread

}  // namespace

uint64_t probe_bytes_for_model(uint64_t weight_bytes) {
    return std::clamp<uint64_t>(weight_bytes, uint64_t{64} << 20, uint64_t{2} << 30);
}

read_bandwidth measure_read_bandwidth(int threads, uint64_t bytes, int passes) {
    bytes = std::max<uint64_t>(kSlice, bytes / kSlice * kSlice);
    threads = std::max(1, threads);
    passes = std::max(1, passes);
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
    if (!p) throw Error(strfmt("read bandwidth: cannot allocate %s", human_bytes(bytes).c_str()));
    std::unique_ptr<uint8_t, free_deleter> buf(p);
    thread_pool pool(threads);
    // Touch the pages on the threads that read them (first touch places them on their node).
    pool.parallel_for(static_cast<int64_t>(bytes / kSlice), [&](int64_t b, int64_t e, int) {
        std::memset(p + static_cast<size_t>(b) * kSlice, 1, static_cast<size_t>(e - b) * kSlice);
    });
    std::vector<double> gbs;
    uint64_t sums[64] = {};
    for (int i = 0; i <= passes; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(static_cast<int64_t>(bytes / kSlice), [&](int64_t b, int64_t e, int th) {
            sums[th % 64] += cpu::simd::stream_sum(p + static_cast<size_t>(b) * kSlice,
                                                   static_cast<size_t>(e - b) * kSlice);
        });
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (i > 0 && s > 0) gbs.push_back(static_cast<double>(bytes) / s * 1e-9);
    }
    volatile uint64_t sink = 0;
    for (uint64_t v : sums) sink = sink + v;
    read_bandwidth r;
    r.bytes = bytes;
    r.passes = passes;
    r.threads = threads;
    r.gbs = median(gbs);
    if (!gbs.empty()) r.best_gbs = *std::max_element(gbs.begin(), gbs.end());
    return r;
}

}  // namespace magnetar::cli
