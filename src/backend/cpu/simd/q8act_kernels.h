// q8-activation kernels (GGML-compatible family) with 256-bit integer SIMD, compiled in each
// ISA translation unit: AVX2, and AVX-512 where VNNI replaces the u8 x s8 multiply-add pairs
// (that unit defines MAGNETAR_SIMD_VNNI).
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

#include <algorithm>
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
#if defined(MAGNETAR_SIMD_VNNI)
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

inline __m128i load128(const void* p) {
    return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// The two 128-bit halves of 8 int32 lanes added: lane j + lane j + 4.
inline __m128i add_halves(__m256i v) {
    return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

// Bytes ahead of the current block that the tiles prefetch in every weight row: far enough to
// cover memory latency at full bandwidth, near enough to stay inside the row tile's L1 share.
// Prefill tiles (several tokens per weight block) stream slowly and use the short distance;
// decode reads one row after the other, one sequential stream that crosses into the next row,
// and needs the long one to run at the memory's rate (768 bytes measured 0.8 of the read
// bandwidth there, 2048 about 0.95: `docs/log.md`).
constexpr int kPrefetchBytes = 768;
constexpr int kDecodePrefetchBytes = 2048;

inline void prefetch(const uint8_t* p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// ---------------------------------------------------------------------------------------------
// Quantized dot products as tiles: NR weight rows x NT activation rows, block by block.
//
// A kernel K provides block_elems, w_bytes / a_bytes (block sizes), an accumulator type acc,
// zero(acc), block<NR, NT>(w, a, acc) (w[r] / a[t] point at the current blocks) and
// finish(acc). Each (row, token) accumulator sees exactly the same operations in the same
// order whatever NR and NT are, so a tile, a single vec_dot and any grouping of rows or tokens
// give the same bits; the grouping only shares loads (activation blocks across rows, weight
// blocks and their unpacked scales across tokens).
// ---------------------------------------------------------------------------------------------

// Weights of 32-element blocks against Q8_0 activations: per block the weight bytes as signed
// int8 (Dec::codes) times the activation bytes (|w| * sign(a, w), pairs within int16), summed
// exactly in int32 lanes, then one FMA by the weight scale (Dec::scale) times the activation
// scale. Dec also gives the block type; its table (if any) is set up once per block call.
template <class Dec>
struct k_q8_0_act {
    static constexpr int64_t block_elems = 32;
    static constexpr size_t w_bytes = sizeof(typename Dec::block);
    static constexpr size_t a_bytes = sizeof(block_q8_0);
    struct acc {
        __m256 v;
    };
    static void zero(acc& a) { a.v = _mm256_setzero_ps(); }
    template <int NR, int NT>
    static void block(const uint8_t* const* w, const uint8_t* const* a, acc (&s)[NR][NT]) {
        const Dec dec;
        __m256i ya[NT];
        float dy[NT];
        for (int t = 0; t < NT; ++t) {
            const auto* y = reinterpret_cast<const block_q8_0*>(a[t]);
            ya[t] = load256(y->qs);
            dy[t] = h2f(y->d);
        }
#if defined(MAGNETAR_SIMD_VNNI)
        if constexpr (NT > 1) {
            // Token tiles with VNNI: the activation bytes offset by 128 (unsigned) once per
            // token, so each (row, token) is one dpbusd of them with the signed weight bytes,
            // started from -128 x the row's 4-element sums: per 4-element lane the same integer
            // as |w| x sign(a, w), without the two sign operations.
            __m256i yu[NT];
            __m256 dyv[NT];
            for (int t = 0; t < NT; ++t) {
                yu[t] = _mm256_xor_si256(ya[t], _mm256_set1_epi8(-128));
                dyv[t] = _mm256_set1_ps(dy[t]);
            }
            for (int r = 0; r < NR; ++r) {
                const auto* x = reinterpret_cast<const typename Dec::block*>(w[r]);
                const __m256i xv = dec.codes(*x);
                const __m256i base = _mm256_sub_epi32(
                    _mm256_setzero_si256(),
                    _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(-128), xv));
                const __m256 dx = _mm256_set1_ps(Dec::scale(*x));
                for (int t = 0; t < NT; ++t) {
                    const __m256i p = _mm256_dpbusd_epi32(base, yu[t], xv);
                    s[r][t].v = _mm256_fmadd_ps(_mm256_mul_ps(dx, dyv[t]), _mm256_cvtepi32_ps(p),
                                                s[r][t].v);
                }
            }
            return;
        }
#endif
        for (int r = 0; r < NR; ++r) {
            const auto* x = reinterpret_cast<const typename Dec::block*>(w[r]);
            const __m256i xv = dec.codes(*x);
            const __m256i ax = _mm256_sign_epi8(xv, xv);
            const float dx = Dec::scale(*x);
            for (int t = 0; t < NT; ++t) {
                const __m256i p = dot_u8s8(ax, _mm256_sign_epi8(ya[t], xv));
                s[r][t].v =
                    _mm256_fmadd_ps(_mm256_set1_ps(dx * dy[t]), _mm256_cvtepi32_ps(p), s[r][t].v);
            }
        }
    }
    static float finish(const acc& a) {
        return hsum(a.v);
    }
};

// Q8_0 x Q8_0: the codes as they are, scaled by both halves' scales.
struct dec_q8_0 {
    using block = block_q8_0;
    static_assert(QK8_0 == 32);
    __m256i codes(const block& x) const { return load256(x.qs); }
    static float scale(const block& x) { return h2f(x.d); }
};
using k_q8_0 = k_q8_0_act<dec_q8_0>;

// MXFP4 x Q8_0 (GGML's ggml_vec_dot_mxfp4_q8_0): the 32 nibbles of a block become signed bytes
// through a byte shuffle of the doubled E2M1 table (0, 1, 2, 3, 4, 6, 8, 12 and negatives);
// products of at most 12 x 127; the scale is 2^(e - 128) (the doubled table's half).
struct dec_mxfp4 {
    using block = block_mxfp4;
    static_assert(QK_MXFP4 == 32);
    const __m256i table = _mm256_broadcastsi128_si256(load128(kMxfp4Values));
    // Element j of the block at byte j: the low nibbles (elements 0-15) in the low 128-bit lane,
    // the high nibbles (16-31) in the high lane, each looked up in the table. Masking in 128-bit
    // halves and one lane insert measured faster than a broadcast, 256-bit shift and blend.
    __m256i codes(const block& x) const {
        const __m128i q = load128(x.qs);
        const __m128i m = _mm_set1_epi8(0x0F);
        const __m256i n =
            _mm256_setr_m128i(_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16(q, 4), m));
        return _mm256_shuffle_epi8(table, n);
    }
    static float scale(const block& x) { return detail::mxfp4_scale(x.e); }
};
using k_mxfp4 = k_q8_0_act<dec_mxfp4>;

// Q4_K x Q8_K: per 32-element sub-block, 4-bit codes times activation bytes (maddubs), times
// the 6-bit scale (madd); the mins against the activation's 16-element sums.
struct k_q4_K {
    static constexpr int64_t block_elems = QK_K;
    static constexpr size_t w_bytes = sizeof(block_q4_K);
    static constexpr size_t a_bytes = sizeof(block_q8_K);
    struct acc {
        __m256 v;
        __m128 m;
    };
    static void zero(acc& a) {
        a.v = _mm256_setzero_ps();
        a.m = _mm_setzero_ps();
    }
    // Scales (low 128 bits) and mins (high) as 8 + 8 int16, from the 12 packed bytes.
    static __m256i scales_mins(const uint8_t* s) {
        uint32_t u[4];
        std::memcpy(u, s, 12);
        constexpr uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
        u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
        const uint32_t m = u[1] & k1;
        u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
        u[2] = m;
        u[0] &= k1;
        return _mm256_cvtepu8_epi16(_mm_setr_epi32(static_cast<int>(u[0]), static_cast<int>(u[1]),
                                                   static_cast<int>(u[2]), static_cast<int>(u[3])));
    }
    template <int NR, int NT>
    static void block(const uint8_t* const* w, const uint8_t* const* a, acc (&s)[NR][NT]) {
        const __m256i m4 = _mm256_set1_epi8(0xF);
        __m128i bs[NT];  // sums of 32 activation codes, one per sub-block
        float dy[NT];
        for (int t = 0; t < NT; ++t) {
            const auto* y = reinterpret_cast<const block_q8_K*>(a[t]);
            bs[t] = _mm_hadd_epi16(load128(y->bsums), load128(y->bsums + 8));
            dy[t] = y->d;
        }
        for (int r = 0; r < NR; ++r) {
            const auto* x = reinterpret_cast<const block_q4_K*>(w[r]);
            const __m256i sm = scales_mins(x->scales);
            const __m256i sc = _mm256_permute2x128_si256(sm, sm, 0x00);
            const __m128i mins = _mm256_extracti128_si256(sm, 1);
            __m256i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
            for (int j = 0; j < 4; ++j) {
                // int16 lanes all holding scale 2j (low codes) / 2j + 1 (high codes).
                const __m256i s_lo =
                    _mm256_shuffle_epi8(sc, _mm256_set1_epi16((4 * j) | ((4 * j + 1) << 8)));
                const __m256i s_hi =
                    _mm256_shuffle_epi8(sc, _mm256_set1_epi16((4 * j + 2) | ((4 * j + 3) << 8)));
                const __m256i bits = load256(x->qs + 32 * j);
                const __m256i lo = _mm256_and_si256(bits, m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                for (int t = 0; t < NT; ++t) {
                    const int8_t* q8 = reinterpret_cast<const block_q8_K*>(a[t])->qs + 64 * j;
                    const __m256i pl =
                        _mm256_madd_epi16(s_lo, _mm256_maddubs_epi16(lo, load256(q8)));
                    const __m256i ph =
                        _mm256_madd_epi16(s_hi, _mm256_maddubs_epi16(hi, load256(q8 + 32)));
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(pl, ph));
                }
            }
            const float d = h2f(x->d);
            const float dmin = h2f(x->dmin);
            for (int t = 0; t < NT; ++t) {
                s[r][t].v = _mm256_fmadd_ps(_mm256_set1_ps(d * dy[t]), _mm256_cvtepi32_ps(sumi[t]),
                                            s[r][t].v);
                s[r][t].m = _mm_fmadd_ps(_mm_set1_ps(dmin * dy[t]),
                                         _mm_cvtepi32_ps(_mm_madd_epi16(mins, bs[t])), s[r][t].m);
            }
        }
    }
    static float finish(const acc& a) {
        __m128 m = _mm_add_ps(a.m, _mm_movehl_ps(a.m, a.m));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        return hsum(a.v) - _mm_cvtss_f32(m);
    }
};

// Q2_K x Q8_K: the 2-bit codes times activation bytes (maddubs), scaled per 16-element
// sub-block with one madd (scales selected by a byte shuffle); mins against the activation's
// 16-element sums. Token tiles unpack a row's codes and scales once for all their tokens; with
// VNNI the codes are multiplied by their scales once (bytes of at most 45) and each token takes
// one dpbusd. The integers per 4-element lane, and the float steps, are those of the one-row
// kernel this replaced, so the bits are too. (Zen 1 measured row / token tiles slower than one
// row at a time; Zen 4 with VNNI measured 1 x 8 tiles 1.8x faster in prefill, 1.16x on AVX2.)
struct k_q2_K {
    static constexpr int64_t block_elems = QK_K;
    static constexpr size_t w_bytes = sizeof(block_q2_K);
    static constexpr size_t a_bytes = sizeof(block_q8_K);
    struct acc {
        __m256 v;
        float m;
    };
    static void zero(acc& a) {
        a.v = _mm256_setzero_ps();
        a.m = 0.0f;
    }
    // Row part of a block: the 2-bit codes of its 8 groups of 32 and, per group, the int16
    // scales (lane 0 the group's first 16-element scale, lane 1 its second).
    template <int NR, int NT>
    static void block(const uint8_t* const* w, const uint8_t* const* a, acc (&s)[NR][NT]) {
        const __m256i m3 = _mm256_set1_epi8(3);
        const __m128i m4 = _mm_set1_epi8(0xF);
        for (int r = 0; r < NR; ++r) {
            const auto* x = reinterpret_cast<const block_q2_K*>(w[r]);
            const __m128i sb = load128(x->scales);
            const __m128i scales8 = _mm_and_si128(sb, m4);
            const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), m4));
            // Scales as bytes in both 128-bit lanes; per group, lane 0 takes scale j, lane 1 j + 1.
            const __m256i sc2 = _mm256_broadcastsi128_si256(scales8);
            __m256i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
            for (int h = 0; h < 2; ++h) {
                const __m256i bits = load256(x->qs + 32 * h);
                for (int g = 0; g < 4; ++g) {
                    const int j = 8 * h + 2 * g;
                    const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), m3);
                    const __m256i sel =
                        _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(0x8000 | j)),
                                          _mm_set1_epi16(static_cast<int16_t>(0x8000 | (j + 1))));
                    const __m256i ls = _mm256_shuffle_epi8(sc2, sel);
