// The V4.1 element formats, block QDQs, packed cache rows and MXFP4 repack (spec v41 §4, §5.4):
// the spec's examples, exhaustive code round trips, a brute-force nearest-value oracle for the
// roundings, QDQ invariants, the FP8-linear exactness claim, and bit-exact pack / unpack.
#include "quant/fp8fp4.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/fp16.h"
#include "quant/quantize.h"
#include "quant/types.h"

namespace magnetar::quant {
namespace {

uint32_t bits(float f) {
    return f32_to_bits(f);
}

// Brute-force oracle: the code of the nearest value among the finite non-negative codes
// 0..n_codes-1 (values by `decode`), ties to the even code, sign applied afterwards.
template <typename Decode>
uint8_t nearest_code(float v, int n_codes, uint8_t sign_bit, Decode decode) {
    const double a = std::fabs(static_cast<double>(v));
    int best = 0;
    double best_d = std::numeric_limits<double>::infinity();
    for (int c = 0; c < n_codes; ++c) {
        const double d = std::fabs(a - static_cast<double>(decode(static_cast<uint8_t>(c))));
        if (d < best_d || (d == best_d && (c % 2) == 0)) {
            best = c;
            best_d = d;
        }
    }
    return static_cast<uint8_t>(best | (std::signbit(v) ? sign_bit : 0));
}

// bf16 values spread over many binades: a random bf16 mantissa times 2^k, k in [lo, hi].
std::vector<float> random_bf16(Rng& rng, int64_t n, int lo, int hi) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) {
        const int k = lo + static_cast<int>(rng.below(static_cast<uint32_t>(hi - lo + 1)));
        v = round_bf16(std::ldexp(rng.uniform_pm1(), k));
    }
    return x;
}

// Blocks of varied magnitude (one scale per 16 values, |x| < 2^7 so that the E4M3 scale of
// §4.3 never saturates), a few exact zeros and negative zeros.
std::vector<float> varied_blocks(uint64_t seed, int64_t n) {
    Rng rng(seed);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t b = 0; b < n / 16; ++b) {
        const int k = -24 + static_cast<int>(rng.below(30));
        for (int64_t i = b * 16; i < b * 16 + 16; ++i) {
            x[i] = round_bf16(std::ldexp(rng.normal(), k));
            if (rng.below(50) == 0) x[i] = rng.below(2) ? 0.0f : -0.0f;
        }
    }
    return x;
}

// ---------------------------------------------------------------------------------------------
// Element formats
// ---------------------------------------------------------------------------------------------

TEST(V41Formats, E4m3SpecExamples) {
    auto rt = [](float v) { return e4m3_decode(e4m3_encode(v)); };
    EXPECT_EQ(rt(17.0f), 16.0f);
    EXPECT_EQ(rt(19.0f), 20.0f);
    EXPECT_EQ(rt(1.5f * 0x1p-9f), 0x1p-8f);
    EXPECT_EQ(bits(rt(0.5f * 0x1p-9f)), bits(0.0f));
    EXPECT_EQ(bits(rt(-0.5f * 0x1p-9f)), bits(-0.0f));  // the sign of zero is kept
    EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
    EXPECT_EQ(rt(1000.0f), 448.0f);
    EXPECT_EQ(rt(-1000.0f), -448.0f);
    EXPECT_EQ(rt(std::numeric_limits<float>::infinity()), 448.0f);
    EXPECT_EQ(e4m3_encode(448.0f), 0x7e);
    EXPECT_EQ(e4m3_encode(464.0f), 0x7e);  // the would-be tie with 480 saturates
    EXPECT_EQ(e4m3_encode(0x1p-9f), 0x01);
    EXPECT_EQ(e4m3_encode(0x1p-6f), 0x08);
    EXPECT_EQ(rt(15.5f), 16.0f);  // rounds up into the next binade
    EXPECT_TRUE(std::isnan(e4m3_decode(0x7f)));
    EXPECT_TRUE(std::isnan(e4m3_decode(0xff)));
    EXPECT_TRUE(std::isnan(e4m3_decode(e4m3_encode(std::nanf("")))));
}

