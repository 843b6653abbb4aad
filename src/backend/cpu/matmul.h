// Matrix products of the CPU backend: one entry point per weight type.
//
// Owns: the per-type matmul table. Each entry computes y[t][o] = dot(w row o, x row t) for the
// output rows [r0, r1) and every token, reading each weight row once per call (batched prefill
// reads the weights once per chunk) and dequantizing quantized rows block by block into the
// caller's scratch. Every (t, o) element is the same fixed-order dot product whatever the row
// range, batch or thread, so results are bit-identical across decode / prefill / thread counts.
// SIMD variants replace single table entries and are checked against cpu/ref/matmul_ref.h.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace magnetar::cpu {

// Scratch floats a matmul thread needs for rows of at most n_in elements.
int64_t matmul_scratch_floats(int64_t n_in);

using matmul_fn = void (*)(const tensor& w, const tensor& x, const tensor& y, int64_t r0,
                           int64_t r1, float* scratch);

// The entry point for a weight type (never null for the stored weight types).
matmul_fn matmul_for(ggml_type t);

}  // namespace magnetar::cpu
