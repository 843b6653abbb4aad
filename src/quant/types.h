// The quant library's per-type table: the scalar reference kernels of each type (dequantize a
// row), bit-exact with GGML. The type ids, block layouts and byte arithmetic themselves are
// core's (core/types.h).
#pragma once

#include <cstdint>

#include "core/types.h"

namespace magnetar {

// Dequantize n elements (n a multiple of the block size) from src to float.
using to_float_fn = void (*)(const void* src, float* dst, int64_t n);

// The scalar reference dequantizer of a type; nullptr for types without one (I8, I32).
to_float_fn to_float_of(ggml_type t);
// Whether the table has a row for t (every type of core's table must have one).
bool has_scalar_kernels(ggml_type t);

}  // namespace magnetar