TEST(V41Formats, E4m3EveryCodeRoundTrips) {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;
        const float v = e4m3_decode(static_cast<uint8_t>(c));
        EXPECT_EQ(e4m3_encode(v), c) << c;
        // Values: normal 2^(e-7)(1 + m/8), subnormal m 2^-9.
        const int e = (c >> 3) & 15, m = c & 7;
        const double want = (e == 0 ? m * std::ldexp(1.0, -9) : std::ldexp(1.0 + m / 8.0, e - 7)) *
                            ((c & 0x80) ? -1.0 : 1.0);
        EXPECT_EQ(static_cast<double>(v), want) << c;
    }
    EXPECT_EQ(e4m3_decode(0x7e), 448.0f);
}

TEST(V41Formats, E4m3MatchesNearestValueOracle) {
    auto dec = [](uint8_t c) { return e4m3_decode(c); };
    std::vector<float> probes;
    // Every midpoint between neighbouring codes, and its float neighbours.
    for (int c = 0; c < 126; ++c) {
        const float mid = 0.5f * (e4m3_decode(static_cast<uint8_t>(c)) +
                                  e4m3_decode(static_cast<uint8_t>(c + 1)));
        probes.insert(probes.end(),
                      {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f), -mid});
    }
    // Every finite bf16 value (the QDQ inputs are bf16 values times powers of two), and random
    // fp32 values.
    for (uint32_t b = 0; b < 0x10000u; ++b) {
        const float v = bf16_to_f32(static_cast<uint16_t>(b));
        if (std::isfinite(v)) probes.push_back(v);
    }
    Rng rng(7);
    for (int i = 0; i < 20000; ++i)
        probes.push_back(std::ldexp(rng.uniform_pm1(), -14 + static_cast<int>(rng.below(24))));
    for (float v : probes) {
        const float c = std::fmax(std::fmin(v, 448.0f), -448.0f);
        ASSERT_EQ(e4m3_encode(v), nearest_code(c, 127, 0x80, dec)) << v;
    }
}

TEST(V41Formats, E2m1TiesAndRoundTrips) {
    auto rt = [](float v) { return e2m1_decode(e2m1_encode(v)); };
    // Midpoints 0.25, 1.25, 2.5, 5 go down to the even codes 0, 2, 4, 6.
    EXPECT_EQ(e2m1_encode(0.25f), 0);
    EXPECT_EQ(e2m1_encode(1.25f), 2);
    EXPECT_EQ(e2m1_encode(2.5f), 4);
    EXPECT_EQ(e2m1_encode(5.0f), 6);
    // Midpoints 0.75, 1.75, 3.5 go up to the even codes 2, 4, 6.
    EXPECT_EQ(e2m1_encode(0.75f), 2);
    EXPECT_EQ(e2m1_encode(1.75f), 4);
    EXPECT_EQ(e2m1_encode(3.5f), 6);
    // Strictly above a midpoint goes up.
    EXPECT_EQ(rt(std::nextafter(0.25f, 1.0f)), 0.5f);
    EXPECT_EQ(rt(std::nextafter(1.25f, 2.0f)), 1.5f);
    EXPECT_EQ(rt(std::nextafter(2.5f, 3.0f)), 3.0f);
    EXPECT_EQ(rt(std::nextafter(5.0f, 6.0f)), 6.0f);
    EXPECT_EQ(rt(std::nextafter(0.75f, 0.0f)), 0.5f);
    EXPECT_EQ(e2m1_encode(-0.25f), 0x08);  // -0 kept
    EXPECT_EQ(bits(rt(-0.1f)), bits(-0.0f));
    EXPECT_EQ(rt(-2.5f), -2.0f);
    EXPECT_EQ(rt(100.0f), 6.0f);
    EXPECT_EQ(rt(-7.0f), -6.0f);
    const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int c = 0; c < 16; ++c) {
        const float v = e2m1_decode(static_cast<uint8_t>(c));
        EXPECT_EQ(bits(v), bits((c & 8) ? -mags[c & 7] : mags[c & 7])) << c;
        EXPECT_EQ(e2m1_encode(v), c) << c;
    }
    auto dec = [](uint8_t c) { return e2m1_decode(c); };
    for (uint32_t b = 0; b < 0x10000u; ++b) {  // every finite bf16 value
        const float v = bf16_to_f32(static_cast<uint16_t>(b));
        if (!std::isfinite(v)) continue;
        ASSERT_EQ(e2m1_encode(v), nearest_code(std::fmax(std::fmin(v, 6.0f), -6.0f), 8, 0x08, dec))
            << v;
    }
    Rng rng(11);
    for (float v : random_bf16(rng, 5000, -4, 2)) {
        EXPECT_EQ(e2m1_encode(v), nearest_code(std::fmax(std::fmin(v, 6.0f), -6.0f), 8, 0x08, dec))
            << v;
    }
    for (float m :
         {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f}) {  // float neighbours of the midpoints
        for (float v : {std::nextafter(m, 0.0f), std::nextafter(m, 10.0f)}) {
            EXPECT_EQ(e2m1_encode(v), nearest_code(v, 8, 0x08, dec)) << v;
        }
    }
}