#if defined(MAGNETAR_SIMD_VNNI)
                    // Codes times their scale as bytes (at most 3 x 15, so the 16-bit multiply
                    // carries nothing into the neighbouring byte); one VNNI multiply-add a
                    // token, the same integers per 4-element lane.
                    const __m256i scaled = _mm256_mullo_epi16(codes, ls);
                    for (int t = 0; t < NT; ++t) {
                        const int8_t* q8 = reinterpret_cast<const block_q8_K*>(a[t])->qs;
                        sumi[t] =
                            _mm256_dpbusd_epi32(sumi[t], scaled, load256(q8 + 128 * h + 32 * g));
                    }
#else
                    for (int t = 0; t < NT; ++t) {
                        const int8_t* q8 = reinterpret_cast<const block_q8_K*>(a[t])->qs;
                        const __m256i p =
                            _mm256_maddubs_epi16(codes, load256(q8 + 128 * h + 32 * g));
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, ls));
                    }
#endif
                }
            }
            const float xd = h2f(x->d);
            const float xm = h2f(x->dmin);
            for (int t = 0; t < NT; ++t) {
                const auto* y = reinterpret_cast<const block_q8_K*>(a[t]);
                // Mins against the token's 16 Q8_K sums.
                const __m256i pm = _mm256_madd_epi16(mins16, load256(y->bsums));
                __m128i s4 = add_halves(pm);
                s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
                s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
                const int32_t summs = _mm_cvtsi128_si32(s4);
                s[r][t].v = _mm256_fmadd_ps(_mm256_set1_ps(y->d * xd), _mm256_cvtepi32_ps(sumi[t]),
                                            s[r][t].v);
                s[r][t].m -= y->d * xm * static_cast<float>(summs);
            }
        }
    }
    static float finish(const acc& a) {
        return hsum(a.v) + a.m;
    }
};

