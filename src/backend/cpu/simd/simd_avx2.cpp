// AVX2 + FMA + F16C kernels: the f32-activation family on 16 lanes held as two 256-bit
// halves, and the q8-activation family. Compiled with -mavx2 -mfma -mf16c; reached only
// through dispatch.cpp after CPUID has confirmed those features.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/simd/simd_internal.h"

namespace magnetar::cpu::simd::avx2 {

struct V {
    struct vf {
        __m256 lo, hi;
    };
    struct vi {
        __m256i lo, hi;
    };
    static vf zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
    static vf set1(float v) {
        const __m256 s = _mm256_set1_ps(v);
        return {s, s};
    }
    static vf load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
    static vf fma(vf a, vf b, vf c) {
        return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
    }
    static vf mul(vf a, vf b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
    static vf sub(vf a, vf b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
    static vf cvt(vi v) { return {_mm256_cvtepi32_ps(v.lo), _mm256_cvtepi32_ps(v.hi)}; }
    static vi u8(const uint8_t* p) {
        return {_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)))};
    }
    static vi i8(const int8_t* p) {
        return {_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))),
                _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)))};
    }
    static vi nib_i8(const uint8_t* p, int shift, const int8_t* table) {
        const __m128i q =
            _mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), shift);
        const __m128i v = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)),
                                           _mm_and_si128(q, _mm_set1_epi8(0x0F)));
        return {_mm256_cvtepi8_epi32(v), _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))};
    }
    static vi and_(vi v, int m) {
        const __m256i mm = _mm256_set1_epi32(m);
        return {_mm256_and_si256(v.lo, mm), _mm256_and_si256(v.hi, mm)};
    }
    static vi srl(vi v, int s) { return {_mm256_srli_epi32(v.lo, s), _mm256_srli_epi32(v.hi, s)}; }
    static vf f16(const uint16_t* p) {
        return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
                _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
    }
    static __m256 bf16x8(const uint16_t* p) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
    }
    static vf bf16(const uint16_t* p) { return {bf16x8(p), bf16x8(p + 8)}; }
    static vf pair(const float* a, const float* b) {
        return {_mm256_load_ps(a), _mm256_load_ps(b)};
    }
    static vf flip(vf v, const uint32_t* a, const uint32_t* b) {
        return {_mm256_xor_ps(v.lo, _mm256_load_ps(reinterpret_cast<const float*>(a))),
                _mm256_xor_ps(v.hi, _mm256_load_ps(reinterpret_cast<const float*>(b)))};
    }
    static float h2f(uint16_t h) { return _cvtsh_ss(h); }
    // Lanes l + (l ^ 8), then ^4, ^2, ^1.
    static float reduce(vf v) {
        const __m256 s8 = _mm256_add_ps(v.lo, v.hi);
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
    }
};

}  // namespace magnetar::cpu::simd::avx2

#define MAGNETAR_SIMD_NS avx2
#include "backend/cpu/simd/f32act_kernels.h"
#include "backend/cpu/simd/index_kernels.h"
#include "backend/cpu/simd/q8act_kernels.h"

namespace magnetar::cpu::simd::avx2 {

// Blocks of 64 KiB read as four interleaved 16 KiB streams, the access pattern of a decode
// tile (four consecutive weight rows at once): a single stream leaves memory parallelism
// unused and understates the bandwidth a kernel can get.
uint64_t stream_sum(const void* data, size_t bytes) {
    constexpr size_t kBlock = 64 << 10;
    const auto* base = static_cast<const uint8_t*>(data);
    __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
    for (size_t b = 0; b < bytes; b += kBlock) {
        const uint8_t* p = base + b;
        const size_t q = std::min(kBlock, bytes - b) / 4;
        for (size_t i = 0; i < q; i += 32) {
            for (int k = 0; k < 4; ++k) {
                a[k] = _mm256_add_epi64(
                    a[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k * q + i)));
            }
        }
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3]));
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return static_cast<uint64_t>(_mm_cvtsi128_si64(h)) +
           static_cast<uint64_t>(_mm_extract_epi64(h, 1));
}

// The q8-activation kernels' multiply-add pair (u8 x s8 -> s16 pairs, then s16 pairs -> s32)
// on 8 independent chains: 32 multiply-adds per chain and round.
uint64_t peak_int8(uint64_t rounds, uint64_t* macs) {
    constexpr int kChains = 8;
    __m256i acc[kChains];
    __m256i s[kChains];
    for (int k = 0; k < kChains; ++k) {
        acc[k] = _mm256_setzero_si256();
        s[k] = _mm256_set1_epi8(static_cast<char>(2 * k - 7));
    }
    __m256i u = _mm256_set1_epi8(3);
    const __m256i ones = _mm256_set1_epi16(1);
    for (uint64_t r = 0; r < rounds; ++r) {
        asm volatile("" : "+x"(u));  // opaque: no hoisting or folding
        for (int k = 0; k < kChains; ++k) {
            acc[k] =
                _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s[k]), ones));
        }
    }
    *macs = rounds * kChains * 32;
    __m256i t = acc[0];
    for (int k = 1; k < kChains; ++k) t = _mm256_xor_si256(_mm256_slli_epi32(t, 1), acc[k]);
    return static_cast<uint64_t>(_mm256_extract_epi64(t, 0) ^ _mm256_extract_epi64(t, 3));
}

// Fused multiply-adds on 12 independent chains of 8 floats (enough to cover the FMA latency
// times the FMA ports of current cores).
uint64_t peak_f32(uint64_t rounds, uint64_t* macs) {
    constexpr int kChains = 12;
    __m256 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(static_cast<float>(k));
    __m256 x = _mm256_set1_ps(0.999f);
    const __m256 y = _mm256_set1_ps(1e-3f);
    for (uint64_t r = 0; r < rounds; ++r) {
        asm volatile("" : "+x"(x));
        for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], x, y);
    }
    *macs = rounds * kChains * 8;
    __m256 t = acc[0];
    for (int k = 1; k < kChains; ++k) t = _mm256_add_ps(t, acc[k]);
    return static_cast<uint64_t>(_mm256_extract_epi32(_mm256_castps_si256(t), 0));
}

}  // namespace magnetar::cpu::simd::avx2

namespace magnetar::cpu::simd::detail {

const kernel_table& table_avx2() {
    static const kernel_table table = [] {
        kernel_table k;
        // Decode: 4 rows share each activation load (8 of the 16 registers accumulate).
        // Prefill: one row's dequantized chunk feeds 4 tokens.
        avx2::fill_f32act<4, 4>(k);
        avx2::q8::fill(k);
        k.stream_sum = avx2::stream_sum;
        k.peak_int8 = avx2::peak_int8;
        k.peak_f32 = avx2::peak_f32;
        k.index_scores = avx2::idx::index_scores;
        return k;
    }();
    return table;
}

}  // namespace magnetar::cpu::simd::detail