TEST(V41Formats, Ue8m0AndScaleRule) {
    EXPECT_EQ(ue8m0_to_float(127), 1.0f);
    EXPECT_EQ(ue8m0_to_float(130), 8.0f);
    EXPECT_EQ(ue8m0_to_float(0), 0x1p-127f);
    EXPECT_EQ(ue8m0_to_float(254), 0x1p127f);
    EXPECT_TRUE(std::isnan(ue8m0_to_float(255)));
    EXPECT_EQ(ue8m0_from_exponent(-8), 119);
    EXPECT_EQ(ue8m0_from_exponent(128), 255);
    EXPECT_EQ(bits(r448()), 0x3b124925u);
    EXPECT_EQ(bits(r448()), bits(1.0f / 448.0f));
    EXPECT_EQ(bits(r6()), 0x3e2aaaabu);
    EXPECT_EQ(fast_round_scale(448.0f, r448()), 0);
    EXPECT_EQ(fast_round_scale(449.0f, r448()), 1);
    EXPECT_EQ(fast_round_scale(1.0f, r448()), -8);
    EXPECT_EQ(fast_round_scale(6.0f, r6()), 0);
    EXPECT_EQ(fast_round_scale(3.0f, r6()), -1);
    EXPECT_EQ(fast_round_scale(6.0f * 0x1p-126f, r6()), -126);
    EXPECT_EQ(fast_round_scale(std::numeric_limits<float>::infinity(), r6()), 128);
}

// ---------------------------------------------------------------------------------------------
// Block QDQs
// ---------------------------------------------------------------------------------------------

TEST(V41Formats, Fp8Block32ExampleAndInvariants) {
    // One block with amax 448: E = 0, so the elements are plain E4M3 roundings.
    std::vector<float> x(32, 0.0f);
    x[0] = 448.0f;
    x[1] = 17.0f;
    x[2] = -19.0f;
    x[3] = 1.5f * 0x1p-9f;
    std::vector<float> y(32);
    uint8_t codes[32], e;
    qdq_fp8_block32(x.data(), y.data(), 32, codes, &e);
    EXPECT_EQ(e, 127);
    EXPECT_EQ(y[0], 448.0f);
    EXPECT_EQ(y[1], 16.0f);
    EXPECT_EQ(y[2], -20.0f);
    EXPECT_EQ(y[3], 0x1p-8f);
    // amax 449 -> E = 1: 17 / 2 = 8.5 ties to 8 -> 16.
    x[0] = 449.0f;
    qdq_fp8_block32(x.data(), y.data(), 32, codes, &e);
    EXPECT_EQ(e, 128);
    EXPECT_EQ(y[0], 448.0f);
    EXPECT_EQ(y[1], 16.0f);
    // An all-zero block uses the amax floor 1e-4 (E = -22) and keeps signed zeros.
    std::vector<float> z(32, 0.0f);
    z[5] = -0.0f;
    qdq_fp8_block32(z.data(), y.data(), 32, codes, &e);
    EXPECT_EQ(static_cast<int>(e) - 127, fast_round_scale(1e-4f, r448()));
    EXPECT_EQ(bits(y[5]), bits(-0.0f));

    const int64_t n = 4096;
    const auto xs = varied_blocks(21, n);
    std::vector<float> q(n), q2(n);
    std::vector<uint8_t> c(n), ex(n / 32);
    qdq_fp8_block32(xs.data(), q.data(), n, c.data(), ex.data());
    qdq_fp8_block32(q.data(), q2.data(), n, nullptr, nullptr);
    for (int64_t i = 0; i < n; ++i) {
        const float s = ue8m0_to_float(ex[i / 32]);
        ASSERT_EQ(bits(q[i]), bits(q2[i])) << "not idempotent at " << i;
        ASSERT_EQ(bits(q[i]), bits(round_bf16(q[i]))) << i;
        ASSERT_EQ(bits(q[i]), bits(e4m3_decode(c[i]) * s)) << i;
        const double err = std::fabs(static_cast<double>(xs[i]) - q[i]);
        ASSERT_LE(err, std::fabs(xs[i]) / 16.0 + s * 0x1p-10) << i;
        ASSERT_LE(std::fabs(q[i]), 448.0f * s) << i;
    }
}

