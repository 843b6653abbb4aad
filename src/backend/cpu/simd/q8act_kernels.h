// q8-activation kernels (GGML-compatible family) with 256-bit integer SIMD, compiled in each
// ISA translation unit: AVX2, and AVX-512 where VNNI replaces the u8 x s8 multiply-add pairs.
//
// Owns: activation converters that reproduce quant/quantize_act.h byte for byte, and dot
// products that sum integer products exactly per block and scale them in float, like GGML's
// CPU kernels. Float combination order differs from quant/dot_ref.h, so results agree with it
// (and with GGML) to float summation tolerance, not bit for bit.
//
// The including file defines MAGNETAR_SIMD_NS. No include guard: included once per ISA unit.

#ifndef MAGNETAR_SIMD_NS
#error "define MAGNETAR_SIMD_NS before including q8act_kernels.h"
#endif

#include <immintrin.h>

#include <cstring>

#include "backend/cpu/simd/simd_internal.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/iq2_tables.h"

namespace magnetar::cpu::simd::MAGNETAR_SIMD_NS {
namespace q8 {

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float h2f(uint16_t h) {
    return _cvtsh_ss(h);
}

// Sum of products of unsigned bytes u (<= 128 after abs) and signed bytes s, as 8 int32 lanes
// of four products each.
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// Signed x signed bytes: |x| times y carrying x's sign.
inline __m256i dot_s8s8(__m256i x, __m256i y) {
    return dot_u8s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// ---------------------------------------------------------------------------------------------
// Activation converters
// ---------------------------------------------------------------------------------------------

// Bytes of 32 int32 codes (in four 8-lane vectors, values within int8) in element order.
inline void store_codes(int8_t* dst, __m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b);  // per 128-bit lane: a0-3 b0-3 | a4-7 b4-7
    const __m256i cd = _mm256_packs_epi32(c, d);
    __m256i bytes = _mm256_packs_epi16(ab, cd);  // lanes interleaved by 4
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), bytes);
}

inline __m256 abs_ps(__m256 v) {
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

inline float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// As quantize_row_q8_0: d = amax / 127, codes round-half-even(x * (127 / amax)).
inline void quantize_q8_0(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_0*>(dst);
    for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
        __m256 v[4];
        for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
        const __m256 m = _mm256_max_ps(_mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])),
                                       _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3])));
        const float amax = hmax(m);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m256 idv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], idv));
        store_codes(y[b].qs, q[0], q[1], q[2], q[3]);
    }
}

// As quantize_row_q8_K: scale -127 / (the element of largest magnitude, first one on ties).
inline void quantize_q8_K(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_K*>(dst);
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K; k += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + k)));
        const float amax = hmax(m);
        if (amax == 0.0f) {
            std::memset(&y[b], 0, sizeof(y[b]));
            continue;
        }
        float max = 0.0f;
        for (int j = 0; j < QK_K; ++j) {
            if (bits_to_f32(f32_to_bits(x[j]) & 0x7fffffffu) == amax) {
                max = x[j];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i hi = _mm256_set1_epi32(127);
        for (int k = 0; k < QK_K; k += 32) {
            __m256i q[4];
            for (int i = 0; i < 4; ++i) {
                q[i] = _mm256_min_epi32(
                    _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + k + 8 * i))), hi);
            }
            store_codes(y[b].qs + k, q[0], q[1], q[2], q[3]);
        }
        for (int g = 0; g < QK_K / 16; ++g) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) sum += y[b].qs[16 * g + l];
            y[b].bsums[g] = static_cast<int16_t>(sum);
        }
        y[b].d = 1.0f / iscale;
    }
}

// ---------------------------------------------------------------------------------------------
// Dot products
// ---------------------------------------------------------------------------------------------

inline float dot_f32(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const float*>(w);
    const auto* y = static_cast<const float*>(a);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k),
                                     acc[k]);
    }
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += x[i] * y[i];
    return sum;
}

inline float dot_f16(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const uint16_t*>(w);
    const auto* y = static_cast<const uint16_t*>(a);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; ++k) {
            const __m256 xv =
                _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8 * k)));
            const __m256 yv =
                _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i + 8 * k)));
            acc[k] = _mm256_fmadd_ps(xv, yv, acc[k]);
        }
    }
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += fp16_to_f32(x[i]) * fp16_to_f32(y[i]);
    return sum;
}

inline __m256 bf16x8(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

inline float dot_bf16(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const uint16_t*>(w);
    const auto* y = static_cast<const uint16_t*>(a);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(bf16x8(x + i + 8 * k), bf16x8(y + i + 8 * k), acc[k]);
    }
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += bf16_to_f32(x[i]) * bf16_to_f32(y[i]);
    return sum;
}

