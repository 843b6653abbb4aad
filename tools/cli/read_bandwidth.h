// Streaming-read bandwidth of this machine, measured in the calling process: the memory
// roofline that `magnetar bench` compares decode with.
//
// A buffer much larger than the last-level cache is read end to end on a thread pool with the
// SIMD library's plain streaming read (`simd::stream_sum`, the access pattern of a decode
// tile), so no pass finds its data cached. Owns only the measurement; `bench kernels` keeps its
// own per-round variant.
#pragma once

#include <cstddef>
#include <cstdint>

namespace magnetar::cli {

struct read_bandwidth {
    double gbs = 0;       // median over passes, 1e9 bytes per second
    double best_gbs = 0;  // fastest pass
    uint64_t bytes = 0;   // buffer size
    int passes = 0;
    int threads = 0;
};

// Bytes of the last-level cache (sysconf), 32 MiB when unknown.
uint64_t last_level_cache_bytes();

// Reads a buffer of `bytes` (0: max(512 MiB, 16 x LLC)) `passes` times with `threads` threads
// after one untimed warm-up pass.
read_bandwidth measure_read_bandwidth(int threads, uint64_t bytes = 0, int passes = 5);

}  // namespace magnetar::cli