// IQ2_XXS x Q8_K. Per 8 weights one grid entry (8 magnitude bytes) and one sign pattern (8
// bytes of +-1) are loaded from L1-resident tables straight into 64-bit halves of a 128-bit
// register (movq / movhps, no lane inserts); the signs go onto the activation bytes; the two
// 16-element halves of a 32-element group are summed in int16 (at most 2 x 2 x 43 x 127) before
// the one multiply by the group's scale. The sign table is a compile-time constant (no
// first-use guard per block). Decode (one token) unrolls the 8 groups and unpacks their scales
// 2s + 1 once per block with SIMD (one byte shuffle per group; AVX-512: decode_sums); token
// tiles (1 row x 8 tokens) assemble each group's magnitudes and signs in 256 bits once for all
// their tokens (group_wide) and keep the scalar scale. Every path sums the same integers.
struct k_iq2_xxs {
    static constexpr int64_t block_elems = QK_K;
    static constexpr size_t w_bytes = sizeof(block_iq2_xxs);
    static constexpr size_t a_bytes = sizeof(block_q8_K);
    struct acc {
        __m128 v;
    };
    static void zero(acc& a) { a.v = _mm_setzero_ps(); }
    static __m128i pair(const uint64_t* tab, uint32_t i0, uint32_t i1) {
        const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(tab + i0));
        return _mm_castpd_si128(
            _mm_loadh_pd(_mm_castsi128_pd(lo), reinterpret_cast<const double*>(tab + i1)));
    }
    // The scales 2s + 1 of the 8 groups as int16: groups 0, 1, 4, 5 in words 1, 3, 5, 7 of the
    // low 128-bit lane, groups 2, 3, 6, 7 in the high lane (the 4-bit s is the top of each odd
    // 32-bit word of qs).
    static __m256i group_scales(const block_iq2_xxs* x) {
        const __m256i a = _mm256_srli_epi32(load256(x->qs), 28);
        const __m256i b = _mm256_srli_epi32(load256(x->qs + 16), 28);
        const __m256i p = _mm256_packs_epi32(a, b);
        return _mm256_or_si256(_mm256_add_epi16(p, p), _mm256_set1_epi16(1));
    }
    // Group ib's scale from group_scales' halves, in every int16 of 128 bits: word 1 + 2 (ib & 1)
    // + 4 (ib >> 2) of lane (ib >> 1) & 1.
    static __m128i group_scale(__m128i sc_lo, __m128i sc_hi, int ib) {
        const int wd = 2 * (ib & 1) + 1 + 4 * (ib >> 2);
        const __m128i sel = _mm_set1_epi16(static_cast<int16_t>((2 * wd) | ((2 * wd + 1) << 8)));
        return _mm_shuffle_epi8(((ib >> 1) & 1) ? sc_hi : sc_lo, sel);
    }
    // The magnitudes of the four 8-weight chunks whose grid indices are the bytes of idx
    // (chunk k in bytes 8k..8k+7).
    static __m256i magnitudes(uint32_t idx) {
        const uint64_t* grid = kIq2xxsGrid;
        return _mm256_setr_m128i(pair(grid, idx & 0xFF, (idx >> 8) & 0xFF),
                                 pair(grid, (idx >> 16) & 0xFF, idx >> 24));
    }
    // Group ib (32 weights) against every token: sumi[t] += the group's products times ls.
    template <int NT>
    static void group(const block_iq2_xxs* x, const uint8_t* const* a, int ib, __m128i ls,
                      __m128i (&sumi)[NT]) {
        const uint64_t* grid = kIq2xxsGrid;
        const uint64_t* sign = kIq2xxsSignBytes.v;
        uint32_t aux[2];
        std::memcpy(aux, x->qs + 4 * ib, sizeof(aux));
        const __m128i g0 = pair(grid, aux[0] & 0xFF, (aux[0] >> 8) & 0xFF);
        const __m128i g1 = pair(grid, (aux[0] >> 16) & 0xFF, aux[0] >> 24);
        const __m128i s0 = pair(sign, aux[1] & 127, (aux[1] >> 7) & 127);
        const __m128i s1 = pair(sign, (aux[1] >> 14) & 127, (aux[1] >> 21) & 127);
        for (int t = 0; t < NT; ++t) {
            const int8_t* q8 = reinterpret_cast<const block_q8_K*>(a[t])->qs + 32 * ib;
            const __m128i p0 = _mm_maddubs_epi16(g0, _mm_sign_epi8(load128(q8), s0));
            const __m128i p1 = _mm_maddubs_epi16(g1, _mm_sign_epi8(load128(q8 + 16), s1));
            sumi[t] = _mm_add_epi32(sumi[t], _mm_madd_epi16(_mm_add_epi16(p0, p1), ls));
        }
    }
