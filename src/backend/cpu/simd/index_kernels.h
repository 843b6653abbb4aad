// The lightning indexer's scores with 256-bit float SIMD, compiled in each ISA translation unit
// (AVX2, AVX-512): score[s] = sum over heads h, in increasing h, of (w[h] * scale) *
// max(dot(q_h, key_s), 0), every dot exactly cpu::dot_f32's (element i multiplied, then added,
// into lane i % 16, lanes reduced l + (l ^ 8), then ^4, ^2, ^1, then the tail), so the scores
// equal the scalar twin's bit for bit. Two heads x two keys per pass: each loaded query vector
// serves two keys and each key vector two heads (the scalar twin loads a key for every two
// heads and both queries for every key), and the 16 lanes of a dot are two registers.
//
// The including file defines MAGNETAR_SIMD_NS. No include guard: included once per ISA unit.

#ifndef MAGNETAR_SIMD_NS
#error "define MAGNETAR_SIMD_NS before including index_kernels.h"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace magnetar::cpu::simd::MAGNETAR_SIMD_NS {
namespace idx {

// dot_f32's reduction of 16 lanes held as lo (0-7) and hi (8-15), plus the tail.
inline float reduce16(__m256 lo, __m256 hi, float tail) {
    const __m256 s8 = _mm256_add_ps(lo, hi);  // l + (l ^ 8)
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // l + (l ^ 2), l < 2
    const float s1 = _mm_cvtss_f32(s2) + _mm_cvtss_f32(_mm_movehdup_ps(s2));
    return s1 + tail;
}

inline __m256 muladd(__m256 acc, __m256 a, __m256 b) {
    return _mm256_add_ps(acc, _mm256_mul_ps(a, b));  // two roundings, as dot_f32
}

// dot(a[h], b[k]) for h, k < 2 into out[2 * k + h]; n elements, the tail after the last 16.
inline void dot_2x2(const float* a0, const float* a1, const float* b0, const float* b1, int64_t n,
                    float* out) {
    __m256 c[2][2][2];  // [key][head][lo / hi]
    for (auto& k : c) {
        for (auto& h : k) h[0] = h[1] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 x0l = _mm256_loadu_ps(b0 + i), x0h = _mm256_loadu_ps(b0 + i + 8);
        const __m256 x1l = _mm256_loadu_ps(b1 + i), x1h = _mm256_loadu_ps(b1 + i + 8);
        __m256 q = _mm256_loadu_ps(a0 + i);
        c[0][0][0] = muladd(c[0][0][0], q, x0l);
        c[1][0][0] = muladd(c[1][0][0], q, x1l);
        q = _mm256_loadu_ps(a0 + i + 8);
        c[0][0][1] = muladd(c[0][0][1], q, x0h);
        c[1][0][1] = muladd(c[1][0][1], q, x1h);
        q = _mm256_loadu_ps(a1 + i);
        c[0][1][0] = muladd(c[0][1][0], q, x0l);
        c[1][1][0] = muladd(c[1][1][0], q, x1l);
        q = _mm256_loadu_ps(a1 + i + 8);
        c[0][1][1] = muladd(c[0][1][1], q, x0h);
        c[1][1][1] = muladd(c[1][1][1], q, x1h);
    }
    float t[2][2] = {};
    for (; i < n; ++i) {
        t[0][0] += a0[i] * b0[i];
        t[0][1] += a1[i] * b0[i];
        t[1][0] += a0[i] * b1[i];
        t[1][1] += a1[i] * b1[i];
    }
    for (int k = 0; k < 2; ++k) {
        for (int h = 0; h < 2; ++h) out[2 * k + h] = reduce16(c[k][h][0], c[k][h][1], t[k][h]);
    }
}

// One head against one key, the same arithmetic.
inline float dot_1x1(const float* a, const float* b, int64_t n) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        lo = muladd(lo, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
        hi = muladd(hi, _mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    }
    float t = 0.0f;
    for (; i < n; ++i) t += a[i] * b[i];
    return reduce16(lo, hi, t);
}

inline void index_scores(const float* q, const float* w, float scale, int64_t n_head, int64_t hd,
                         const float* keys, int64_t key_stride, int64_t n_keys, float* score) {
    int64_t s = 0;
    for (; s + 2 <= n_keys; s += 2) {
        const float* k0 = keys + s * key_stride;
        const float* k1 = k0 + key_stride;
        float acc0 = 0.0f, acc1 = 0.0f;
        int64_t h = 0;
        for (; h + 2 <= n_head; h += 2) {
            float d[4];
            dot_2x2(q + h * hd, q + (h + 1) * hd, k0, k1, hd, d);
            acc0 += (w[h] * scale) * std::max(d[0], 0.0f);
            acc0 += (w[h + 1] * scale) * std::max(d[1], 0.0f);
            acc1 += (w[h] * scale) * std::max(d[2], 0.0f);
            acc1 += (w[h + 1] * scale) * std::max(d[3], 0.0f);
        }
        for (; h < n_head; ++h) {
            acc0 += (w[h] * scale) * std::max(dot_1x1(q + h * hd, k0, hd), 0.0f);
            acc1 += (w[h] * scale) * std::max(dot_1x1(q + h * hd, k1, hd), 0.0f);
        }
        score[s] = acc0;
        score[s + 1] = acc1;
    }
    for (; s < n_keys; ++s) {
        const float* k = keys + s * key_stride;
        float acc = 0.0f;
        for (int64_t h = 0; h < n_head; ++h)
            acc += (w[h] * scale) * std::max(dot_1x1(q + h * hd, k, hd), 0.0f);
        score[s] = acc;
    }
}

}  // namespace idx
}  // namespace magnetar::cpu::simd::MAGNETAR_SIMD_NS
