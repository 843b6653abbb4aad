// The sampling generator (xorshift64*, protocol §4.3) against the formula written out here
// independently, plus a few outputs pinned as literals, and seed derivation.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "magnetar/sampler.h"

namespace magnetar {
namespace {

// The step and the float conversion exactly as the spec states them.
struct reference_rng {
    uint64_t state;
    explicit reference_rng(uint64_t seed) : state(seed == 0 ? 0x9E3779B97F4A7C15ull : seed) {}
    uint64_t next() {
        uint64_t x = state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state = x;
        return x * 0x2545F4914F6CDD1Dull;
    }
    double next_uniform() { return static_cast<double>((next() >> 40) & 0xFFFFFF) / 16777216.0; }
};

TEST(SamplingRng, MatchesFormulaForSeveralSeeds) {
    for (const uint64_t seed : {uint64_t{1}, uint64_t{42}, uint64_t{0xDEADBEEFull},
                                uint64_t{0xFFFFFFFFFFFFFFFFull}, uint64_t{12345678901234567ull}}) {
        sampling_rng rng(seed);
        reference_rng ref(seed);
        for (int i = 0; i < 64; ++i) {
            ASSERT_EQ(rng.next_u64(), ref.next()) << "seed " << seed << " draw " << i;
            ASSERT_EQ(rng.state(), ref.state);
        }
        sampling_rng rng_f(seed);
        reference_rng ref_f(seed);
        for (int i = 0; i < 64; ++i) {
            ASSERT_EQ(static_cast<double>(rng_f.next_float()), ref_f.next_uniform())
                << "seed " << seed << " draw " << i;
        }
    }
}

TEST(SamplingRng, PinnedFirstOutputs) {
    sampling_rng one(1);
    EXPECT_EQ(one.next_u64(), 0x47e4ce4b896cdd1dull);
    EXPECT_EQ(one.next_u64(), 0xabcfa6a8e079651dull);
    EXPECT_EQ(one.next_u64(), 0xb9d10d8feb731f57ull);

    sampling_rng forty_two(42);
    EXPECT_EQ(forty_two.next_u64(), 0x56ce4ab7719ba3a0ull);
    sampling_rng forty_two_f(42);
    EXPECT_EQ(forty_two_f.next_float(), 0.3390852212905884f);
    EXPECT_EQ(forty_two_f.next_float(), 0.7822558283805847f);
}

TEST(SamplingRng, ZeroSeedIsReplaced) {
    sampling_rng zero(0);
    EXPECT_EQ(zero.state(), 0x9E3779B97F4A7C15ull);
    sampling_rng golden(0x9E3779B97F4A7C15ull);
    reference_rng ref(0);
    for (int i = 0; i < 8; ++i) {
        const uint64_t a = zero.next_u64();
        EXPECT_EQ(a, golden.next_u64());
        EXPECT_EQ(a, ref.next());
    }
    sampling_rng pinned(0);
    EXPECT_EQ(pinned.next_u64(), 0x0d83b3e29a21487aull);

    sampling_rng reseeded(7);
    reseeded.reseed(0);
    EXPECT_EQ(reseeded.state(), 0x9E3779B97F4A7C15ull);
}

TEST(SamplingRng, UniformFloatRange) {
    sampling_rng rng(99);
    for (int i = 0; i < 100000; ++i) {
        const float u = rng.next_float();
        ASSERT_GE(u, 0.0f);
        ASSERT_LT(u, 1.0f);
    }
}

TEST(SamplingSeed, DeriveSeedIsNonZeroAndVaries) {
    std::set<uint64_t> seen;
    for (uint64_t seq = 0; seq < 64; ++seq) {
        const uint64_t s = derive_seed(seq);
        EXPECT_NE(s, 0u);
        seen.insert(s);
    }
    EXPECT_GT(seen.size(), 60u);
}

TEST(SamplingSeed, SamplerSeedZeroDerivesDistinctSeeds) {
    const sampler a(sampling_params{});
    const sampler b(sampling_params{});
    EXPECT_NE(a.seed(), 0u);
    EXPECT_NE(b.seed(), 0u);
    EXPECT_NE(a.seed(), b.seed());

    sampling_params p;
    p.seed = 1234;
    const sampler c(p);
    EXPECT_EQ(c.seed(), 1234u);
}

}  // namespace
}  // namespace magnetar
