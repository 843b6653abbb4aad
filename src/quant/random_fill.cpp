// Synthetic weight rows (see random_fill.h for the contract).
//
// Block-quantized types: every code, grid index, sign index and sub-block scale / min is a
// uniformly random bit pattern (all bit patterns of those fields are valid encodings), so a
// block costs a handful of Rng calls. Only the fp16 super-block scale(s) are then solved for,
// per block, from exact integer sums over the block's codes:
//   - RMS: d is set so that the block's dequantized RMS equals `rms`;
//   - mean: for the types with mins (Q2_K, Q4_K), dmin is set so that the block's dequantized
//     mean is zero. The symmetric types (Q8_0, IQ2_XXS, Q8_K) have mean zero in expectation.
// The only inexact steps are one division, one square root and one multiplication per scale,
// each correctly rounded by IEEE 754 and written as separate statements, so no compiler can
// fuse them: the bytes are the same on every machine. No libm transcendental is used.
//
// Range: the fp16 scale d of a block is on average rms / 13 (Q2_K), rms / 51 (IQ2_XXS),
// rms / 73 (Q8_0) and rms / 240 (Q4_K; GGML's own Q4_K quantization gives rms / 170..270). So
// d is an fp16 subnormal (finite, fewer significant bits) for rms below about 8e-4 (Q2_K),
// 3e-3 (IQ2_XXS), 5e-3 (Q8_0) and 1.5e-2 (Q4_K); the format forces this, not the generator.
// fp16 overflow needs rms above about 1e5 and is asserted.
#include "quant/random_fill.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/iq2_tables.h"
#include "quant/row_kernels.h"

namespace magnetar {

namespace {

// n random bytes, little-endian order of the Rng words on every host.
void fill_bytes(Rng& rng, uint8_t* dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint64_t u = rng.next_u64();
        for (int k = 0; k < 8; ++k) dst[i + k] = static_cast<uint8_t>(u >> (8 * k));
    }
    if (i < n) {
        const uint64_t u = rng.next_u64();
        for (int k = 0; i < n && k < 8; ++i, ++k) dst[i] = static_cast<uint8_t>(u >> (8 * k));
    }
}

// rms * sqrt(num / den) for integer-valued num and den.
double rms_times_sqrt_ratio(float rms, double num, double den) {
    const double ratio = num / den;
    const double root = std::sqrt(ratio);
    return static_cast<double>(rms) * root;
}

uint16_t to_fp16_checked(double v) {
    const uint16_t h = f32_to_fp16(static_cast<float>(v));
    MAGNETAR_ASSERT((h & 0x7c00u) != 0x7c00u, "random_fill: rms too large for an fp16 block scale");
    return h;
}

// Codes uniform in [-127, 127], 16 random bits each (bias below 1/257 of one code's share).
void fill_codes_i8(Rng& rng, int8_t* q, int n) {
    for (int i = 0; i < n; i += 4) {
        const uint64_t u = rng.next_u64();
        for (int k = 0; k < 4; ++k) {
            const uint32_t r = static_cast<uint32_t>(u >> (16 * k)) & 0xFFFFu;
            q[i + k] = static_cast<int8_t>(static_cast<int32_t>((r * 255u) >> 16) - 127);
        }
    }
}

int64_t sum_squares_i8(const int8_t* q, int n) {
    int64_t s = 0;
    for (int i = 0; i < n; ++i) s += q[i] * q[i];
    return s;
}

// ---------------------------------------------------------------------------------------------
// Plain types
// ---------------------------------------------------------------------------------------------

void fill_f32(Rng& rng, float rms, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = rng.normal() * rms;
}

void fill_f16(Rng& rng, float rms, uint16_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(rng.normal() * rms);
}

void fill_bf16(Rng& rng, float rms, uint16_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(rng.normal() * rms);
}

void fill_i32(Rng& rng, int32_t int_range, uint8_t* y, int64_t n) {
    MAGNETAR_ASSERT(int_range > 0, "random_fill: I32 needs a positive int_range");
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t v = rng.below(static_cast<uint32_t>(int_range));
        for (int k = 0; k < 4; ++k) y[4 * i + k] = static_cast<uint8_t>(v >> (8 * k));
    }
}

// ---------------------------------------------------------------------------------------------
// Q8_0 and Q8_K
// ---------------------------------------------------------------------------------------------