#if defined(MAGNETAR_SIMD_VNNI)
    // Decode with AVX-512 (one row, one token): the 32 sign bytes of the block built at once
    // with SIMD (the 7-bit fields of the eight sign words, bit 7 their parity by a nibble
    // table), applied to the activation bytes through a byte mask; each group a 256-bit
    // maddubs and one VNNI multiply-add by its scale. The 8 int32 lanes of a group hold its
    // weights 4m..4m+3; adding the two 128-bit halves gives the lanes of the 128-bit path
    // (weights 4j..4j+3 and 16+4j..16+4j+3), so the integers, and the bits, are the same.
    static __m128i decode_sums(const block_iq2_xxs* x, const block_q8_K* y) {
        const __m256i lo = load256(x->qs);
        const __m256i hi = load256(x->qs + 16);
        // The sign word (odd 32-bit word) of each group, group g in word g.
        const __m256i sw =
            _mm256_permutex2var_epi32(lo, _mm256_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15), hi);
        const __m256i m7 = _mm256_set1_epi32(0x7F);
        __m256i sb = _mm256_or_si256(
            _mm256_or_si256(_mm256_and_si256(sw, m7),
                            _mm256_and_si256(_mm256_slli_epi32(sw, 1), _mm256_slli_epi32(m7, 8))),
            _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(sw, 2), _mm256_slli_epi32(m7, 16)),
                            _mm256_and_si256(_mm256_slli_epi32(sw, 3), _mm256_slli_epi32(m7, 24))));
        // 0x80 where a nibble has odd parity.
        const __m256i par = _mm256_broadcastsi128_si256(
            _mm_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0));
        const __m256i n4 = _mm256_set1_epi8(0x0F);
        sb = _mm256_or_si256(
            sb, _mm256_xor_si256(
                    _mm256_shuffle_epi8(par, _mm256_and_si256(sb, n4)),
                    _mm256_shuffle_epi8(par, _mm256_and_si256(_mm256_srli_epi16(sb, 4), n4))));
        alignas(32) uint32_t sign[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(sign), sb);
        const __m256i sc = group_scales(x);
        const __m128i sc_lo = _mm256_castsi256_si128(sc);
        const __m128i sc_hi = _mm256_extracti128_si256(sc, 1);
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t gi;
            std::memcpy(&gi, x->qs + 4 * ib, sizeof(gi));
            __m256i q = load256(y->qs + 32 * ib);
            q = _mm256_mask_mov_epi8(q, static_cast<__mmask32>(sign[ib]),
                                     _mm256_sub_epi8(_mm256_setzero_si256(), q));
            const __m256i ls = _mm256_broadcastsi128_si256(group_scale(sc_lo, sc_hi, ib));
            sumi = _mm256_dpwssd_epi32(sumi, _mm256_maddubs_epi16(magnitudes(gi), q), ls);
        }
        return add_halves(sumi);
    }
