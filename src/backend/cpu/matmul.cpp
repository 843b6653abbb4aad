#include "backend/cpu/matmul.h"

#include <algorithm>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd/simd.h"
#include "quant/types.h"

namespace magnetar::cpu {

namespace {

// Weight rows dequantized per block: about 64 KiB of floats, so a block stays in L2 while every
// token of the batch passes over it.
constexpr int64_t kBlockFloats = 16384;

int64_t rows_per_block(int64_t n_in) {
    return std::max<int64_t>(1, kBlockFloats / n_in);
}

void dot_block(const float* wrows, int64_t nr, int64_t n_in, const tensor& x, const tensor& y,
               int64_t r0) {
    const int64_t n_tok = x.ne[1];
    for (int64_t t = 0; t < n_tok; ++t) {
        const float* xt = x.f32_row(t);
        float* yt = y.f32_row(t) + r0;
        for (int64_t r = 0; r < nr; ++r) yt[r] = dot_f32(wrows + r * n_in, xt, n_in);
    }
}

// F32 weights: rows are used straight from the mapping.
void matmul_f32(const tensor& w, const tensor& x, const tensor& y, int64_t r0, int64_t r1, float*) {
    const int64_t n_in = w.ne[0];
    const int64_t rb = rows_per_block(n_in);
    for (int64_t b = r0; b < r1; b += rb) {
        const int64_t nr = std::min(rb, r1 - b);
        dot_block(reinterpret_cast<const float*>(w.row_ptr(b)), nr, n_in, x, y, b);
    }
}

// Every other stored type: dequantize a block of rows with the type's scalar dequantizer.
void matmul_dequant(const tensor& w, const tensor& x, const tensor& y, int64_t r0, int64_t r1,
                    float* scratch) {
    const int64_t n_in = w.ne[0];
    const int64_t rb = rows_per_block(n_in);
    const to_float_fn to_float = to_float_of(w.type);
    for (int64_t b = r0; b < r1; b += rb) {
        const int64_t nr = std::min(rb, r1 - b);
        for (int64_t r = 0; r < nr; ++r) to_float(w.row_ptr(b + r), scratch + r * n_in, n_in);
        dot_block(scratch, nr, n_in, x, y, b);
    }
}

}  // namespace

// Any row length up to n_in: a block never exceeds kBlockFloats unless a single row does.
int64_t matmul_scratch_floats(int64_t n_in) {
    return std::max(kBlockFloats, n_in);
}

matmul_fn matmul_for(ggml_type t) {
    // AVX2 / AVX-512 kernels when the CPU has them (MAGNETAR_SIMD=off keeps the scalar table).
    if (const matmul_fn fast = simd::simd_matmul_for(t)) return fast;
    // Scalar path: F32 directly, every other type with a float view through its dequantizer
    // (quant's table); types without one (Q8_K, I8, I32) are never matmul weights.
    if (t == ggml_type::F32) return matmul_f32;
    if (!has_scalar_kernels(t)) return nullptr;
    const scalar_kernels& k = scalar_kernels_of(t);
    return k.to_float != nullptr && k.dot != nullptr ? matmul_dequant : nullptr;
}

}  // namespace magnetar::cpu