TEST(V41Formats, Fp4E4m3Block16Invariants) {
    // amax 6 -> s = 1: plain E2M1 rounding; 5 ties down to 4.
    float x[16] = {6.0f, 5.0f, -0.75f, 0.25f, 2.5f, 1.75f};
    float y[16];
    uint8_t c[16], s;
    qdq_fp4_e4m3_block16(x, y, 16, c, &s);
    EXPECT_EQ(e4m3_decode(s), 1.0f);
    const float want[6] = {6.0f, 4.0f, -1.0f, 0.0f, 2.0f, 2.0f};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], want[i]) << i;
    // The scale is e4m3(amax / 6) by true division: amax 7 -> 7/6 -> 1.125 (E4M3), and the
    // element step divides by 1.125, which is not a power of two.
    float x2[16] = {7.0f, 3.0f};
    qdq_fp4_e4m3_block16(x2, y, 16, c, &s);
    EXPECT_EQ(e4m3_decode(s), 1.125f);
    EXPECT_EQ(y[0], 6.75f);                       // 7 / 1.125 = 6.22 -> clamp 6
    EXPECT_EQ(c[1], e2m1_encode(3.0f / 1.125f));  // 2.67 -> 3
    EXPECT_EQ(y[1], 3.375f);
    // Tiny block: the amax floor 6 * 2^-9 keeps the scale at the smallest subnormal 2^-9.
    float x3[16] = {1e-6f};
    qdq_fp4_e4m3_block16(x3, y, 16, c, &s);
    EXPECT_EQ(e4m3_decode(s), 0x1p-9f);

    const int64_t n = 4096;
    const auto xs = varied_blocks(22, n);
    std::vector<float> q(n), q2(n);
    std::vector<uint8_t> cs(n), sc(n / 16);
    qdq_fp4_e4m3_block16(xs.data(), q.data(), n, cs.data(), sc.data());
    qdq_fp4_e4m3_block16(q.data(), q2.data(), n, nullptr, nullptr);
    int normal_scales = 0;
    for (int64_t i = 0; i < n; ++i) {
        const float sv = e4m3_decode(sc[i / 16]);
        ASSERT_EQ(bits(q[i]), bits(round_bf16(q[i]))) << i;
        ASSERT_EQ(bits(q[i]), bits(e2m1_decode(cs[i]) * sv)) << i;
        // Half a grid step (<= s), plus the clamp at 6 s where the scale rounded down (by at
        // most 1/16 relative for a normal scale, more for a subnormal one).
        const double clamp_excess = std::max(0.0, std::fabs(static_cast<double>(xs[i])) - 6.0 * sv);
        ASSERT_LE(std::fabs(static_cast<double>(xs[i]) - q[i]), sv + clamp_excess) << i;
        if (sv >= 0x1p-6f) {
            ASSERT_LE(clamp_excess, 6.0 * sv / 15.0) << i;
        }
        // With a normal E4M3 scale (relative rounding <= 1/16) the block maximum always lands on
        // code 6 * s, so re-quantizing finds the same scale and the same codes. A subnormal
        // scale can round up by more and then shrink on the second pass.
        if (sv >= 0x1p-6f) {
            ++normal_scales;
            ASSERT_EQ(bits(q[i]), bits(q2[i])) << "not idempotent at " << i;
        }
    }
    EXPECT_GT(normal_scales, n / 4);
}