#endif
    // Group ib against every token of a tile, 256 bits at a time: the group's magnitudes and its
    // +-1 signs are assembled once and serve every token (one load, sign, maddubs and
    // multiply-add each). Lane m of sumi[t] holds weights 4m..4m+3 (see decode_sums).
    template <int NT>
    static void group_wide(const block_iq2_xxs* x, const uint8_t* const* a, int ib, __m256i ls,
                           __m256i (&sumi)[NT]) {
        const uint64_t* sign = kIq2xxsSignBytes.v;
        uint32_t aux[2];
        std::memcpy(aux, x->qs + 4 * ib, sizeof(aux));
        const __m256i g = magnitudes(aux[0]);
        const __m256i sg =
            _mm256_setr_m128i(pair(sign, aux[1] & 127, (aux[1] >> 7) & 127),
                              pair(sign, (aux[1] >> 14) & 127, (aux[1] >> 21) & 127));
        for (int t = 0; t < NT; ++t) {
            const int8_t* q8 = reinterpret_cast<const block_q8_K*>(a[t])->qs + 32 * ib;
            const __m256i p = _mm256_maddubs_epi16(g, _mm256_sign_epi8(load256(q8), sg));
#if defined(MAGNETAR_SIMD_VNNI)
            sumi[t] = _mm256_dpwssd_epi32(sumi[t], p, ls);
#else
            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, ls));