inline __m256i load256(const void* p) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Two blocks per step with separate accumulators, combined at the end.
inline float dot_q8_0(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const block_q8_0*>(w);
    const auto* y = static_cast<const block_q8_0*>(a);
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const __m256i p0 = dot_s8s8(load256(x[b].qs), load256(y[b].qs));
        const __m256i p1 = dot_s8s8(load256(x[b + 1].qs), load256(y[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[b].d) * h2f(y[b].d)), _mm256_cvtepi32_ps(p0),
                               acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[b + 1].d) * h2f(y[b + 1].d)),
                               _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; b < nb; ++b) {
        const __m256i p = dot_s8s8(load256(x[b].qs), load256(y[b].qs));
        acc0 =
            _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[b].d) * h2f(y[b].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

// 6-bit scales and mins of a Q4_K block as 8 + 8 bytes.
inline void q4_K_scales(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = static_cast<uint8_t>((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
        mn[j + 4] = static_cast<uint8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

inline float dot_q4_K(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const block_q4_K*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    float acc_m = 0.0f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        uint8_t sc[8], mn[8];
        q4_K_scales(x[b].scales, sc, mn);
        // Mins against the Q8_K sums of 16: sub-block j covers bsums 2j and 2j+1.
        const __m128i bs =
            _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y[b].bsums)),
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(y[b].bsums + 8)));
        const __m128i mins =
            _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn)));
        const __m128i pm = _mm_madd_epi16(mins, bs);
        __m128i s4 = _mm_add_epi32(pm, _mm_unpackhi_epi64(pm, pm));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
        const int32_t summs = _mm_cvtsi128_si32(s4);

        const uint8_t* q4 = x[b].qs;
        const int8_t* q8 = y[b].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
            const __m256i bytes = load256(q4 + 32 * k);
            const __m256i lo = _mm256_and_si256(bytes, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4);
            const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(q8 + 64 * k)),
                                                  _mm256_set1_epi16(sc[2 * k]));
            const __m256i phi =
                _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(q8 + 64 * k + 32)),
                                  _mm256_set1_epi16(sc[2 * k + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
        }
        const float d = y[b].d * h2f(x[b].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc_m -= y[b].d * h2f(x[b].dmin) * static_cast<float>(summs);
    }
    return hsum(acc) + acc_m;
}

inline float dot_q2_K(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const block_q2_K*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    float acc_m = 0.0f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const __m128i sb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales));
        const __m128i scales8 = _mm_and_si128(sb, m4);
        const __m128i mins8 = _mm_and_si128(_mm_srli_epi16(sb, 4), m4);
        // Mins against the 16 Q8_K sums.
        const __m256i pm = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mins8), load256(y[b].bsums));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(pm), _mm256_extracti128_si256(pm, 1));
        s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
        const int32_t summs = _mm_cvtsi128_si32(s4);

        // Scales as bytes in both 128-bit lanes; per group, lane 0 takes scale j, lane 1 j + 1.
        const __m256i sc2 = _mm256_broadcastsi128_si256(scales8);
        const uint8_t* q2 = x[b].qs;
        const int8_t* q8 = y[b].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i bits = load256(q2 + 32 * h);
            for (int g = 0; g < 4; ++g) {
                const int j = 8 * h + 2 * g;
                const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), m3);
                const __m256i p = _mm256_maddubs_epi16(codes, load256(q8 + 128 * h + 32 * g));
                const __m256i sel =
                    _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(0x8000 | j)),
                                      _mm_set1_epi16(static_cast<int16_t>(0x8000 | (j + 1))));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_shuffle_epi8(sc2, sel)));
            }
        }
        const float d = y[b].d * h2f(x[b].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc_m -= y[b].d * h2f(x[b].dmin) * static_cast<float>(summs);
    }
    return hsum(acc) + acc_m;
}

