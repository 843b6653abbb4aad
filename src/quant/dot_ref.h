// Scalar reference dot products: one weight row against one activation row that has already
// been converted to the weight type's partner type.
//
// Owns: the "scalar twin" that every fast dot kernel (AVX2, AVX-512, CUDA) is validated
// against. Does not own: activation quantization (quant/quantize_act.h) or any SIMD code.
//
// Partner types: F32 x F32, F16 x F16, BF16 x BF16, Q8_0 x Q8_0, MXFP4 x Q8_0, and Q2_K /
// Q4_K / IQ2_XXS x Q8_K. The arithmetic follows GGML's generic vec_dot: exact integer sums per
// block, then one float scaling per block, so results agree with GGML up to float summation
// order.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace magnetar {

// The activation type a weight type is multiplied with.
ggml_type dot_partner_type(ggml_type weight_type);

// Dot product of n elements (a multiple of the weight block size). `act` holds n elements in
// dot_partner_type(wt). Aborts for types without a dot product (I32, Q8_K).
float dot_row_ref(ggml_type wt, const void* w, const void* act, int64_t n);

}  // namespace magnetar