TEST(V41Formats, Mxfp4Block32Invariants) {
    float x[32] = {6.0f, 5.0f, 3.5f, -1.25f, 0.75f};
    float y[32];
    uint8_t c[32], e;
    qdq_mxfp4_block32(x, y, 32, c, &e);
    EXPECT_EQ(e, 127);
    const float want[5] = {6.0f, 4.0f, 4.0f, -1.0f, 1.0f};
    for (int i = 0; i < 5; ++i) EXPECT_EQ(y[i], want[i]) << i;
    x[0] = 12.0f;  // amax 12 -> E = 1
    qdq_mxfp4_block32(x, y, 32, c, &e);
    EXPECT_EQ(e, 128);
    EXPECT_EQ(y[0], 12.0f);
    EXPECT_EQ(y[1], 4.0f);  // 5 / 2 = 2.5 ties down to 2

    const int64_t n = 4096;
    const auto xs = varied_blocks(23, n);
    std::vector<float> q(n), q2(n);
    std::vector<uint8_t> cs(n), ex(n / 32);
    qdq_mxfp4_block32(xs.data(), q.data(), n, cs.data(), ex.data());
    qdq_mxfp4_block32(q.data(), q2.data(), n, nullptr, nullptr);
    for (int64_t i = 0; i < n; ++i) {
        const float s = ue8m0_to_float(ex[i / 32]);
        ASSERT_EQ(bits(q[i]), bits(q2[i])) << "not idempotent at " << i;
        ASSERT_EQ(bits(q[i]), bits(round_bf16(q[i]))) << i;
        ASSERT_EQ(bits(q[i]), bits(e2m1_decode(cs[i]) * s)) << i;
        ASSERT_LE(std::fabs(static_cast<double>(xs[i]) - q[i]), s) << i;
    }
}

TEST(V41Formats, BadInputs) {
    float x[48] = {};
    float y[48];
    EXPECT_THROW(qdq_fp8_block32(x, y, 48, nullptr, nullptr), Error);
    EXPECT_THROW(qdq_mxfp4_block32(x, y, 16, nullptr, nullptr), Error);
    EXPECT_THROW(qdq_fp4_e4m3_block16(x, y, 8, nullptr, nullptr), Error);
    EXPECT_THROW(main_kv_row_bytes(24), Error);
    EXPECT_THROW(window_row_bytes(48), Error);
    // A NaN gives a NaN block (scale byte 255), not a crash; other blocks are unaffected.
    float xn[64];
    for (int i = 0; i < 64; ++i) xn[i] = static_cast<float>(i);
    xn[3] = std::nanf("");
    uint8_t ex[2];
    float yn[64];
    qdq_fp8_block32(xn, yn, 64, nullptr, ex);
    EXPECT_EQ(ex[0], 255);
    EXPECT_TRUE(std::isnan(yn[0]));
    EXPECT_EQ(yn[40], 40.0f);
    qdq_mxfp4_block32(xn, yn, 64, nullptr, ex);
    EXPECT_EQ(ex[0], 255);
    EXPECT_TRUE(std::isnan(yn[31]));
    qdq_fp4_e4m3_block16(xn, yn, 64, nullptr, nullptr);
    EXPECT_TRUE(std::isnan(yn[15]));
    EXPECT_FALSE(std::isnan(yn[16]));
    // An infinity too: E4M3's saturation must not turn it into a finite scale.
    xn[3] = std::numeric_limits<float>::infinity();
    qdq_fp4_e4m3_block16(xn, yn, 64, nullptr, nullptr);
    EXPECT_TRUE(std::isnan(yn[0]));
    EXPECT_EQ(yn[20], 20.0f);
    qdq_fp8_block32(xn, yn, 64, nullptr, ex);
    EXPECT_EQ(ex[0], 255);
}

// ---------------------------------------------------------------------------------------------
// FP8-linear: a float dot over the QDQ'd activations equals the §4.6 GEMM bit for bit
// ---------------------------------------------------------------------------------------------

