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

// The probe buffer for a model of `weight_bytes`: the bytes its decode streams, within
// [64 MiB, 2 GiB] (a tiny model's probe still leaves the core caches; a large model's stays
// short). The LLC that sysconf reports is the whole socket's, often far more than the cores of
// a shared machine reach, so it does not size the probe.
uint64_t probe_bytes_for_model(uint64_t weight_bytes);

// Reads a buffer of `bytes` `passes` times with `threads` threads after one untimed warm-up
// pass.
read_bandwidth measure_read_bandwidth(int threads, uint64_t bytes, int passes = 5);

}  // namespace magnetar::cli
