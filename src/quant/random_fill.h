// Synthetic weight rows for the model generator: random data of a chosen scale written
// directly in a tensor type's storage format.
//
// For block-quantized types the codes and sub-block scales are drawn at random (uniformly
// over the format's valid encodings) rather than quantized from floats: quantizing billions of
// random floats to IQ2_XXS would take hours and yields the same kind of data. Deterministic:
// the bytes depend only on the Rng state, on every machine.
#pragma once

#include <cstdint>

#include "core/rng.h"
#include "quant/types.h"

namespace magnetar {

// Writes n elements (a multiple of the block size) of type t to dst (row_bytes(t, n) bytes).
// The dequantized values have mean approximately 0 and root-mean-square approximately `rms`
// (within a few percent over a row of >= 256 elements). For I32 the values are uniform in
// [0, int_range) and rms is ignored.
void fill_random_row(ggml_type t, Rng& rng, float rms, void* dst, int64_t n, int32_t int_range = 0);

}  // namespace magnetar
