// Scalar reference dequantizers, one per stored type. Bit-exact with GGML's
// dequantize_row_* (checked against the golden vectors). n is a multiple of the block size.
#pragma once

#include <cstdint>

namespace magnetar {

void dequantize_row_f32(const void* src, float* dst, int64_t n);
void dequantize_row_f16(const void* src, float* dst, int64_t n);
void dequantize_row_bf16(const void* src, float* dst, int64_t n);
void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void dequantize_row_q2_K(const void* src, float* dst, int64_t n);
void dequantize_row_q4_K(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_q8_K(const void* src, float* dst, int64_t n);
void dequantize_row_mxfp4(const void* src, float* dst, int64_t n);

}  // namespace magnetar
