// BF16 x BF16 dot product with AVX512-BF16 (VDPBF16PS), the q8-activation family's BF16
// kernel on CPUs that have it, as GGML uses there. Compiled with -mavx512f -mavx512bf16;
// reached only through dispatch.cpp after CPUID has confirmed both.
// GCC 12's AVX-512 headers initialise "undefined" vectors from themselves, which its own
// -Wuninitialized reports once inlined (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cstdint>

#include "backend/cpu/simd/avx512_intrinsics.h"
#include "backend/cpu/simd/simd_internal.h"
#include "quant/fp16.h"

namespace magnetar::cpu::simd::detail {

namespace {

float dot_bf16(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const uint16_t*>(w);
    const auto* y = static_cast<const uint16_t*>(a);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(x + i),
                                (__m512bh)_mm512_loadu_si512(y + i));
        acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(x + i + 32),
                                (__m512bh)_mm512_loadu_si512(y + i + 32));
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < n; ++i) sum += bf16_to_f32(x[i]) * bf16_to_f32(y[i]);
    return sum;
}

}  // namespace

vec_dot_fn bf16_dot_avx512bf16() {
    return dot_bf16;
}

q8_matmul_fn bf16_matmul_avx512bf16() {
    return matmul_rows<dot_bf16>;
}

}  // namespace magnetar::cpu::simd::detail
