// f32-activation kernels, written once against a 16-lane vector interface V and compiled in
// each ISA translation unit (AVX2: two 8-lane halves, AVX-512: one register).
//
// Owns: the per-type in-register dequantizers and the row x token tiling. Every dequantized
// weight is bit-identical to the scalar dequantize_row_* (same float operations, not fused),
// and element i of a row is multiply-added into lane i % 16 in increasing i, then the lanes
// are reduced pairwise (V::reduce). That is the canonical order of simd.h, computed by the
// scalar twin in simd_scalar.cpp too.
//
// The including file defines MAGNETAR_SIMD_NS (its namespace) and, inside it, a struct V:
//   vf, vi                16 float / int32 lanes
//   zero, set1, load      vf from 16 floats (unaligned)
//   fma(a, b, c)          a * b + c with one rounding
//   mul, sub              lane-wise, rounded
//   cvt                   vi -> vf
//   u8 / i8               16 bytes zero- / sign-extended to vi
//   nib_i8(p, s, tab)     16 bytes shifted right by s (0 or 4), low nibbles looked up in the
//                         16 signed bytes tab, sign-extended to vi
//   and_, srl             lane-wise on vi
//   f16 / bf16            16 half / bfloat16 values -> vf (exact)
//   pair(a, b)            vf from two 8-float rows (lanes 0-7 from a, 8-15 from b)
//   flip(v, a, b)         v xor two 8-lane sign masks
//   h2f                   one half -> float (exact)
//   reduce                the pairwise lane sum
// No include guard: each ISA translation unit includes this file once, in its own namespace.

#ifndef MAGNETAR_SIMD_NS
#error "define MAGNETAR_SIMD_NS and V before including f32act_kernels.h"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/simd/simd_internal.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