TEST(V41Formats, Fp8LinearDotIsExact) {
    const int64_t k = 1024;
    Rng rng(31);
    for (int trial = 0; trial < 50; ++trial) {
        const auto x = varied_blocks(100 + trial, k);
        std::vector<float> xq(k);
        std::vector<uint8_t> qc(k), qe(k / 32);
        fp8_linear_act_row(x.data(), xq.data(), k);
        qdq_fp8_block32(x.data(), nullptr, k, qc.data(), qe.data());
        // Weight: random E4M3 codes with one tile exponent per 32 inputs.
        std::vector<uint8_t> wc(k);
        std::vector<int> ws(k / 32);
        for (auto& c : wc) {
            c = static_cast<uint8_t>(rng.below(256));
            if ((c & 0x7f) == 0x7f) c = 0x7e;
        }
        for (auto& s : ws) s = -12 + static_cast<int>(rng.below(10));
        std::vector<float> wt(k);  // lossless dequantized weight
        for (int64_t i = 0; i < k; ++i)
            wt[i] = round_bf16(std::ldexp(e4m3_decode(wc[i]), ws[i / 32]));
        // §4.6 as written: integer-grid products per block, then the power-of-two scaling.
        float acc = 0.0f;
        for (int64_t b = 0; b < k / 32; ++b) {
            float part = 0.0f;
            for (int64_t i = b * 32; i < b * 32 + 32; ++i)
                part += e4m3_decode(qc[i]) * e4m3_decode(wc[i]);
            acc = acc + std::ldexp(part, (static_cast<int>(qe[b]) - 127) + ws[b]);
        }
        EXPECT_EQ(bits(fp8_linear_dot_ref(xq.data(), wt.data(), k)), bits(acc)) << trial;
    }
}

// ---------------------------------------------------------------------------------------------
// Packed rows
// ---------------------------------------------------------------------------------------------

TEST(V41Formats, PackedRowSizes) {
    EXPECT_EQ(main_kv_row_bytes(512), 288);
    EXPECT_EQ(index_key_row_bytes(128), 68);
    EXPECT_EQ(window_row_bytes(512), 528);
    EXPECT_EQ(main_kv_row_bytes(64), 36);
    EXPECT_EQ(index_key_row_bytes(32), 17);
}

TEST(V41Formats, PackedRowsDecodeToTheQdqBitForBit) {
    for (int64_t d : {32, 64, 128, 512}) {
        SCOPED_TRACE(d);
        for (uint64_t seed = 0; seed < 20; ++seed) {
            const auto x = varied_blocks(1000 + seed, d);
            std::vector<float> q(d), u(d);
            // Main KV (only for multiples of 16, all of these are).
            std::vector<uint8_t> row(main_kv_row_bytes(d)), row2(row.size());
            std::vector<uint8_t> codes(d), sc(d / 16);
            quantize_main_kv_row(x.data(), d, row.data(), q.data());
            std::vector<float> qref(d);
            qdq_fp4_e4m3_block16(x.data(), qref.data(), d, codes.data(), sc.data());
            pack_main_kv_row(codes.data(), sc.data(), d, row2.data());
            EXPECT_EQ(row, row2);
            unpack_main_kv_row(row.data(), d, u.data());
            for (int64_t i = 0; i < d; ++i) {
                ASSERT_EQ(bits(u[i]), bits(qref[i])) << i;
                ASSERT_EQ(bits(q[i]), bits(qref[i])) << i;
            }
            // Index key.
            row.assign(index_key_row_bytes(d), 0);
            row2.assign(row.size(), 0);
            std::vector<uint8_t> ex(d / 32);
            quantize_index_key_row(x.data(), d, row.data(), q.data());
            qdq_mxfp4_block32(x.data(), qref.data(), d, codes.data(), ex.data());
            pack_index_key_row(codes.data(), ex.data(), d, row2.data());
            EXPECT_EQ(row, row2);
            unpack_index_key_row(row.data(), d, u.data());
            for (int64_t i = 0; i < d; ++i) {
                ASSERT_EQ(bits(u[i]), bits(qref[i])) << i;
                ASSERT_EQ(bits(q[i]), bits(qref[i])) << i;
            }
            // Window row.
            row.assign(window_row_bytes(d), 0);
            row2.assign(row.size(), 0);
            quantize_window_row(x.data(), d, row.data(), q.data());
            qdq_fp8_block32(x.data(), qref.data(), d, codes.data(), ex.data());
            pack_window_row(codes.data(), ex.data(), d, row2.data());
            EXPECT_EQ(row, row2);
            unpack_window_row(row.data(), d, u.data());
            for (int64_t i = 0; i < d; ++i) {
                ASSERT_EQ(bits(u[i]), bits(qref[i])) << i;
                ASSERT_EQ(bits(q[i]), bits(qref[i])) << i;
            }
        }
    }
}

