// Weight quantizers: float rows to the stored block formats, optionally importance-weighted.
//
// Owns: scalar ports of GGML's quantization algorithms (quantize_row_q8_0_ref; Q4_K and Q2_K
// with make_qkx2_quants / make_qkx3_quants / make_qp_quants; IQ2_XXS with its lattice search
// over the neighbour tables built from the grid), so files we write decode like the published
// ones and reconstruct about as well. Bytes need not equal GGML's (search details and float
// evaluation order may differ); the tests bound the reconstruction error against GGML's.
// Does not own: activation quantizers (quant/quantize_act.h), file handling (tools/quantize).
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace magnetar {

// Types quantize_rows can produce: F32, F16, BF16, Q8_0, Q4_K, Q2_K, IQ2_XXS, MXFP4 (the V4.1
// rule of quant/fp8fp4.h: power-of-two scale by R6, E2M1 round to nearest even).
bool can_quantize_to(ggml_type t);

// Whether a type's quantizer uses an importance matrix when one is given (Q4_K, Q2_K, IQ2_XXS;
// Q8_0 and the float types ignore it). IQ2_XXS without one uses uniform importance.
bool quantize_uses_imatrix(ggml_type t);

// Quantizes n_rows rows of n_per_row floats (a multiple of the block size) into dst
// (n_rows * row_bytes(t, n_per_row) bytes). imatrix: n_per_row importance weights shared by
// every row, or null. Thread-safe; builds the IQ2_XXS tables on first use. Returns bytes written.
size_t quantize_rows(ggml_type t, const float* src, void* dst, int64_t n_rows, int64_t n_per_row,
                     const float* imatrix);

}  // namespace magnetar