#endif
        }
    }
    template <int NR, int NT>
    static void block(const uint8_t* const* w, const uint8_t* const* a, acc (&s)[NR][NT]) {
        for (int r = 0; r < NR; ++r) {
            const auto* x = reinterpret_cast<const block_iq2_xxs*>(w[r]);
            __m128i sumi[NT];
            for (int t = 0; t < NT; ++t) sumi[t] = _mm_setzero_si128();
            if constexpr (NT == 1) {
#if defined(MAGNETAR_SIMD_VNNI)
                sumi[0] = decode_sums(x, reinterpret_cast<const block_q8_K*>(a[0]));
#else
                const __m256i sc = group_scales(x);
                const __m128i sc_lo = _mm256_castsi256_si128(sc);
                const __m128i sc_hi = _mm256_extracti128_si256(sc, 1);
#pragma GCC unroll 8
                for (int ib = 0; ib < 8; ++ib)
                    group<NT>(x, a, ib, group_scale(sc_lo, sc_hi, ib), sumi);
#endif
            } else {
                __m256i wide[NT];
                for (int t = 0; t < NT; ++t) wide[t] = _mm256_setzero_si256();
                for (int ib = 0; ib < 8; ++ib) {
                    const uint32_t sc = static_cast<uint32_t>(x->qs[4 * ib + 3]) >> 12;
                    group_wide<NT>(x, a, ib, _mm256_set1_epi16(static_cast<int16_t>(2 * sc + 1)),
                                   wide);
                }
                for (int t = 0; t < NT; ++t) sumi[t] = add_halves(wide[t]);
            }
            const float d = 0.125f * h2f(x->d);
            for (int t = 0; t < NT; ++t) {
                const float dy = reinterpret_cast<const block_q8_K*>(a[t])->d;
                s[r][t].v = _mm_fmadd_ps(_mm_set1_ps(d * dy), _mm_cvtepi32_ps(sumi[t]), s[r][t].v);
            }
        }
    }
    static float finish(const acc& a) {
        __m128 m = _mm_add_ps(a.v, _mm_movehl_ps(a.v, a.v));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        return _mm_cvtss_f32(m);
    }
};