// Each Q8_0 block also gets a random scale factor f with f^2 uniform in [0.7, 1.3) (mean 1, so
// the expected row RMS is unchanged; f is within about +-15%): real weights vary in scale from
// block to block, and kernels should see that.
void fill_q8_0(Rng& rng, float rms, block_q8_0* y, int64_t nb) {
    constexpr double kFracOne = 16777216.0;  // 2^24
    for (int64_t b = 0; b < nb; ++b) {
        fill_codes_i8(rng, y[b].qs, QK8_0);
        const int64_t ss = sum_squares_i8(y[b].qs, QK8_0);
        const uint32_t k = rng.next_u32() >> 8;  // f^2 = (7 * 2^24 + 6 k) / (10 * 2^24)
        if (ss == 0) {
            y[b].d = 0;
            continue;
        }
        const double num = QK8_0 * (7.0 * kFracOne + 6.0 * k);
        const double den = 10.0 * kFracOne * static_cast<double>(ss);
        y[b].d = to_fp16_checked(rms_times_sqrt_ratio(rms, num, den));
    }
}

// Random codes; the E8M0 exponent puts the block RMS near `rms` (the doubled-E2M1 codes have
// an RMS of about 5.9, so 2^(e - 128) ~ rms / 5.9).
void fill_mxfp4(Rng& rng, float rms, block_mxfp4* y, int64_t nb) {
    const int e = rms > 0.0f ? 128 + static_cast<int>(std::lround(std::log2(rms / 5.9f))) : 0;
    const uint8_t eb = static_cast<uint8_t>(std::clamp(e, 0, 254));
    for (int64_t b = 0; b < nb; ++b) {
        y[b].e = eb;
        for (int j = 0; j < 16; ++j) y[b].qs[j] = static_cast<uint8_t>(rng.next_u32() >> 24);
    }
}

void fill_q8_K(Rng& rng, float rms, block_q8_K* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        fill_codes_i8(rng, y[b].qs, QK_K);
        for (int g = 0; g < QK_K / 16; ++g) {
            int32_t s = 0;
            for (int l = 0; l < 16; ++l) s += y[b].qs[16 * g + l];
            y[b].bsums[g] = static_cast<int16_t>(s);
        }
        const int64_t ss = sum_squares_i8(y[b].qs, QK_K);
        y[b].d = ss == 0
                     ? 0.0f
                     : static_cast<float>(rms_times_sqrt_ratio(rms, QK_K, static_cast<double>(ss)));
    }
}

// ---------------------------------------------------------------------------------------------
// K-quants: x = d * sc * code - dmin * m
// ---------------------------------------------------------------------------------------------

// Integer moments of one block, summed over its sub-blocks i (elements per sub-block: len):
//   a = sum sc_i S_i,  m = len * sum m_i,  b = sum sc_i^2 Q_i,  c = sum sc_i m_i S_i,
//   e = len * sum m_i^2,
// where S_i and Q_i are the sum and the sum of squares of the codes of sub-block i.
// With dmin = d * a / m the block sum d * a - dmin * m is zero, and the sum of squares is
// d^2 * (b - 2 r c + r^2 e) with r = a / m, i.e. d^2 * n2 / m^2 with the exact integer
// n2 = b m^2 - 2 a c m + a^2 e (>= 0: it is m^2 times a sum of squares).
struct k_moments {
    int64_t a = 0, m = 0, b = 0, c = 0, e = 0;

    void add(int64_t sc, int64_t mn, int64_t s, int64_t q, int64_t len) {
        a += sc * s;
        m += len * mn;
        b += sc * sc * q;
        c += sc * mn * s;
        e += len * mn * mn;
    }

    // Sets *d and *dmin (fp16 bits) for a block of QK_K elements.
    void solve(float rms, uint16_t* d, uint16_t* dmin) const {
        const int64_t n2 = b * m * m - 2 * a * c * m + a * a * e;
        // n2 == 0: every element is zero whatever d. m > 0 is ensured by the callers.
        if (n2 == 0 || m == 0) {
            *d = 0;
            *dmin = 0;
            return;
        }
        const double mm = static_cast<double>(m);
        const double mm2 = mm * mm;
        *d = to_fp16_checked(rms_times_sqrt_ratio(rms, QK_K * mm2, static_cast<double>(n2)));
        // dmin from the rounded d keeps the mean as close to zero as fp16 allows.
        const double dr = fp16_to_f32(*d);
        const double da = dr * static_cast<double>(a);
        *dmin = to_fp16_checked(da / mm);
    }
};

