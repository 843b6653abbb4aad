// AVX-512 kernels (F, BW, VL, DQ, VNNI): the f32-activation family with the 16 lanes in one
// 512-bit register, and the q8-activation family with VNNI multiply-adds. Compiled with those
// flags; reached only through dispatch.cpp after CPUID has confirmed them.
//
// The f32-activation kernels share every line above the vector interface with the AVX2 unit
// (f32act_kernels.h), so the tests that pin AVX2 to the scalar twin also cover the algorithm
// here; this file adds only the 512-bit primitives below.
//
// With MAGNETAR_SIMD_EMULATE_AVX512 defined (a test build, compiled with AVX2 flags only) the
// AVX-512 intrinsics come from SIMDe's portable implementations instead of the compiler, so the
// code of this unit runs, and is tested against the scalar twin, on CPUs without AVX-512.
// GCC 12's AVX-512 headers initialise "undefined" vectors from themselves, which its own
// -Wuninitialized reports once inlined (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <algorithm>
#include <cstdint>

#include "backend/cpu/simd/avx512_intrinsics.h"
#include "backend/cpu/simd/simd_internal.h"

namespace magnetar::cpu::simd::avx512 {

struct V {
    using vf = __m512;
    using vi = __m512i;
    static vf zero() { return _mm512_setzero_ps(); }
    static vf set1(float v) { return _mm512_set1_ps(v); }
    static vf load(const float* p) { return _mm512_loadu_ps(p); }
    static vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
    static vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
    static vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
    static vf cvt(vi v) { return _mm512_cvtepi32_ps(v); }
    static vi u8(const uint8_t* p) {
        return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static vi i8(const int8_t* p) {
        return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static vi nib_i8(const uint8_t* p, int shift, const int8_t* table) {
        const __m128i q =
            _mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), shift);
        return _mm512_cvtepi8_epi32(
            _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)),
                             _mm_and_si128(q, _mm_set1_epi8(0x0F))));
    }
    static vi and_(vi v, int m) { return _mm512_and_si512(v, _mm512_set1_epi32(m)); }
    static vi srl(vi v, int s) { return _mm512_srli_epi32(v, static_cast<unsigned>(s)); }
    static vf f16(const uint16_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static vf bf16(const uint16_t* p) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
    }
    static vi pair_bits(const void* a, const void* b) {
        return _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_load_si256(static_cast<const __m256i*>(a))),
            _mm256_load_si256(static_cast<const __m256i*>(b)), 1);
    }
    static vf pair(const float* a, const float* b) { return _mm512_castsi512_ps(pair_bits(a, b)); }
    static vf flip(vf v, const uint32_t* a, const uint32_t* b) {
        return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), pair_bits(a, b)));
    }
    static float h2f(uint16_t h) { return _cvtsh_ss(h); }
    // Lanes l + (l ^ 8), then ^4, ^2, ^1: the same tree as the AVX2 and scalar versions.
    static float reduce(vf v) {
        const __m256 lo = _mm512_castps512_ps256(v);
        const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
        const __m256 s8 = _mm256_add_ps(lo, hi);
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
    }
};

}  // namespace magnetar::cpu::simd::avx512

#define MAGNETAR_SIMD_NS avx512
#define MAGNETAR_SIMD_VNNI 1
#include "backend/cpu/simd/f32act_kernels.h"
#include "backend/cpu/simd/index_kernels.h"
#include "backend/cpu/simd/q8act_kernels.h"

namespace magnetar::cpu::simd::avx512 {

// Wrapping sum of the eight 64-bit lanes. The reduce intrinsics add as signed integers, which
// overflows (undefined behaviour) on the arbitrary bit patterns these loops fold together.
static uint64_t fold_lanes(__m512i v) {
    uint64_t lanes[8];
    _mm512_storeu_si512(lanes, v);
    uint64_t s = 0;
    for (const uint64_t x : lanes) s += x;
    return s;
}

// Blocks of 64 KiB read as four interleaved streams, as in the AVX2 version.
uint64_t stream_sum(const void* data, size_t bytes) {
    constexpr size_t kBlock = 64 << 10;
    const auto* base = static_cast<const uint8_t*>(data);
    __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
    for (size_t b = 0; b < bytes; b += kBlock) {
        const uint8_t* p = base + b;
        const size_t q = std::min(kBlock, bytes - b) / 4;
        for (size_t i = 0; i < q; i += 64) {
            for (int k = 0; k < 4; ++k)
                a[k] = _mm512_add_epi64(a[k], _mm512_loadu_si512(p + k * q + i));
        }
    }
    return fold_lanes(_mm512_add_epi64(_mm512_add_epi64(a[0], a[1]), _mm512_add_epi64(a[2], a[3])));
}

// VNNI dpbusd (u8 x s8 -> s32, four products per lane) on 512-bit registers, 8 independent
// chains: 64 multiply-adds per chain and round. (The q8 kernels use the 256-bit form; the
// 512-bit one is the machine's ceiling.)
uint64_t peak_int8(uint64_t rounds, uint64_t* macs) {
    constexpr int kChains = 8;
    __m512i acc[kChains];
    __m512i s[kChains];
    for (int k = 0; k < kChains; ++k) {
        acc[k] = _mm512_setzero_si512();
        s[k] = _mm512_set1_epi8(static_cast<char>(2 * k - 7));
    }
    __m512i u = _mm512_set1_epi8(3);
    for (uint64_t r = 0; r < rounds; ++r) {
        opaque(u);  // no hoisting or folding
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], u, s[k]);
    }
    *macs = rounds * kChains * 64;
    __m512i t = acc[0];
    for (int k = 1; k < kChains; ++k) t = _mm512_xor_si512(_mm512_slli_epi32(t, 1), acc[k]);
    return fold_lanes(t);
}

// Fused multiply-adds on 16 independent chains of 16 floats.
uint64_t peak_f32(uint64_t rounds, uint64_t* macs) {
    constexpr int kChains = 16;
    __m512 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
    __m512 x = _mm512_set1_ps(0.999f);
    const __m512 y = _mm512_set1_ps(1e-3f);
    for (uint64_t r = 0; r < rounds; ++r) {
        opaque(x);
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], x, y);
    }
    *macs = rounds * kChains * 16;
    __m512 t = acc[0];
    for (int k = 1; k < kChains; ++k) t = _mm512_add_ps(t, acc[k]);
    return fold_lanes(_mm512_castps_si512(t));
}

}  // namespace magnetar::cpu::simd::avx512

namespace magnetar::cpu::simd::detail {

const kernel_table* table_avx512() {
    static const kernel_table table = [] {
        kernel_table k;
        // 32 registers: 8 decode rows per activation load, 2 x 4 prefill tiles use 8.
        avx512::fill_f32act<8, 4>(k);
        avx512::q8::fill(k);
        k.stream_sum = avx512::stream_sum;
        k.peak_int8 = avx512::peak_int8;
        k.peak_f32 = avx512::peak_f32;
        k.index_scores = avx512::idx::index_scores;
        return k;
    }();
    return &table;
}

}  // namespace magnetar::cpu::simd::detail