// NR weight rows x NT activation rows over nb blocks; out[r * NT + t].
template <class K, int NR, int NT>
inline void tile(const uint8_t* const* wr, const uint8_t* const* ar, int64_t nb, float* out) {
    typename K::acc s[NR][NT];
    for (int r = 0; r < NR; ++r) {
        for (int t = 0; t < NT; ++t) K::zero(s[r][t]);
    }
    const uint8_t* w[NR];
    const uint8_t* a[NT];
    for (int r = 0; r < NR; ++r) w[r] = wr[r];
    for (int t = 0; t < NT; ++t) a[t] = ar[t];
    // About one prefetch per cache line of each row (every block for blocks of 33 bytes or more).
    constexpr int64_t pf_every = std::max<int64_t>(1, 64 / static_cast<int64_t>(K::w_bytes));
    constexpr int pf_bytes = NT == 1 ? kDecodePrefetchBytes : kPrefetchBytes;
    for (int64_t b = 0; b < nb; ++b) {
        if (b % pf_every == 0) {
            for (int r = 0; r < NR; ++r) prefetch(w[r] + pf_bytes);
        }
        K::template block<NR, NT>(w, a, s);
        for (int r = 0; r < NR; ++r) w[r] += K::w_bytes;
        for (int t = 0; t < NT; ++t) a[t] += K::a_bytes;
    }
    for (int r = 0; r < NR; ++r) {
        for (int t = 0; t < NT; ++t) out[r * NT + t] = K::finish(s[r][t]);
    }
}

template <class K>
float dot_tile(const void* w, const void* a, int64_t n) {
    const uint8_t* wr[1] = {static_cast<const uint8_t*>(w)};
    const uint8_t* ar[1] = {static_cast<const uint8_t*>(a)};
    float out;
    tile<K, 1, 1>(wr, ar, n / K::block_elems, &out);
    return out;
}

// ---------------------------------------------------------------------------------------------
// Matrix products over converted activations
// ---------------------------------------------------------------------------------------------

// Rows [o, o + NR) against tokens [t0, t0 + n) in tiles of at most NT tokens.
template <class K, int NR, int NT>
void rows_tokens(const tensor& w, const uint8_t* act, size_t stride, const tensor& y, int64_t o,
                 int64_t t0, int64_t n) {
    const int64_t nb = w.ne[0] / K::block_elems;
    const uint8_t* wr[NR];
    for (int r = 0; r < NR; ++r) wr[r] = w.row_ptr(o + r);
    int64_t t = t0;
    for (; t + NT <= t0 + n; t += NT) {
        const uint8_t* ar[NT];
        for (int k = 0; k < NT; ++k) ar[k] = act + static_cast<size_t>(t + k) * stride;
        float out[NR * NT];
        tile<K, NR, NT>(wr, ar, nb, out);
        for (int k = 0; k < NT; ++k) {
            float* yt = y.f32_row(t + k);
            for (int r = 0; r < NR; ++r) yt[o + r] = out[r * NT + k];
        }
    }
    if constexpr (NT > 1) {
        if (t < t0 + n) rows_tokens<K, NR, NT - 1>(w, act, stride, y, o, t, t0 + n - t);
    }
}