// For each byte value: the four 2-bit codes it holds (shifts 0, 2, 4, 6) in bytes 0..3 and their
// squares in bytes 4..7. Summing the entries of 16 bytes cannot carry between bytes
// (16 * 9 < 256), so one addition per byte accumulates the sums and the sums of squares of
// four sub-blocks at once.
constexpr auto kQ2Moments = [] {
    struct table {
        uint64_t v[256];
    } t{};
    for (uint32_t byte = 0; byte < 256; ++byte) {
        for (uint32_t g = 0; g < 4; ++g) {
            const uint64_t code = (byte >> (2 * g)) & 3;
            t.v[byte] |= code << (8 * g);
            t.v[byte] |= (code * code) << (8 * (g + 4));
        }
    }
    return t;
}();

void fill_q2_K(Rng& rng, float rms, block_q2_K* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        block_q2_K& blk = y[b];
        fill_bytes(rng, blk.scales, sizeof(blk.scales));
        fill_bytes(rng, blk.qs, sizeof(blk.qs));
        // A block whose 16 mins are all zero cannot be centred by dmin (chance 2^-64).
        int mins = 0;
        for (uint8_t sc : blk.scales) mins |= sc >> 4;
        if (mins == 0) blk.scales[0] |= 0x10;

        // Bytes qs[32 * half + 16 * lh .. + 15] hold, at shift 2g, the codes of sub-block
        // 8 * half + 2 * g + lh.
        k_moments mo;
        for (int half = 0; half < 2; ++half) {
            for (int lh = 0; lh < 2; ++lh) {
                const uint8_t* q = blk.qs + 32 * half + 16 * lh;
                uint64_t acc = 0;
                for (int l = 0; l < 16; ++l) acc += kQ2Moments.v[q[l]];
                for (int g = 0; g < 4; ++g) {
                    const int is = 8 * half + 2 * g + lh;
                    const auto s = static_cast<int64_t>((acc >> (8 * g)) & 0xFF);
                    const auto q2 = static_cast<int64_t>((acc >> (8 * (g + 4))) & 0xFF);
                    mo.add(blk.scales[is] & 0xF, blk.scales[is] >> 4, s, q2, 16);
                }
            }
        }
        mo.solve(rms, &blk.d, &blk.dmin);
    }
}

// Same unpacking as the Q4_K dequantizer.
inline void q4_K_scale_min(int j, const uint8_t* q, int32_t* sc, int32_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void fill_q4_K(Rng& rng, float rms, block_q4_K* y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b) {
        block_q4_K& blk = y[b];
        // 12 bytes hold exactly 8 six-bit scales and 8 six-bit mins: every byte pattern is valid.
        fill_bytes(rng, blk.scales, sizeof(blk.scales));
        fill_bytes(rng, blk.qs, sizeof(blk.qs));
        int32_t sc[8], mn[8];
        int32_t mins = 0;
        for (int j = 0; j < 8; ++j) {
            q4_K_scale_min(j, blk.scales, &sc[j], &mn[j]);
            mins |= mn[j];
        }
        if (mins == 0) {  // chance 2^-48; min of sub-block 0 lives in bits 0..5 of byte 4
            blk.scales[4] |= 1;
            mn[0] = 1;
        }
        k_moments mo;
        for (int k = 0; k < 4; ++k) {
            int32_t s_lo = 0, q_lo = 0, s_hi = 0, q_hi = 0;
            for (int l = 0; l < 32; ++l) {
                const int32_t lo = blk.qs[32 * k + l] & 0xF;
                const int32_t hi = blk.qs[32 * k + l] >> 4;
                s_lo += lo;
                q_lo += lo * lo;
                s_hi += hi;
                q_hi += hi * hi;
            }
            mo.add(sc[2 * k], mn[2 * k], s_lo, q_lo, 32);
            mo.add(sc[2 * k + 1], mn[2 * k + 1], s_hi, q_hi, 32);
        }
        mo.solve(rms, &blk.d, &blk.dmin);
    }
}

// ---------------------------------------------------------------------------------------------
// IQ2_XXS: x = d * (2s + 1) / 8 * magnitude * sign
// ---------------------------------------------------------------------------------------------

