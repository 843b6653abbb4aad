// The intrinsics of the AVX-512 translation units. Normally the compiler's own (the unit is
// compiled with the AVX-512 flags). With MAGNETAR_SIMD_EMULATE_AVX512 (the emulated-AVX-512
// test build, compiled with AVX2 flags) the 512-bit intrinsics and types are SIMDe's portable
// implementations under their usual names, while the 128- and 256-bit ones stay native; the
// kernels' code is then unchanged and runs on any AVX2 CPU, slowly.
#pragma once

#if defined(MAGNETAR_SIMD_EMULATE_AVX512)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <cstring>

// The ones the kernels use that SIMDe 0.7 lacks, built from two native 256-bit halves with the
// compiler's semantics: conversions round as their 256-bit forms do, and the float reduction
// adds in GCC's order (the 256-bit halves, then the 128-bit halves, then lanes {0,1} + {2,3},
// then lane 0 + lane 1).
template <class To, class From>
inline To magnetar_emu_bits(const From& v) {
    static_assert(sizeof(To) == sizeof(From));
    To r;
    std::memcpy(&r, &v, sizeof(r));
    return r;
}
struct magnetar_emu_i2 {
    __m256i h[2];
};
struct magnetar_emu_f2 {
    __m256 h[2];
};
inline simde__m512 magnetar_emu_cvtepi32_ps(simde__m512i a) {
    const auto v = magnetar_emu_bits<magnetar_emu_i2>(a);
    return magnetar_emu_bits<simde__m512>(
        magnetar_emu_f2{{_mm256_cvtepi32_ps(v.h[0]), _mm256_cvtepi32_ps(v.h[1])}});
}
inline simde__m512i magnetar_emu_cvtepi8_epi32(__m128i a) {
    return magnetar_emu_bits<simde__m512i>(
        magnetar_emu_i2{{_mm256_cvtepi8_epi32(a), _mm256_cvtepi8_epi32(_mm_srli_si128(a, 8))}});
}
inline simde__m512i magnetar_emu_cvtepu8_epi32(__m128i a) {
    return magnetar_emu_bits<simde__m512i>(
        magnetar_emu_i2{{_mm256_cvtepu8_epi32(a), _mm256_cvtepu8_epi32(_mm_srli_si128(a, 8))}});
}
inline simde__m512i magnetar_emu_cvtepu16_epi32(__m256i a) {
    return magnetar_emu_bits<simde__m512i>(
        magnetar_emu_i2{{_mm256_cvtepu16_epi32(_mm256_castsi256_si128(a)),
                         _mm256_cvtepu16_epi32(_mm256_extracti128_si256(a, 1))}});
}
inline simde__m512 magnetar_emu_cvtph_ps(__m256i a) {
    return magnetar_emu_bits<simde__m512>(
        magnetar_emu_f2{{_mm256_cvtph_ps(_mm256_castsi256_si128(a)),
                         _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1))}});
}
inline int magnetar_emu_reduce_add_epi32(simde__m512i a) {
    const auto v = magnetar_emu_bits<magnetar_emu_i2>(a);
    int32_t l[16];
    std::memcpy(l, v.h, sizeof(l));
    uint32_t s = 0;
    for (int32_t x : l) s += static_cast<uint32_t>(x);
    return static_cast<int>(s);
}
inline long long magnetar_emu_reduce_add_epi64(simde__m512i a) {
    const auto v = magnetar_emu_bits<magnetar_emu_i2>(a);
    uint64_t l[8];
    std::memcpy(l, v.h, sizeof(l));
    uint64_t s = 0;
    for (uint64_t x : l) s += x;
    return static_cast<long long>(s);
}
inline float magnetar_emu_reduce_add_ps(simde__m512 a) {
    const auto v = magnetar_emu_bits<magnetar_emu_f2>(a);
    const __m256 s8 = _mm256_add_ps(v.h[1], v.h[0]);
    const __m128 s4 = _mm_add_ps(_mm256_extractf128_ps(s8, 1), _mm256_castps256_ps128(s8));
    const __m128 s2 = _mm_add_ps(s4, _mm_shuffle_ps(s4, s4, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(s2) + _mm_cvtss_f32(_mm_shuffle_ps(s2, s2, 1));
}
#define _mm512_cvtepi32_ps(a) magnetar_emu_cvtepi32_ps(a)
#define _mm512_cvtepi8_epi32(a) magnetar_emu_cvtepi8_epi32(a)
#define _mm512_cvtepu8_epi32(a) magnetar_emu_cvtepu8_epi32(a)
#define _mm512_cvtepu16_epi32(a) magnetar_emu_cvtepu16_epi32(a)
#define _mm512_cvtph_ps(a) magnetar_emu_cvtph_ps(a)
#define _mm512_reduce_add_epi32(a) magnetar_emu_reduce_add_epi32(a)
#define _mm512_reduce_add_epi64(a) magnetar_emu_reduce_add_epi64(a)
#define _mm512_reduce_add_ps(a) magnetar_emu_reduce_add_ps(a)
#else
#include <immintrin.h>
#endif

namespace magnetar::cpu::simd {

// Makes v opaque to the optimizer (no hoisting or folding across a benchmark loop's rounds).
template <class T>
inline void opaque(T& v) {
#if defined(MAGNETAR_SIMD_EMULATE_AVX512)
    asm volatile("" : "+m"(v));
#else
    asm volatile("" : "+v"(v));
#endif
}

}  // namespace magnetar::cpu::simd
