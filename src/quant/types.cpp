#include "quant/types.h"

#include "core/error.h"
#include "quant/dequant.h"
#include "quant/row_kernels.h"

namespace magnetar {

namespace {

using T = ggml_type;
namespace q = quant;

// One row per type of core/types.cpp's table (tests/quant/types_test.cpp checks both agree).
// Columns: type, to_float, from_float, uses_imatrix, dot partner, reference dot, random row.
const scalar_kernels kKernels[] = {
    {T::F32, dequantize_row_f32, q::from_float_f32, false, T::F32, q::dot_ref_f32, q::random_f32},
    {T::F16, dequantize_row_f16, q::from_float_f16, false, T::F16, q::dot_ref_f16, q::random_f16},
    {T::BF16, dequantize_row_bf16, q::from_float_bf16, false, T::BF16, q::dot_ref_bf16,
     q::random_bf16},
    {T::Q8_0, dequantize_row_q8_0, q::from_float_q8_0, false, T::Q8_0, q::dot_ref_q8_0,
     q::random_q8_0},
    {T::Q2_K, dequantize_row_q2_K, q::from_float_q2_K, true, T::Q8_K, q::dot_ref_q2_K,
     q::random_q2_K},
    {T::Q4_K, dequantize_row_q4_K, q::from_float_q4_K, true, T::Q8_K, q::dot_ref_q4_K,
     q::random_q4_K},
    {T::Q8_K, dequantize_row_q8_K, nullptr, false, T::Q8_K, nullptr, q::random_q8_K},
    {T::IQ2_XXS, dequantize_row_iq2_xxs, q::from_float_iq2_xxs, true, T::Q8_K, q::dot_ref_iq2_xxs,
     q::random_iq2_xxs},
    {T::MXFP4, dequantize_row_mxfp4, q::from_float_mxfp4, false, T::Q8_0, q::dot_ref_mxfp4,
     q::random_mxfp4},
    {T::I8, nullptr, nullptr, false, T::I8, nullptr, q::random_i8},
    {T::I32, nullptr, nullptr, false, T::I32, nullptr, q::random_i32},
};

const scalar_kernels* find(ggml_type t) {
    for (const scalar_kernels& k : kKernels) {
        if (k.type == t) return &k;
    }
    return nullptr;
}

}  // namespace

const scalar_kernels& scalar_kernels_of(ggml_type t) {
    const scalar_kernels* k = find(t);
    MAGNETAR_ASSERT(k != nullptr, "type without a row in quant's kernel table");
    return *k;
}

bool has_scalar_kernels(ggml_type t) {
    return find(t) != nullptr;
}

to_float_fn to_float_of(ggml_type t) {
    const scalar_kernels* k = find(t);
    return k ? k->to_float : nullptr;
}

}  // namespace magnetar
