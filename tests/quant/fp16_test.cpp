// Half and bfloat16 conversions: exhaustive round trips, rounding against an independent
// reference computed in double, and GGML's conversion of the golden activation.
#include "quant/fp16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "golden.h"

namespace magnetar {
namespace {

bool half_is_nan(uint16_t h) {
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}
bool bf16_is_nan(uint16_t b) {
    return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

// Value of a half bit pattern, computed independently of fp16.h.
double half_value(uint16_t h) {
    const int exp = (h >> 10) & 0x1f;
    const int mant = h & 0x3ff;
    const double mag = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
    return (h & 0x8000u) ? -mag : mag;
}

double bf16_value(uint16_t b) {
    const int exp = (b >> 7) & 0xff;
    const int mant = b & 0x7f;
    const double mag = exp == 0 ? std::ldexp(mant, -133) : std::ldexp(128 + mant, exp - 134);
    return (b & 0x8000u) ? -mag : mag;
}

// Reference rounding of a finite float to a 16-bit format. `pos` holds the values of the
// positive bit patterns 0 .. inf-1 in increasing order, followed by the value the next exponent
// would have (the rounding boundary of infinity); bit pattern i has value pos[i].
uint16_t reference_round(float f, const std::vector<double>& pos) {
    const double a = std::fabs(static_cast<double>(f));
    const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
    // Largest pattern whose value is <= a.
    const auto it = std::upper_bound(pos.begin(), pos.end(), a);
    if (it == pos.end()) return sign | static_cast<uint16_t>(pos.size() - 1);  // beyond inf's bound
    const size_t lo = static_cast<size_t>(it - pos.begin()) - 1;
    const double below = a - pos[lo];
    const double above = pos[lo + 1] - a;
    size_t pick = lo;
    if (above < below || (above == below && (lo & 1u))) pick = lo + 1;
    return sign | static_cast<uint16_t>(pick);
}

// `inf_bound` is 2^(emax+1): the value infinity stands for when deciding whether to round up.
std::vector<double> positive_values(uint16_t inf_bits, double (*value)(uint16_t),
                                    double inf_bound) {
    std::vector<double> pos;
    for (uint32_t h = 0; h < inf_bits; ++h) pos.push_back(value(static_cast<uint16_t>(h)));
    pos.push_back(inf_bound);
    return pos;
}

// Floats that probe the rounding of every positive finite pattern: the pattern itself, the
// midpoint to the next one and the floats adjacent to that midpoint, plus random floats.
std::vector<float> rounding_probes(const std::vector<double>& pos, uint64_t seed) {
    std::vector<float> probes;
    for (size_t i = 0; i + 1 < pos.size(); ++i) {
        const float v = static_cast<float>(pos[i]);
        const float mid = static_cast<float>((pos[i] + pos[i + 1]) / 2.0);
        EXPECT_EQ(static_cast<double>(mid), (pos[i] + pos[i + 1]) / 2.0)
            << "midpoint not exact in float";
        for (float p : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
            probes.push_back(p);
            probes.push_back(-p);
        }
    }
    Rng rng(seed);
    for (int i = 0; i < 200000; ++i) {
        float f = bits_to_f32(rng.next_u32());
        if (std::isfinite(f)) probes.push_back(f);
    }
    for (float f : {std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                    std::numeric_limits<float>::min(), 0.0f, -0.0f}) {
        probes.push_back(f);
    }
    return probes;
}

TEST(Fp16, HalfToFloatIsExactForAllPatterns) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const auto h = static_cast<uint16_t>(i);
        const float f = fp16_to_f32(h);
        if (half_is_nan(h)) {
            EXPECT_TRUE(std::isnan(f)) << std::hex << i;
        } else if ((h & 0x7fffu) == 0x7c00u) {
            EXPECT_TRUE(std::isinf(f) && std::signbit(f) == ((h & 0x8000u) != 0)) << std::hex << i;
        } else {
            ASSERT_EQ(static_cast<double>(f), half_value(h)) << std::hex << i;
            ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << i;
        }
    }
}

TEST(Fp16, HalfRoundTripIsIdentityExceptNan) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const auto h = static_cast<uint16_t>(i);
        const uint16_t back = f32_to_fp16(fp16_to_f32(h));
        if (half_is_nan(h)) {
            EXPECT_TRUE(half_is_nan(back)) << std::hex << i;
        } else {
            ASSERT_EQ(back, h) << std::hex << i;
        }
    }
}

TEST(Fp16, FloatToHalfRoundsToNearestEven) {
    const auto pos = positive_values(0x7c00u, half_value, 65536.0);
    int checked = 0;
    for (float f : rounding_probes(pos, 1)) {
        ASSERT_EQ(f32_to_fp16(f), reference_round(f, pos))
            << "input " << f << " bits " << std::hex << f32_to_bits(f);
        ++checked;
    }
    EXPECT_GT(checked, 400000);
    EXPECT_EQ(f32_to_fp16(65519.996f), 0x7bffu);  // just below the midpoint to infinity
    EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00u);    // the midpoint ties to even: infinity
    EXPECT_EQ(f32_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00u);
    EXPECT_EQ(f32_to_fp16(-std::numeric_limits<float>::infinity()), 0xfc00u);
    EXPECT_TRUE(half_is_nan(f32_to_fp16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Bf16, RoundTripIsIdentityExceptNan) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const auto b = static_cast<uint16_t>(i);
        const float f = bf16_to_f32(b);
        const uint16_t back = f32_to_bf16(f);
        if (bf16_is_nan(b)) {
            EXPECT_TRUE(std::isnan(f)) << std::hex << i;
            EXPECT_TRUE(bf16_is_nan(back)) << std::hex << i;
        } else {
            ASSERT_EQ(back, b) << std::hex << i;
            if ((b & 0x7fffu) != 0x7f80u) {
                ASSERT_EQ(static_cast<double>(f), bf16_value(b)) << std::hex << i;
            }
        }
    }
}

TEST(Bf16, FloatToBf16RoundsToNearestEven) {
    const auto pos = positive_values(0x7f80u, bf16_value, std::ldexp(1.0, 128));
    for (float f : rounding_probes(pos, 2)) {
        ASSERT_EQ(f32_to_bf16(f), reference_round(f, pos))
            << "input " << f << " bits " << std::hex << f32_to_bits(f);
    }
    EXPECT_TRUE(bf16_is_nan(f32_to_bf16(std::numeric_limits<float>::quiet_NaN())));
    EXPECT_TRUE(bf16_is_nan(f32_to_bf16(bits_to_f32(0x7f800001u))));  // signalling NaN stays NaN
}

template <typename Convert>
void expect_golden_conversion(const char* file, Convert convert) {
    const auto act = test::read_f32(test::golden_quants("activation.f32"));
    const auto bytes = test::read_file(test::golden_quants(file));
    ASSERT_EQ(bytes.size(), act.size() * 2);
    for (size_t i = 0; i < act.size(); ++i) {
        const uint16_t want = static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
        ASSERT_EQ(convert(act[i]), want) << file << " element " << i << " input " << act[i];
    }
}

TEST(Fp16, GoldenActivationMatchesGgml) {
    expect_golden_conversion("activation.f16.bin", f32_to_fp16);
}

TEST(Bf16, GoldenActivationMatchesGgml) {
    expect_golden_conversion("activation.bf16.bin", f32_to_bf16);
}

}  // namespace
}  // namespace magnetar
