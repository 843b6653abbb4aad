#include "quant/types.h"

#include "quant/dequant.h"

namespace magnetar {

namespace {

struct scalar_kernels {
    ggml_type type;
    to_float_fn to_float;
};

// One row per type of core/types.cpp's table (tests/quant/types_test.cpp checks both agree).
const scalar_kernels kKernels[] = {
    {ggml_type::F32, dequantize_row_f32},
    {ggml_type::F16, dequantize_row_f16},
    {ggml_type::BF16, dequantize_row_bf16},
    {ggml_type::Q8_0, dequantize_row_q8_0},
    {ggml_type::Q2_K, dequantize_row_q2_K},
    {ggml_type::Q4_K, dequantize_row_q4_K},
    {ggml_type::Q8_K, dequantize_row_q8_K},
    {ggml_type::IQ2_XXS, dequantize_row_iq2_xxs},
    {ggml_type::MXFP4, dequantize_row_mxfp4},
    {ggml_type::I8, nullptr},
    {ggml_type::I32, nullptr},
};

}  // namespace

bool has_scalar_kernels(ggml_type t) {
    for (const scalar_kernels& k : kKernels) {
        if (k.type == t) return true;
    }
    return false;
}

to_float_fn to_float_of(ggml_type t) {
    for (const scalar_kernels& k : kKernels) {
        if (k.type == t) return k.to_float;
    }
    return nullptr;
}

}  // namespace magnetar