TEST(V41Formats, PackedRowNibbleOrderAndLayout) {
    // Element 0 = 0.5 (code 1), element 1 = -6 (code 15): byte 0 = 0xf1. amax 6 -> s = 1.
    std::vector<float> x(32, 0.0f);
    x[0] = 0.5f;
    x[1] = -6.0f;
    x[17] = 3.0f;  // second group: amax 3 -> s = e4m3(0.5) = 0.5, 3 / 0.5 = 6 -> code 7
    std::vector<uint8_t> row(main_kv_row_bytes(32));
    quantize_main_kv_row(x.data(), 32, row.data(), nullptr);
    EXPECT_EQ(row[0], 0xf1);
    EXPECT_EQ(row[8], 0x70);  // elements 16 (0) and 17 (code 7)
    EXPECT_EQ(row[16], e4m3_encode(1.0f));
    EXPECT_EQ(row[17], e4m3_encode(0.5f));
    std::vector<uint8_t> wrow(window_row_bytes(32));
    quantize_window_row(x.data(), 32, wrow.data(), nullptr);
    EXPECT_EQ(wrow[32], 127 + fast_round_scale(6.0f, r448()));  // exponent byte after the codes
    EXPECT_EQ(wrow[1], e4m3_encode(-6.0f / ue8m0_to_float(wrow[32])));
}

// ---------------------------------------------------------------------------------------------
// MXFP4 repack and quantizer
// ---------------------------------------------------------------------------------------------

TEST(V41Formats, Mxfp4RepackRoundTripAndGgmlDequant) {
    const int64_t n = 256;
    Rng rng(41);
    std::vector<uint8_t> packed(n / 2), exps(n / 32);
    for (auto& b : packed) b = static_cast<uint8_t>(rng.below(256));
    for (auto& e : exps) e = static_cast<uint8_t>(100 + rng.below(50));
    std::vector<block_mxfp4> blocks(n / 32);
    mxfp4_checkpoint_to_ggml(packed.data(), exps.data(), n, blocks.data());
    std::vector<uint8_t> packed2(n / 2), exps2(n / 32);
    mxfp4_ggml_to_checkpoint(blocks.data(), n, packed2.data(), exps2.data());
    EXPECT_EQ(packed, packed2);
    EXPECT_EQ(exps, exps2);
    // GGML's dequantizer on the repacked blocks equals e2m1 * 2^(b - 127) in checkpoint order
    // (compared as values: GGML's integer table decodes code 8, -0, as +0).
    std::vector<float> g(n);
    dequantize_row_mxfp4(blocks.data(), g.data(), n);
    for (int64_t i = 0; i < n; ++i) {
        const uint8_t code = (i & 1) ? packed[i / 2] >> 4 : packed[i / 2] & 0x0f;
        ASSERT_EQ(g[i], e2m1_decode(code) * ue8m0_to_float(exps[i / 32])) << i;
    }
}

TEST(V41Formats, QuantizeRowMxfp4MatchesQdq) {
    const int64_t n = 2048;
    const auto x = varied_blocks(51, n);
    std::vector<block_mxfp4> blocks(n / 32);
    quantize_row_mxfp4(x.data(), blocks.data(), n);
    std::vector<float> g(n), q(n);
    dequantize_row_mxfp4(blocks.data(), g.data(), n);
    qdq_mxfp4_block32(x.data(), q.data(), n, nullptr, nullptr);
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(g[i], q[i]) << i;  // values: GGML decodes -0 as +0
        if (q[i] != 0.0f) {
            ASSERT_EQ(bits(g[i]), bits(q[i])) << i;
        }
    }
    // Through the weight quantizer's entry point, two rows.
    ASSERT_TRUE(can_quantize_to(ggml_type::MXFP4));
    std::vector<uint8_t> bytes(2 * row_bytes(ggml_type::MXFP4, n / 2));
    EXPECT_EQ(quantize_rows(ggml_type::MXFP4, x.data(), bytes.data(), 2, n / 2, nullptr),
              bytes.size());
    EXPECT_EQ(std::memcmp(bytes.data(), blocks.data(), bytes.size()), 0);
    // And to the index-key row: the same codes in the checkpoint nibble order.
    std::vector<uint8_t> row(index_key_row_bytes(128));
    quantize_index_key_row(x.data(), 128, row.data(), nullptr);
    std::vector<block_mxfp4> from_row(4);
    mxfp4_checkpoint_to_ggml(row.data(), row.data() + 64, 128, from_row.data());
    EXPECT_EQ(std::memcmp(from_row.data(), blocks.data(), 4 * sizeof(block_mxfp4)), 0);
}

}  // namespace
}  // namespace magnetar::quant
