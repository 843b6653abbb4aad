// The DeepSeek V4.1 low-precision formats (spec v41 §4, §5.4): see fp8fp4.h.
//
// Rounding onto a grid is exact and never goes through libm: E4M3 keeps 3 of the 23 mantissa
// bits with a round-to-nearest-even on the bit pattern (a carry moves into the next binade,
// which is the next code), its subnormal binade rounds |v| * 2^9 to an integer by adding 2^23;
// E2M1 counts the midpoints below |v| with the spec's tie directions. Because E4M3 and E2M1
// codes are monotone in the magnitude, an even mantissa is an even code, so ties go to the
// even code as §4.1 requires. Power-of-two scalings are float multiplications by exact powers
// of two (exact except in the subnormal range, far below what any code can represent).
#include "quant/fp8fp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.h"
#include "quant/fp16.h"

namespace magnetar::quant {

namespace {

void check_blocks(const char* what, int64_t n, int64_t block) {
    if (n < 0 || n % block != 0) {
        throw Error(std::string(what) + ": element count " + std::to_string(n) +
                    " is not a multiple of the block size " + std::to_string(block));
    }
}

// 2^e as a float for e in [-149, 127] (exact), built without libm.
inline float pow2f(int e) {
    if (e >= -126) return bits_to_f32(static_cast<uint32_t>(e + 127) << 23);
    return bits_to_f32(1u << (e + 149));
}

// UE8M0 byte -> 2^(b - 127).
inline float exp_byte_scale(uint8_t b) {
    if (b == 255) return std::numeric_limits<float>::quiet_NaN();
    return pow2f(static_cast<int>(b) - 127);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Element formats
// ---------------------------------------------------------------------------------------------

uint8_t e4m3_encode(float v) {
    const uint32_t u = f32_to_bits(v);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);   // NaN
    if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // >= 448 (and inf): satfinite
    if (a < 0x3c800000u) {
        // Below 2^-6: spacing 2^-9. |v| * 2^9 < 8 is exact, and adding 2^23 rounds it to an
        // integer to nearest even (default rounding mode); the integer is the code.
        const float q = bits_to_f32(a) * 512.0f + 8388608.0f;
        return static_cast<uint8_t>(sign | (f32_to_bits(q) & 0xfu));
    }
    // Normal: keep 3 of the 23 mantissa bits, round to nearest even on the bit pattern (a carry
    // moves to the next binade), then rebias the exponent from 127 to 7.
    const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
    return static_cast<uint8_t>(sign | (r - (120u << 3)));
}

namespace {

// Value of every E4M3 code, built at compile time (normal 2^(e-7)(1 + m/8), subnormal m 2^-9).
struct e4m3_table {
    float v[256] = {};
    constexpr e4m3_table() {
        for (int c = 0; c < 256; ++c) {
            const int e = (c >> 3) & 0x0f;
            const int m = c & 0x07;
            float x;
            if (e == 15 && m == 7) {
                x = std::numeric_limits<float>::quiet_NaN();
            } else {
                float p = 1.0f / 512.0f;  // 2^-9
                for (int k = 1; k < e; ++k) p *= 2.0f;
                x = e == 0 ? static_cast<float>(m) * p : static_cast<float>(8 + m) * p;
            }
            v[c] = (c & 0x80) ? -x : x;
        }
    }
};
constexpr e4m3_table kE4m3{};

constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

}  // namespace

float e4m3_decode(uint8_t code) {
    return kE4m3.v[code];
}

uint8_t e2m1_encode(float v) {
    const uint8_t sign = std::signbit(v) ? 0x08 : 0x00;
    if (std::isnan(v)) return 0;
    const float a = std::fabs(v);
    // Count the midpoints below |v|: ties at 0.25, 1.25, 2.5 and 5 stay down, ties at 0.75,
    // 1.75 and 3.5 go up (the even code in each case); above 6 saturates at code 7.
    const int code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                     (a >= 3.5f) + (a > 5.0f);
    return static_cast<uint8_t>(sign | code);
}

float e2m1_decode(uint8_t code) {
    return kE2m1[code & 0x0f];
}

float ue8m0_to_float(uint8_t b) {
    return exp_byte_scale(b);
}

uint8_t ue8m0_from_exponent(int e) {
    if (e < -127 || e > 127) return 255;
    return static_cast<uint8_t>(e + 127);
}

float r448() {
    return bits_to_f32(kR448Bits);
}
float r6() {
    return bits_to_f32(kR6Bits);
}

int fast_round_scale(float amax, float r) {
    const float y = amax * r;
    if (!std::isfinite(y)) return 128;
    const uint32_t u = f32_to_bits(y);
    const int expfield = static_cast<int>((u >> 23) & 0xffu);
    const int mant_nonzero = (u & 0x7fffffu) != 0 ? 1 : 0;
    return expfield - 127 + mant_nonzero;
}

float round_bf16(float v) {
    return bf16_to_f32(f32_to_bf16(v));
}

void round_bf16_inplace(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

// ---------------------------------------------------------------------------------------------
// Block QDQs
// ---------------------------------------------------------------------------------------------

namespace {

// Largest magnitude of a block; NaN when any value is NaN or infinite, which then makes the
// whole block NaN in every format (E4M3's saturation would otherwise hide an infinity).
float block_amax(const float* x, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float a = std::fabs(x[i]);
        if (!(a <= std::numeric_limits<float>::max()))
            return std::numeric_limits<float>::quiet_NaN();
        amax = std::max(amax, a);
    }
    return amax;
}

// One UE8M0-scaled block (FP8 or MXFP4), shared by §4.2 and §4.4.
template <bool kFp4>
void qdq_pow2_block(const float* x, float* y, int64_t n, uint8_t* codes, uint8_t* exps,
                    float amax_floor, float r) {
    for (int64_t b = 0; b < n / 32; ++b) {
        const float* xb = x + b * 32;
        float amax = block_amax(xb, 32);
        if (!std::isnan(amax)) amax = std::max(amax, amax_floor);
        const int e = std::isnan(amax) ? 128 : fast_round_scale(amax, r);
        const uint8_t ebyte = ue8m0_from_exponent(e);
        uint8_t cb[32];
        const float inv_scale = e == 128 ? std::numeric_limits<float>::quiet_NaN() : pow2f(-e);
        for (int i = 0; i < 32; ++i) {
            const float s = xb[i] * inv_scale;
            cb[i] = kFp4 ? e2m1_encode(s) : e4m3_encode(s);
        }
        if (y) {
            // Exact: <= 4 significant bits times a power of two in the normal range.
            const float sc = exp_byte_scale(ebyte);
            for (int i = 0; i < 32; ++i) {
                const float d = kFp4 ? e2m1_decode(cb[i]) : e4m3_decode(cb[i]);
                y[b * 32 + i] = round_bf16(d * sc);
            }
        }
        if (codes) std::memcpy(codes + b * 32, cb, 32);
        if (exps) exps[b] = ebyte;
    }
}

}  // namespace

void qdq_fp8_block32(const float* x, float* y, int64_t n, uint8_t* codes, uint8_t* exps) {
    check_blocks("qdq_fp8_block32", n, kFp8Block);
    qdq_pow2_block<false>(x, y, n, codes, exps, 1e-4f, r448());
}

void qdq_mxfp4_block32(const float* x, float* y, int64_t n, uint8_t* codes, uint8_t* exps) {
    check_blocks("qdq_mxfp4_block32", n, kMxfp4Block);
    qdq_pow2_block<true>(x, y, n, codes, exps, 6.0f * pow2f(-126), r6());
}

void qdq_fp4_e4m3_block16(const float* x, float* y, int64_t n, uint8_t* codes, uint8_t* scales) {
    check_blocks("qdq_fp4_e4m3_block16", n, kFp4E4m3Block);
    const float floor_amax = 6.0f * pow2f(-9);
    for (int64_t b = 0; b < n / 16; ++b) {
        const float* xb = x + b * 16;
        float amax = block_amax(xb, 16);
        if (!std::isnan(amax)) amax = std::max(amax, floor_amax);
        const uint8_t scode = e4m3_encode(amax / 6.0f);  // true fp32 division
        const float s = e4m3_decode(scode);
        uint8_t cb[16];
        for (int i = 0; i < 16; ++i) {
            const float v = std::clamp(xb[i] / s, -6.0f, 6.0f);  // true fp32 division
            cb[i] = std::isnan(v) ? 0 : e2m1_encode(v);
        }
        if (y) {
            for (int i = 0; i < 16; ++i) y[b * 16 + i] = round_bf16(e2m1_decode(cb[i]) * s);
        }
        if (codes) std::memcpy(codes + b * 16, cb, 16);
        if (scales) scales[b] = scode;
    }
}

// ---------------------------------------------------------------------------------------------
// FP8-linear activations
// ---------------------------------------------------------------------------------------------

void fp8_linear_act_row(const float* x, float* xq, int64_t k) {
    qdq_fp8_block32(x, xq, k, nullptr, nullptr);
}

float fp8_linear_dot_ref(const float* xq, const float* w, int64_t k) {
    check_blocks("fp8_linear_dot_ref", k, kFp8Block);
    float acc = 0.0f;
    for (int64_t b = 0; b < k / 32; ++b) {
        float part = 0.0f;
        for (int64_t i = b * 32; i < b * 32 + 32; ++i) part += xq[i] * w[i];
        acc += part;
    }
    return acc;
}

// ---------------------------------------------------------------------------------------------
// Canonical packed rows
// ---------------------------------------------------------------------------------------------

namespace {

void pack_nibbles(const uint8_t* codes, int64_t n, uint8_t* out) {
    for (int64_t b = 0; b < n / 2; ++b) {
        out[b] = static_cast<uint8_t>((codes[2 * b] & 0x0f) | ((codes[2 * b + 1] & 0x0f) << 4));
    }
}

}  // namespace

int64_t main_kv_row_bytes(int64_t dh) {
    check_blocks("main_kv_row_bytes", dh, kFp4E4m3Block);
    return dh / 2 + dh / 16;
}

int64_t index_key_row_bytes(int64_t di) {
    check_blocks("index_key_row_bytes", di, kMxfp4Block);
    return di / 2 + di / 32;
}

int64_t window_row_bytes(int64_t dh) {
    check_blocks("window_row_bytes", dh, kFp8Block);
    return dh + dh / 32;
}

void pack_main_kv_row(const uint8_t* codes, const uint8_t* scales, int64_t dh, uint8_t* row) {
    main_kv_row_bytes(dh);
    pack_nibbles(codes, dh, row);
    std::memcpy(row + dh / 2, scales, static_cast<size_t>(dh / 16));
}

void pack_index_key_row(const uint8_t* codes, const uint8_t* exps, int64_t di, uint8_t* row) {
    index_key_row_bytes(di);
    pack_nibbles(codes, di, row);
    std::memcpy(row + di / 2, exps, static_cast<size_t>(di / 32));
}

void pack_window_row(const uint8_t* codes, const uint8_t* exps, int64_t dh, uint8_t* row) {
    window_row_bytes(dh);
    std::memcpy(row, codes, static_cast<size_t>(dh));
    std::memcpy(row + dh, exps, static_cast<size_t>(dh / 32));
}

// The codes go straight into the row, one block at a time, so no scratch larger than a block
// is needed: a 16-element block packs into 8 bytes, a 32-element block into 16 / 32 bytes.
void quantize_main_kv_row(const float* x, int64_t dh, uint8_t* row, float* qdq) {
    main_kv_row_bytes(dh);
    for (int64_t b = 0; b < dh / 16; ++b) {
        uint8_t cb[16];
        qdq_fp4_e4m3_block16(x + b * 16, qdq ? qdq + b * 16 : nullptr, 16, cb, row + dh / 2 + b);
        pack_nibbles(cb, 16, row + b * 8);
    }
}

void quantize_index_key_row(const float* x, int64_t di, uint8_t* row, float* qdq) {
    index_key_row_bytes(di);
    for (int64_t b = 0; b < di / 32; ++b) {
        uint8_t cb[32];
        qdq_mxfp4_block32(x + b * 32, qdq ? qdq + b * 32 : nullptr, 32, cb, row + di / 2 + b);
        pack_nibbles(cb, 32, row + b * 16);
    }
}

void quantize_window_row(const float* x, int64_t dh, uint8_t* row, float* qdq) {
    window_row_bytes(dh);
    qdq_fp8_block32(x, qdq, dh, row, row + dh);
}

void unpack_main_kv_row(const uint8_t* row, int64_t dh, float* y) {
    main_kv_row_bytes(dh);
    for (int64_t g = 0; g < dh / 16; ++g) {
        const float s = e4m3_decode(row[dh / 2 + g]);
        for (int64_t i = g * 16; i < g * 16 + 16; ++i) {
            const uint8_t c = (i & 1) ? (row[i / 2] >> 4) : (row[i / 2] & 0x0f);
            y[i] = round_bf16(e2m1_decode(c) * s);
        }
    }
}

void unpack_index_key_row(const uint8_t* row, int64_t di, float* y) {
    index_key_row_bytes(di);
    for (int64_t g = 0; g < di / 32; ++g) {
        const float s = exp_byte_scale(row[di / 2 + g]);
        for (int64_t i = g * 32; i < g * 32 + 32; ++i) {
            const uint8_t c = (i & 1) ? (row[i / 2] >> 4) : (row[i / 2] & 0x0f);
            y[i] = round_bf16(e2m1_decode(c) * s);
        }
    }
}

void unpack_window_row(const uint8_t* row, int64_t dh, float* y) {
    window_row_bytes(dh);
    for (int64_t g = 0; g < dh / 32; ++g) {
        const float s = exp_byte_scale(row[dh + g]);
        for (int64_t i = g * 32; i < g * 32 + 32; ++i) y[i] = round_bf16(e4m3_decode(row[i]) * s);
    }
}

// ---------------------------------------------------------------------------------------------
// MXFP4 repack and quantizer
// ---------------------------------------------------------------------------------------------

void mxfp4_checkpoint_to_ggml(const uint8_t* packed, const uint8_t* exps, int64_t n,
                              block_mxfp4* out) {
    check_blocks("mxfp4_checkpoint_to_ggml", n, QK_MXFP4);
    for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* p = packed + b * 16;  // 32 elements = 16 checkpoint bytes
        uint8_t c[32];
        for (int j = 0; j < 16; ++j) {
            c[2 * j] = p[j] & 0x0f;
            c[2 * j + 1] = p[j] >> 4;
        }
        out[b].e = exps[b];
        for (int j = 0; j < 16; ++j) out[b].qs[j] = static_cast<uint8_t>(c[j] | (c[j + 16] << 4));
    }
}

void mxfp4_ggml_to_checkpoint(const block_mxfp4* in, int64_t n, uint8_t* packed, uint8_t* exps) {
    check_blocks("mxfp4_ggml_to_checkpoint", n, QK_MXFP4);
    for (int64_t b = 0; b < n / 32; ++b) {
        uint8_t c[32];
        for (int j = 0; j < 16; ++j) {
            c[j] = in[b].qs[j] & 0x0f;
            c[j + 16] = in[b].qs[j] >> 4;
        }
        exps[b] = in[b].e;
        pack_nibbles(c, 32, packed + b * 16);
    }
}

void quantize_row_mxfp4(const float* x, block_mxfp4* y, int64_t n) {
    check_blocks("quantize_row_mxfp4", n, QK_MXFP4);
    for (int64_t b = 0; b < n / 32; ++b) {
        uint8_t c[32];
        qdq_mxfp4_block32(x + b * 32, nullptr, 32, c, &y[b].e);
        for (int j = 0; j < 16; ++j) y[b].qs[j] = static_cast<uint8_t>(c[j] | (c[j + 16] << 4));
    }
}

}  // namespace magnetar::quant
