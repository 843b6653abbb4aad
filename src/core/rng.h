// Deterministic random numbers, identical on every machine and compiler.
//
// The generator (xoshiro256** seeded through splitmix64) and the float conversions use only
// integer arithmetic and exact float operations, never libm, so a seed produces the same
// bytes everywhere. Used by the model generator and by tests.
#pragma once

#include <cstdint>

namespace magnetar {

class Rng {
  public:
    explicit Rng(uint64_t seed) {
        uint64_t x = seed;
        for (auto& w : s_) w = splitmix64(x);
    }

    // Derive an independent stream from this seed and a 64-bit tag (e.g. a name hash).
    static Rng derive(uint64_t seed, uint64_t tag) {
        return Rng(seed ^ (tag * 0x9E3779B97F4A7C15ull));
    }

    uint64_t next_u64() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    uint32_t next_u32() { return static_cast<uint32_t>(next_u64() >> 32); }

    // Uniform in [0, n), n > 0 (multiply-shift; bias below 2^-32 for the sizes used here).
    uint32_t below(uint32_t n) { return static_cast<uint32_t>((uint64_t{next_u32()} * n) >> 32); }

    // Uniform in [0, 1) with 24 random bits: exact in float.
    float uniform01() { return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f); }

    // Uniform in [-1, 1).
    float uniform_pm1() { return uniform01() * 2.0f - 1.0f; }

    // Approximately normal (mean 0, variance 1): the sum of four 16-bit uniforms taken from one
    // 64-bit draw, rescaled (Irwin-Hall). Bounded by +-sqrt(12), which keeps synthetic weights
    // free of outliers. All operations are exact in float.
    float normal() {
        const uint64_t u = next_u64();
        const uint32_t sum =
            static_cast<uint32_t>(u & 0xFFFF) + static_cast<uint32_t>((u >> 16) & 0xFFFF) +
            static_cast<uint32_t>((u >> 32) & 0xFFFF) + static_cast<uint32_t>(u >> 48);
        // sum / 65536 - 2 lies in [-2, 2) with variance ~4/12; scale to unit variance.
        const float s = static_cast<float>(static_cast<int32_t>(sum) - 131072) * (1.0f / 65536.0f);
        return s * 1.7320508f;
    }

    static uint64_t splitmix64(uint64_t& x) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }

  private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
};

// FNV-1a 64-bit hash of a string, used to derive per-tensor random streams from names.
inline uint64_t fnv1a64(const char* s, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; ++i) {
        h ^= static_cast<unsigned char>(s[i]);
        h *= 0x100000001b3ull;
    }
    return h;
}

}  // namespace magnetar
