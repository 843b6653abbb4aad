// Scalar twin of the CPU matmul: the plainest possible y = W x, one dequantized weight row and
// one sequential float sum per output. Same signature as the table entries of cpu/matmul.h;
// the op tests check every fast entry against it (normalised MSE, not bits: the fast kernel
// sums in a different order).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace magnetar::cpu::ref {

// scratch holds w.ne[0] floats.
void matmul_ref(const tensor& w, const tensor& x, const tensor& y, int64_t r0, int64_t r1,
                float* scratch);

}  // namespace magnetar::cpu::ref