inline float dot_iq2_xxs(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const block_iq2_xxs*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    const detail::iq2_tables& tb = detail::iq2();
    const uint64_t* grid = kIq2xxsGrid;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const int8_t* q8 = y[b].qs;
        __m256i sumi0 = _mm256_setzero_si256(), sumi1 = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib += 2) {
            uint32_t a0[2], a1[2];
            std::memcpy(a0, x[b].qs + 4 * ib, sizeof(a0));
            std::memcpy(a1, x[b].qs + 4 * ib + 4, sizeof(a1));
            const __m256i g0 = _mm256_setr_epi64x(static_cast<int64_t>(grid[a0[0] & 0xFF]),
                                                  static_cast<int64_t>(grid[(a0[0] >> 8) & 0xFF]),
                                                  static_cast<int64_t>(grid[(a0[0] >> 16) & 0xFF]),
                                                  static_cast<int64_t>(grid[a0[0] >> 24]));
            const __m256i g1 = _mm256_setr_epi64x(static_cast<int64_t>(grid[a1[0] & 0xFF]),
                                                  static_cast<int64_t>(grid[(a1[0] >> 8) & 0xFF]),
                                                  static_cast<int64_t>(grid[(a1[0] >> 16) & 0xFF]),
                                                  static_cast<int64_t>(grid[a1[0] >> 24]));
            const __m256i s0 =
                _mm256_setr_epi64x(static_cast<int64_t>(tb.sign_bytes[a0[1] & 127]),
                                   static_cast<int64_t>(tb.sign_bytes[(a0[1] >> 7) & 127]),
                                   static_cast<int64_t>(tb.sign_bytes[(a0[1] >> 14) & 127]),
                                   static_cast<int64_t>(tb.sign_bytes[(a0[1] >> 21) & 127]));
            const __m256i s1 =
                _mm256_setr_epi64x(static_cast<int64_t>(tb.sign_bytes[a1[1] & 127]),
                                   static_cast<int64_t>(tb.sign_bytes[(a1[1] >> 7) & 127]),
                                   static_cast<int64_t>(tb.sign_bytes[(a1[1] >> 14) & 127]),
                                   static_cast<int64_t>(tb.sign_bytes[(a1[1] >> 21) & 127]));
            const __m256i y0 = _mm256_sign_epi8(load256(q8 + 32 * ib), s0);
            const __m256i y1 = _mm256_sign_epi8(load256(q8 + 32 * ib + 32), s1);
            const __m256i p0 = _mm256_maddubs_epi16(g0, y0);
            const __m256i p1 = _mm256_maddubs_epi16(g1, y1);
            const auto ls0 = static_cast<int16_t>(2 * (a0[1] >> 28) + 1);
            const auto ls1 = static_cast<int16_t>(2 * (a1[1] >> 28) + 1);
            sumi0 = _mm256_add_epi32(sumi0, _mm256_madd_epi16(p0, _mm256_set1_epi16(ls0)));
            sumi1 = _mm256_add_epi32(sumi1, _mm256_madd_epi16(p1, _mm256_set1_epi16(ls1)));
        }
        const float d = h2f(x[b].d) * y[b].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_add_epi32(sumi0, sumi1)),
                              acc);
    }
    return 0.125f * hsum(acc);
}

// ---------------------------------------------------------------------------------------------
// Matrix products over converted activations
// ---------------------------------------------------------------------------------------------

template <vec_dot_fn Dot>
void matmul_rows(const tensor& w, const void* act, size_t stride, const tensor& y, int64_t r0,
                 int64_t r1) {
    const int64_t n = w.ne[0];
    const int64_t n_tok = y.ne[1];
    const auto* base = static_cast<const uint8_t*>(act);
    for (int64_t o = r0; o < r1; ++o) {
        const uint8_t* wr = w.row_ptr(o);
        for (int64_t t = 0; t < n_tok; ++t)
            y.f32_row(t)[o] = Dot(wr, base + static_cast<size_t>(t) * stride, n);
    }
}

inline void fill(detail::kernel_table& k) {
    k.dot[detail::slot_f32] = dot_f32;
    k.dot[detail::slot_f16] = dot_f16;
    k.dot[detail::slot_bf16] = dot_bf16;
    k.dot[detail::slot_q8_0] = dot_q8_0;
    k.dot[detail::slot_q4_K] = dot_q4_K;
    k.dot[detail::slot_q2_K] = dot_q2_K;
    k.dot[detail::slot_iq2_xxs] = dot_iq2_xxs;
    k.q8_matmul[detail::slot_f32] = matmul_rows<dot_f32>;
    k.q8_matmul[detail::slot_f16] = matmul_rows<dot_f16>;
    k.q8_matmul[detail::slot_bf16] = matmul_rows<dot_bf16>;
    k.q8_matmul[detail::slot_q8_0] = matmul_rows<dot_q8_0>;
    k.q8_matmul[detail::slot_q4_K] = matmul_rows<dot_q4_K>;
    k.q8_matmul[detail::slot_q2_K] = matmul_rows<dot_q2_K>;
    k.q8_matmul[detail::slot_iq2_xxs] = matmul_rows<dot_iq2_xxs>;
    k.quantize_q8_0 = quantize_q8_0;
    k.quantize_q8_K = quantize_q8_K;
}

}  // namespace q8
}  // namespace magnetar::cpu::simd::MAGNETAR_SIMD_NS
