// Scalar conversions between float and the 16-bit float formats (IEEE half, bfloat16).
//
// Exact: half -> float handles subnormals, infinities and NaN; float -> half rounds to nearest
// even (as the F16C instruction does); float -> bf16 rounds to nearest even and keeps NaN
// quiet (as GGML does).
#pragma once

#include <cstdint>
#include <cstring>

namespace magnetar {

inline float bits_to_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline uint32_t f32_to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

inline float fp16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return bits_to_f32(sign);
        // Subnormal: value = mant * 2^-24, exact in float.
        float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (mant << 13));
    return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t f32_to_fp16(float f) {
    const uint32_t x = f32_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) {  // inf or NaN
        return static_cast<uint16_t>(sign | 0x7c00u |
                                     (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0u));
    }
    if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (absx < 0x38800000u) {  // result is subnormal or zero
        // Scale to units of 2^-24 and round to nearest even on the integer part.
        float a = bits_to_f32(absx) * 16777216.0f;  // exact: power-of-two scale
        uint32_t i = static_cast<uint32_t>(a);
        float rem = a - static_cast<float>(i);
        if (rem > 0.5f || (rem == 0.5f && (i & 1u))) ++i;
        return static_cast<uint16_t>(sign | i);
    }
    // Normal: rebias exponent, round mantissa to 10 bits (nearest even).
    uint32_t mant = absx & 0x7fffffu;
    uint32_t exp = (absx >> 23) - 112u;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
    return static_cast<uint16_t>(sign | h);
}

inline float bf16_to_f32(uint16_t b) {
    return bits_to_f32(static_cast<uint32_t>(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return static_cast<uint16_t>((u >> 16) | 64u);  // quiet NaN
    return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

}  // namespace magnetar