// Sum of squared magnitudes of each grid entry (signs do not matter for the RMS).
const uint32_t* iq2xxs_grid_sq() {
    static const auto table = [] {
        struct t {
            uint32_t v[256];
        } out{};
        for (int g = 0; g < 256; ++g) {
            for (int j = 0; j < 8; ++j) {
                const uint32_t mag = static_cast<uint32_t>((kIq2xxsGrid[g] >> (8 * j)) & 0xFF);
                out.v[g] += mag * mag;
            }
        }
        return out;
    }();
    return table.v;
}

void fill_iq2_xxs(Rng& rng, float rms, block_iq2_xxs* y, int64_t nb) {
    const uint32_t* grid_sq = iq2xxs_grid_sq();
    for (int64_t b = 0; b < nb; ++b) {
        block_iq2_xxs& blk = y[b];
        // Grid indices, sign indices and 4-bit scales use every bit: any pattern is valid.
        uint8_t raw[sizeof(blk.qs)];
        fill_bytes(rng, raw, sizeof(raw));
        std::memcpy(blk.qs, raw, sizeof(raw));
        // Sum of squares = d^2 * t / 64 with t = sum over sub-blocks of (2s+1)^2 * grid_sq.
        int64_t t = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const uint8_t* sub = raw + 8 * ib;
            const int64_t g = grid_sq[sub[0]] + grid_sq[sub[1]] + grid_sq[sub[2]] + grid_sq[sub[3]];
            const int64_t ls = 2 * (sub[7] >> 4) + 1;
            t += ls * ls * g;
        }
        blk.d = to_fp16_checked(rms_times_sqrt_ratio(rms, 64.0 * QK_K, static_cast<double>(t)));
    }
}

}  // namespace

namespace quant {

void random_f32(Rng& rng, float rms, void* dst, int64_t n, int32_t) {
    fill_f32(rng, rms, static_cast<float*>(dst), n);
}
void random_f16(Rng& rng, float rms, void* dst, int64_t n, int32_t) {
    fill_f16(rng, rms, static_cast<uint16_t*>(dst), n);
}
void random_bf16(Rng& rng, float rms, void* dst, int64_t n, int32_t) {
    fill_bf16(rng, rms, static_cast<uint16_t*>(dst), n);
}
void random_i32(Rng& rng, float, void* dst, int64_t n, int32_t int_range) {
    fill_i32(rng, int_range, static_cast<uint8_t*>(dst), n);
}
void random_q8_0(Rng& rng, float rms, void* dst, int64_t n, int32_t) {
    fill_q8_0(rng, rms, static_cast<block_q8_0*>(dst), n / QK8_0);
}
void random_q8_K(Rng& rng, float rms, void* dst, int64_t n, int32_t) {
    fill_q8_K(rng, rms, static_cast<block_q8_K*>(dst), n / QK_K);
}
void random_q2_K(Rng& rng, float rms, void* dst, int64_t n, int32_t) {
    fill_q2_K(rng, rms, static_cast<block_q2_K*>(dst), n / QK_K);
}
void random_q4_K(Rng& rng, float rms, void* dst, int64_t n, int32_t) {
    fill_q4_K(rng, rms, static_cast<block_q4_K*>(dst), n / QK_K);
}
void random_iq2_xxs(Rng& rng, float rms, void* dst, int64_t n, int32_t) {
    fill_iq2_xxs(rng, rms, static_cast<block_iq2_xxs*>(dst), n / QK_K);
}
void random_mxfp4(Rng& rng, float rms, void* dst, int64_t n, int32_t) {
    fill_mxfp4(rng, rms, static_cast<block_mxfp4*>(dst), n / QK_MXFP4);
}
void random_i8(Rng& rng, float, void* dst, int64_t n, int32_t) {
    for (int64_t i = 0; i < n; ++i) {
        static_cast<uint8_t*>(dst)[i] = static_cast<uint8_t>(rng.next_u32() >> 24);
    }
}

}  // namespace quant

void fill_random_row(ggml_type t, Rng& rng, float rms, void* dst, int64_t n, int32_t int_range) {
    const type_traits& tr = type_traits_of(t);
    MAGNETAR_ASSERT(n >= 0 && n % tr.block_elems == 0,
                    "random_fill: row length not a multiple of the block");
    MAGNETAR_ASSERT(t == ggml_type::I32 || (rms >= 0.0f && rms <= 3.0e38f),
                    "random_fill: rms must be finite and >= 0");
    scalar_kernels_of(t).random_row(rng, rms, dst, n, int_range);
}

}  // namespace magnetar
