// The per-type scalar kernels that quant's table (quant/types.cpp) points at, in the table's
// uniform signatures: quantize a row (quantize.cpp), the reference dot (dot_ref.cpp) and the
// generator's random rows (random_fill.cpp). Private to the quant library: everything else
// reaches them through the table (quant/types.h) or the type-generic entry points
// (quantize_rows, dot_row_ref, fill_random_row). The dequantizers are quant/dequant.h.
#pragma once

#include <cstdint>

namespace magnetar {
class Rng;
}

namespace magnetar::quant {

void from_float_f32(const float* x, void* y, int64_t n, const float* imatrix);
void from_float_f16(const float* x, void* y, int64_t n, const float* imatrix);
void from_float_bf16(const float* x, void* y, int64_t n, const float* imatrix);
void from_float_q8_0(const float* x, void* y, int64_t n, const float* imatrix);
void from_float_q2_K(const float* x, void* y, int64_t n, const float* imatrix);
void from_float_q4_K(const float* x, void* y, int64_t n, const float* imatrix);
void from_float_iq2_xxs(const float* x, void* y, int64_t n, const float* imatrix);
void from_float_mxfp4(const float* x, void* y, int64_t n, const float* imatrix);

float dot_ref_f32(const void* w, const void* a, int64_t n);
float dot_ref_f16(const void* w, const void* a, int64_t n);
float dot_ref_bf16(const void* w, const void* a, int64_t n);
float dot_ref_q8_0(const void* w, const void* a, int64_t n);
float dot_ref_q2_K(const void* w, const void* a, int64_t n);
float dot_ref_q4_K(const void* w, const void* a, int64_t n);
float dot_ref_iq2_xxs(const void* w, const void* a, int64_t n);
float dot_ref_mxfp4(const void* w, const void* a, int64_t n);

void random_f32(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);
void random_f16(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);
void random_bf16(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);
void random_q8_0(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);
void random_q8_K(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);
void random_q2_K(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);
void random_q4_K(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);
void random_iq2_xxs(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);
void random_mxfp4(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);
void random_i8(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);
void random_i32(Rng& rng, float rms, void* dst, int64_t n, int32_t int_range);

}  // namespace magnetar::quant
