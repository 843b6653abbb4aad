// Arithmetic ceiling of this machine, measured in the calling process: the dot throughput that
// `magnetar bench` compares prefill with (as it compares decode with the streaming read).
//
// Every thread runs the SIMD library's register-resident multiply-add loops
// (`simd::peak_int8`, `simd::peak_f32`) at the active level, no memory traffic. Owns only the
// measurement.
#pragma once

namespace magnetar::cli {

struct dot_throughput {
    double int8_gops = 0;   // int8 multiply-adds x 2 per second, 1e9 (median over passes)
    double f32_gflops = 0;  // float fused multiply-adds x 2 per second, 1e9 (median)
    int passes = 0;
    int threads = 0;
};

// `passes` timed passes of about `pass_ms` each per kind on `threads` threads, after a
// calibration pass.
dot_throughput measure_dot_throughput(int threads, int passes = 5, double pass_ms = 60);

}  // namespace magnetar::cli
