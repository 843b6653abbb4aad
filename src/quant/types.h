// The quant library's per-type table: the scalar reference kernels of each type, bit-exact with
// GGML where GGML has the type - dequantize a row, quantize a row, the reference dot product
// with the type's activation partner, and random rows for the generator. A new type is one row
// here plus its kernels; no other quant file has a switch over types. The type ids, block
// layouts and byte arithmetic themselves are core's (core/types.h).
#pragma once

#include <cstdint>

#include "core/types.h"

namespace magnetar {

class Rng;

// Dequantize n elements (n a multiple of the block size) from src to float.
using to_float_fn = void (*)(const void* src, float* dst, int64_t n);
// Quantize one row of n floats (a multiple of the block size) into row_bytes(t, n) bytes;
// imatrix: n importance weights or null (types that ignore it accept it and ignore it).
using from_float_fn = void (*)(const float* src, void* dst, int64_t n, const float* imatrix);
// Dot product of one weight row with one activation row already in the partner type.
using dot_ref_fn = float (*)(const void* w, const void* act, int64_t n);
// Random row of n elements for the generator (see quant/random_fill.h).
using random_row_fn = void (*)(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);

struct scalar_kernels {
    ggml_type type;
    to_float_fn to_float;      // nullptr: no float view (I8, I32)
    from_float_fn from_float;  // nullptr: not a quantization target
    bool uses_imatrix;         // from_float weights its error by an importance matrix
    ggml_type dot_partner;     // the activation type `dot` takes (when dot is not null)
    dot_ref_fn dot;            // nullptr: never a matmul weight (Q8_K, I8, I32)
    random_row_fn random_row;  // random rows for the generator
};

// The row of a type of core's table (every such type has one; asserts otherwise).
const scalar_kernels& scalar_kernels_of(ggml_type t);
// Whether the table has a row for t (every type of core's table must have one).
bool has_scalar_kernels(ggml_type t);

// The scalar reference dequantizer of a type; nullptr for types without one (I8, I32).
to_float_fn to_float_of(ggml_type t);

}  // namespace magnetar