namespace magnetar::cpu::simd::MAGNETAR_SIMD_NS {

using vf = V::vf;

// Multiply-adds one 16-element chunk of weights of row r into every token's accumulator.
template <int R, int T>
inline void fma_chunk(vf (&acc)[R][T], int r, vf w, const float* const* x, int64_t off) {
    for (int t = 0; t < T; ++t) acc[r][t] = V::fma(w, V::load(x[t] + off), acc[r][t]);
}

// ---------------------------------------------------------------------------------------------
// Per-type decoders. block<R, T>(w, x, acc): w[r] points at the current block of row r, x[t]
// at the block's first element of token t. Chunks are visited in increasing element order.
// ---------------------------------------------------------------------------------------------

struct dec_f32 {
    static constexpr int64_t block_elems = 16;
    static constexpr size_t block_bytes = 64;
    static constexpr bool any_length = true;
    static float scalar(const uint8_t* p, int64_t i) {
        float v;
        std::memcpy(&v, p + 4 * i, 4);
        return v;
    }
    template <int R, int T>
    static void block(const uint8_t* const* w, const float* const* x, vf (&acc)[R][T]) {
        for (int r = 0; r < R; ++r)
            fma_chunk(acc, r, V::load(reinterpret_cast<const float*>(w[r])), x, 0);
    }
};

struct dec_f16 {
    static constexpr int64_t block_elems = 16;
    static constexpr size_t block_bytes = 32;
    static constexpr bool any_length = true;
    static float scalar(const uint8_t* p, int64_t i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        return fp16_to_f32(h);
    }
    template <int R, int T>
    static void block(const uint8_t* const* w, const float* const* x, vf (&acc)[R][T]) {
        for (int r = 0; r < R; ++r)
            fma_chunk(acc, r, V::f16(reinterpret_cast<const uint16_t*>(w[r])), x, 0);
    }
};

struct dec_bf16 {
    static constexpr int64_t block_elems = 16;
    static constexpr size_t block_bytes = 32;
    static constexpr bool any_length = true;
    static float scalar(const uint8_t* p, int64_t i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        return bf16_to_f32(h);
    }
    template <int R, int T>
    static void block(const uint8_t* const* w, const float* const* x, vf (&acc)[R][T]) {
        for (int r = 0; r < R; ++r)
            fma_chunk(acc, r, V::bf16(reinterpret_cast<const uint16_t*>(w[r])), x, 0);
    }
};

// x = float(q) * d.
struct dec_q8_0 {
    static constexpr int64_t block_elems = QK8_0;
    static constexpr size_t block_bytes = sizeof(block_q8_0);
    static constexpr bool any_length = false;
    template <int R, int T>
    static void block(const uint8_t* const* w, const float* const* x, vf (&acc)[R][T]) {
        for (int r = 0; r < R; ++r) {
            const auto* b = reinterpret_cast<const block_q8_0*>(w[r]);
            const vf d = V::set1(V::h2f(b->d));
            fma_chunk(acc, r, V::mul(V::cvt(V::i8(b->qs)), d), x, 0);
            fma_chunk(acc, r, V::mul(V::cvt(V::i8(b->qs + 16)), d), x, 16);
        }
    }
};

// x = (d * sc) * float(nibble) - (dmin * m) per sub-block of 32.
struct dec_q4_K {
    static constexpr int64_t block_elems = QK_K;
    static constexpr size_t block_bytes = sizeof(block_q4_K);
    static constexpr bool any_length = false;
    template <int R, int T>
    static void block(const uint8_t* const* w, const float* const* x, vf (&acc)[R][T]) {
        float d1[R][8], m1[R][8];
        for (int r = 0; r < R; ++r) {
            const auto* b = reinterpret_cast<const block_q4_K*>(w[r]);
            const float d = V::h2f(b->d);
            const float mn = V::h2f(b->dmin);
            const uint8_t* s = b->scales;
            for (int j = 0; j < 4; ++j) {
                d1[r][j] = d * static_cast<float>(s[j] & 63);
                m1[r][j] = mn * static_cast<float>(s[j + 4] & 63);
                d1[r][j + 4] = d * static_cast<float>((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
                m1[r][j + 4] = mn * static_cast<float>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
            }
        }
        for (int k = 0; k < 4; ++k) {
            for (int h = 0; h < 4; ++h) {
                const int j = 2 * k + (h >> 1);
                for (int r = 0; r < R; ++r) {
                    const auto* b = reinterpret_cast<const block_q4_K*>(w[r]);
                    const V::vi bytes = V::u8(b->qs + 32 * k + 16 * (h & 1));
                    const V::vi q = h < 2 ? V::and_(bytes, 0xF) : V::srl(bytes, 4);
                    const vf wv = V::sub(V::mul(V::set1(d1[r][j]), V::cvt(q)), V::set1(m1[r][j]));
                    fma_chunk(acc, r, wv, x, 64 * k + 16 * h);
                }
            }
        }
    }
};

// x = (d * (sc & 15)) * float(code) - (dmin * (sc >> 4)) per sub-block of 16.
struct dec_q2_K {
    static constexpr int64_t block_elems = QK_K;
    static constexpr size_t block_bytes = sizeof(block_q2_K);
    static constexpr bool any_length = false;
    template <int R, int T>
    static void block(const uint8_t* const* w, const float* const* x, vf (&acc)[R][T]) {
        float dl[R][16], ml[R][16];
        for (int r = 0; r < R; ++r) {
            const auto* b = reinterpret_cast<const block_q2_K*>(w[r]);
            const float d = V::h2f(b->d);
            const float mn = V::h2f(b->dmin);
            for (int j = 0; j < 16; ++j) {
                dl[r][j] = d * static_cast<float>(b->scales[j] & 0xF);
                ml[r][j] = mn * static_cast<float>(b->scales[j] >> 4);
            }
        }
        for (int n = 0; n < 2; ++n) {
            for (int g = 0; g < 4; ++g) {
                for (int s = 0; s < 2; ++s) {
                    const int j = 8 * n + 2 * g + s;
                    for (int r = 0; r < R; ++r) {
                        const auto* b = reinterpret_cast<const block_q2_K*>(w[r]);
                        const V::vi q = V::and_(V::srl(V::u8(b->qs + 32 * n + 16 * s), 2 * g), 3);
                        const vf wv =
                            V::sub(V::mul(V::set1(dl[r][j]), V::cvt(q)), V::set1(ml[r][j]));
                        fma_chunk(acc, r, wv, x, 128 * n + 32 * g + 16 * s);
                    }
                }
            }
        }
    }
};

// x = ((d * (0.5 + s)) * 0.25 * magnitude) with the sign bit flipped for negative entries.
struct dec_iq2_xxs {
    static constexpr int64_t block_elems = QK_K;
    static constexpr size_t block_bytes = sizeof(block_iq2_xxs);
    static constexpr bool any_length = false;
    template <int R, int T>
    static void block(const uint8_t* const* w, const float* const* x, vf (&acc)[R][T]) {
        const detail::iq2_tables& tb = detail::iq2();
        float d[R];
        for (int r = 0; r < R; ++r) d[r] = V::h2f(reinterpret_cast<const block_iq2_xxs*>(w[r])->d);
        for (int ib = 0; ib < 8; ++ib) {
            for (int r = 0; r < R; ++r) {
                const auto* b = reinterpret_cast<const block_iq2_xxs*>(w[r]);
                uint32_t a[2];
                std::memcpy(a, b->qs + 4 * ib, sizeof(a));
                const vf db = V::set1(d[r] * (0.5f + static_cast<float>(a[1] >> 28)) * 0.25f);
                const vf w0 =
                    V::mul(db, V::pair(tb.grid[a[0] & 0xFF], tb.grid[(a[0] >> 8) & 0xFF]));
                fma_chunk(acc, r,
                          V::flip(w0, tb.sign_mask[a[1] & 127], tb.sign_mask[(a[1] >> 7) & 127]), x,
                          32 * ib);
                const vf w1 =
                    V::mul(db, V::pair(tb.grid[(a[0] >> 16) & 0xFF], tb.grid[a[0] >> 24]));
                fma_chunk(
                    acc, r,
                    V::flip(w1, tb.sign_mask[(a[1] >> 14) & 127], tb.sign_mask[(a[1] >> 21) & 127]),
                    x, 32 * ib + 16);
            }
        }
    }
};

// x = float(kMxfp4Values[code]) * 2^(e - 128): elements 0-15 from the low nibbles, 16-31 from
// the high nibbles; the scale from the exponent byte's bits (detail::mxfp4_scale).
struct dec_mxfp4 {
    static constexpr int64_t block_elems = QK_MXFP4;
    static constexpr size_t block_bytes = sizeof(block_mxfp4);
    static constexpr bool any_length = false;
    template <int R, int T>
    static void block(const uint8_t* const* w, const float* const* x, vf (&acc)[R][T]) {
        for (int r = 0; r < R; ++r) {
            const auto* b = reinterpret_cast<const block_mxfp4*>(w[r]);
            const vf d = V::set1(detail::mxfp4_scale(b->e));
            fma_chunk(acc, r, V::mul(V::cvt(V::nib_i8(b->qs, 0, kMxfp4Values)), d), x, 0);
            fma_chunk(acc, r, V::mul(V::cvt(V::nib_i8(b->qs, 4, kMxfp4Values)), d), x, 16);
        }
    }
};

// ---------------------------------------------------------------------------------------------
// Tiles and the rows driver
// ---------------------------------------------------------------------------------------------

// Bytes ahead of the current block prefetched in every weight row.
constexpr int64_t kPrefetchBytes = 1024;

// R weight rows (starting at output index o) x T tokens over the whole row length.
template <class D, int R, int T>
void tile(const uint8_t* const* wrow, int64_t n_in, const float* const* xt, float* const* yt,
          int64_t o) {
    vf acc[R][T];
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) acc[r][t] = V::zero();
    }
    const uint8_t* w[R];
    const float* x[T];
    for (int r = 0; r < R; ++r) w[r] = wrow[r];
    for (int t = 0; t < T; ++t) x[t] = xt[t];
    const int64_t nb = n_in / D::block_elems;
    // One software prefetch per cache line of each row, kPrefetchBytes ahead: the hardware
    // prefetcher alone leaves the R concurrent row streams short of the read bandwidth.
    constexpr int64_t pf_every = std::max<int64_t>(1, 64 / static_cast<int64_t>(D::block_bytes));
    for (int64_t b = 0; b < nb; ++b) {
        if (b % pf_every == 0) {
            for (int r = 0; r < R; ++r)
                _mm_prefetch(reinterpret_cast<const char*>(w[r] + kPrefetchBytes), _MM_HINT_T0);
        }
        D::template block<R, T>(w, x, acc);
        for (int r = 0; r < R; ++r) w[r] += D::block_bytes;
        for (int t = 0; t < T; ++t) x[t] += D::block_elems;
    }
    if constexpr (D::any_length) {
        // A last partial chunk: weights and activations zero-padded to 16 lanes.
        const int64_t rem = n_in - nb * D::block_elems;
        if (rem > 0) {
            alignas(64) float wb[16] = {};
            alignas(64) float xb[T][16] = {};
            const float* xp[T];
            for (int t = 0; t < T; ++t) {
                std::memcpy(xb[t], x[t], static_cast<size_t>(rem) * sizeof(float));
                xp[t] = xb[t];
            }
            for (int r = 0; r < R; ++r) {
                for (int64_t i = 0; i < rem; ++i) wb[i] = D::scalar(w[r], i);
                fma_chunk(acc, r, V::load(wb), xp, 0);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) yt[t][o + r] = V::reduce(acc[r][t]);
    }
}

// Tokens [0, n) of one row with tiles of at most T tokens (n < T handled by smaller tiles).
template <class D, int T>
void row_tokens(const uint8_t* w, int64_t n_in, const float* const* x, float* const* y, int64_t n,
                int64_t o) {
    const uint8_t* const wr[1] = {w};
    int64_t t = 0;
    for (; t + T <= n; t += T) tile<D, 1, T>(wr, n_in, x + t, y + t, o);
    if constexpr (T > 1) {
        if (t < n) row_tokens<D, T - 1>(w, n_in, x + t, y + t, n - t, o);
    }
}

// Bytes of weights / activations kept hot while a prefill tile is swept (L2-sized).
constexpr size_t kRowTileBytes = 96 * 1024;
constexpr size_t kTokenTileBytes = 192 * 1024;

// Decode (one token): RD rows at a time share each activation load. Prefill: rows and tokens
// are blocked so a row tile stays in L2 while a token tile passes over it, and each weight
// row is dequantized once per TP tokens.
template <class D, int RD, int TP>
void rows(const tensor& w, const float* const* x, float* const* y, int64_t n_tok, int64_t r0,
          int64_t r1) {
    const int64_t n_in = w.ne[0];
    if (n_tok == 1) {
        int64_t o = r0;
        for (; o + RD <= r1; o += RD) {
            const uint8_t* wr[RD];
            for (int r = 0; r < RD; ++r) wr[r] = w.row_ptr(o + r);
            tile<D, RD, 1>(wr, n_in, x, y, o);
        }
        for (; o < r1; ++o) {
            const uint8_t* const wr[1] = {w.row_ptr(o)};
            tile<D, 1, 1>(wr, n_in, x, y, o);
        }
        return;
    }
    const size_t rb = std::max<size_t>(1, w.nb[1]);
    const int64_t rows_per_tile = std::max<int64_t>(1, static_cast<int64_t>(kRowTileBytes / rb));
    const int64_t tok_per_tile = std::max<int64_t>(
        TP, static_cast<int64_t>(kTokenTileBytes / (static_cast<size_t>(n_in) * sizeof(float))) /
                TP * TP);
    for (int64_t rt = r0; rt < r1; rt += rows_per_tile) {
        const int64_t re = std::min(r1, rt + rows_per_tile);
        for (int64_t tt = 0; tt < n_tok; tt += tok_per_tile) {
            const int64_t nt = std::min(n_tok - tt, tok_per_tile);
            for (int64_t o = rt; o < re; ++o)
                row_tokens<D, TP>(w.row_ptr(o), n_in, x + tt, y + tt, nt, o);
        }
    }
}

// Fills the f32-activation entries of a kernel table with this level's kernels.
template <int RD, int TP>
void fill_f32act(detail::kernel_table& k) {
    using detail::matmul_wrap;
    k.rows[detail::slot_f32] = rows<dec_f32, RD, TP>;
    k.rows[detail::slot_f16] = rows<dec_f16, RD, TP>;
    k.rows[detail::slot_bf16] = rows<dec_bf16, RD, TP>;
    k.rows[detail::slot_q8_0] = rows<dec_q8_0, RD, TP>;
    k.rows[detail::slot_q4_K] = rows<dec_q4_K, RD, TP>;
    k.rows[detail::slot_q2_K] = rows<dec_q2_K, RD, TP>;
    k.rows[detail::slot_iq2_xxs] = rows<dec_iq2_xxs, RD, TP>;
    k.rows[detail::slot_mxfp4] = rows<dec_mxfp4, RD, TP>;
    k.matmul[detail::slot_f32] = matmul_wrap<rows<dec_f32, RD, TP>>;
    k.matmul[detail::slot_f16] = matmul_wrap<rows<dec_f16, RD, TP>>;
    k.matmul[detail::slot_bf16] = matmul_wrap<rows<dec_bf16, RD, TP>>;
    k.matmul[detail::slot_q8_0] = matmul_wrap<rows<dec_q8_0, RD, TP>>;
    k.matmul[detail::slot_q4_K] = matmul_wrap<rows<dec_q4_K, RD, TP>>;
    k.matmul[detail::slot_q2_K] = matmul_wrap<rows<dec_q2_K, RD, TP>>;
    k.matmul[detail::slot_iq2_xxs] = matmul_wrap<rows<dec_iq2_xxs, RD, TP>>;
    k.matmul[detail::slot_mxfp4] = matmul_wrap<rows<dec_mxfp4, RD, TP>>;
}

}  // namespace magnetar::cpu::simd::MAGNETAR_SIMD_NS
