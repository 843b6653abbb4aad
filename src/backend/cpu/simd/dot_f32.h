// The fixed-order float dot product of the CPU backend: every op and every SIMD kernel's
// scalar twin that sums a float dot with this order gets the same bits. Owned by the SIMD
// library (backend/cpu/simd), which the backend links; backend/cpu/kernels.h re-exports it.
#pragma once

#include <cstdint>
#include <cstring>

namespace magnetar::cpu {

// Sum of a[i] * b[i] with 16 interleaved float accumulators reduced pairwise; the order is
// fixed, so every caller computing the same dot gets the same bits. Vectorizes without
// -ffast-math.
inline float dot_f32(const float* a, const float* b, int64_t n) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
    }
    float tail = 0.0f;
    for (; i < n; ++i) tail += a[i] * b[i];
    for (int w = 8; w >= 1; w /= 2) {
        for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
    }
    return acc[0] + tail;
}

// dot_f32(a0, b, n) and dot_f32(a1, b, n) in one pass that loads b once: the same 16 lane
// accumulators per dot, the same operations in the same order, so the same bits. For two
// queries against one key (attention's head pairs, the indexer kernel's scalar twin).
inline void dot_f32_x2(const float* a0, const float* a1, const float* b, int64_t n, float* out) {
    typedef float v4 __attribute__((vector_size(16)));  // 4 of dot_f32's 16 lanes
    v4 c0[4] = {}, c1[4] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 4; ++j) {
            v4 x, y0, y1;
            std::memcpy(&x, b + i + 4 * j, sizeof(x));
            std::memcpy(&y0, a0 + i + 4 * j, sizeof(y0));
            std::memcpy(&y1, a1 + i + 4 * j, sizeof(y1));
            c0[j] += y0 * x;
            c1[j] += y1 * x;
        }
    }
    float t0 = 0.0f, t1 = 0.0f;
    for (; i < n; ++i) {
        t0 += a0[i] * b[i];
        t1 += a1[i] * b[i];
    }
    // dot_f32's reduction: lanes j += j + 8, then + 4 (as vectors), then + 2 and + 1.
    const v4 r0 = (c0[0] + c0[2]) + (c0[1] + c0[3]);
    const v4 r1 = (c1[0] + c1[2]) + (c1[1] + c1[3]);
    out[0] = ((r0[0] + r0[2]) + (r0[1] + r0[3])) + t0;
    out[1] = ((r1[0] + r1[2]) + (r1[1] + r1[3])) + t1;
}

}  // namespace magnetar::cpu