// Activation bytes of a prefill token tile kept in L2 while a row group sweeps it.
constexpr size_t kActTileBytes = 256 * 1024;

// Decode (one token): one row after the other, so the weights are read as one sequential
// stream (rows sharing activation loads, 4 at a time, read four streams and measured at half
// the memory's rate on Zen 4: `docs/log.md`). Prefill: RP rows x TP tokens per tile, so each
// weight block (and its unpacked scales) serves TP tokens and each activation block RP rows;
// token tiles sized for L2.
template <class K, int RP, int TP>
void matmul_tiles(const tensor& w, const void* act_v, size_t stride, const tensor& y, int64_t r0,
                  int64_t r1) {
    const auto* act = static_cast<const uint8_t*>(act_v);
    const int64_t n_tok = y.ne[1];
    if (n_tok == 1) {
        for (int64_t o = r0; o < r1; ++o) rows_tokens<K, 1, 1>(w, act, stride, y, o, 0, 1);
        return;
    }
    const int64_t tok_tile = std::max<int64_t>(
        TP, static_cast<int64_t>(kActTileBytes / std::max<size_t>(stride, 1)) / TP * TP);
    for (int64_t t0 = 0; t0 < n_tok; t0 += tok_tile) {
        const int64_t nt = std::min(tok_tile, n_tok - t0);
        int64_t o = r0;
        for (; o + RP <= r1; o += RP) rows_tokens<K, RP, TP>(w, act, stride, y, o, t0, nt);
        for (; o < r1; ++o) rows_tokens<K, 1, TP>(w, act, stride, y, o, t0, nt);
    }
}

inline void fill(detail::kernel_table& k) {
    k.dot[detail::slot_f32] = dot_f32;
    k.dot[detail::slot_f16] = dot_f16;
    k.dot[detail::slot_bf16] = dot_bf16;
    k.dot[detail::slot_q8_0] = dot_tile<k_q8_0>;
    k.dot[detail::slot_q4_K] = dot_tile<k_q4_K>;
    k.dot[detail::slot_q2_K] = dot_tile<k_q2_K>;
    k.dot[detail::slot_iq2_xxs] = dot_tile<k_iq2_xxs>;
    k.dot[detail::slot_mxfp4] = dot_tile<k_mxfp4>;
    k.q8_matmul[detail::slot_f32] = detail::matmul_rows<dot_f32>;
    k.q8_matmul[detail::slot_f16] = detail::matmul_rows<dot_f16>;
    k.q8_matmul[detail::slot_bf16] = detail::matmul_rows<dot_bf16>;
#if defined(MAGNETAR_SIMD_VNNI)
    // 4 x 4 tiles fit AVX-512's 32 vector registers (measured 1.05x over 2 x 4 there).
    k.q8_matmul[detail::slot_q8_0] = matmul_tiles<k_q8_0, 4, 4>;
#else
    k.q8_matmul[detail::slot_q8_0] = matmul_tiles<k_q8_0, 2, 4>;
#endif
    k.q8_matmul[detail::slot_q4_K] = matmul_tiles<k_q4_K, 2, 4>;
    k.q8_matmul[detail::slot_q2_K] = matmul_tiles<k_q2_K, 1, 8>;
    k.q8_matmul[detail::slot_iq2_xxs] = matmul_tiles<k_iq2_xxs, 1, 8>;
    k.q8_matmul[detail::slot_mxfp4] = matmul_tiles<k_mxfp4, 2, 4>;
    k.quantize_q8_0 = quantize_q8_0;
    k.quantize_q8_K = quantize_q8_K;
}

}  // namespace q8
}  // namespace magnetar::cpu::simd::MAGNETAR_SIMD_NS
