// Activation quantizers: float rows to the partner types that quantized dot products consume
// (Q8_0 for Q8_0 weights, Q8_K for the K-quants and IQ2_XXS).
//
// Owns: the scalar reference quantizers, byte-identical to what GGML's CPU backend writes
// (checked against the golden activation files). Does not own: weight quantizers (their
// search heuristics live elsewhere) or SIMD variants (src/backend/cpu), which must reproduce
// these bytes.
#pragma once

#include <cstdint>

namespace magnetar {

// n is a multiple of 32; dst receives n / 32 block_q8_0.
void quantize_row_q8_0(const float* x, void* dst, int64_t n);

// n is a multiple of 256; dst receives n / 256 block_q8_K.
void quantize_row_q8_K(const float* x, void* dst, int64_t n);

}  // namespace magnetar
