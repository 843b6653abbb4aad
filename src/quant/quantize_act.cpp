// Scalar activation quantizers. They follow the code GGML's CPU backend runs on x86-64, which
// is what produced the golden activation files:
// - Q8_0: the AVX path of quantize_row_q8_0, which differs from quantize_row_q8_0_ref in two
//   details: the inverse scale is 127/amax (not 1/(amax/127)) and codes are rounded half to
//   even (_mm256_round_ps), not half away from zero (roundf). The golden activation has no
//   exact ties, so a unit test (not the golden file) pins the rounding.
// - Q8_K: quantize_row_q8_K_ref (GGML's x86 build uses the reference), scale -127/max with max the
//   element of largest magnitude keeping its sign, so that the extreme element maps to -127
//   and no code needs clamping below -127.
#include "quant/quantize_act.h"

#include <cstring>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

namespace magnetar {

namespace {

// Round to nearest, ties to even, for |v| <= 2^22 (GGML's nearest_int): adding 1.5 * 2^23
// pushes the fraction out of the float mantissa, and the default rounding mode rounds the
// sum half to even. No libm call, so the result is the same on every machine.
inline int nearest_int(float v) {
    const float shifted = v + 12582912.0f;
    int32_t i;
    std::memcpy(&i, &shifted, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

inline float abs_f32(float v) {
    return bits_to_f32(f32_to_bits(v) & 0x7fffffffu);
}

}  // namespace

void quantize_row_q8_0(const float* x, void* dst, int64_t n) {
    MAGNETAR_ASSERT(n % QK8_0 == 0, "Q8_0 row length must be a multiple of 32");
    auto* y = static_cast<block_q8_0*>(dst);
    for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; ++j) {
            const float a = abs_f32(x[j]);
            if (a > amax) amax = a;
        }
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; ++j) {
            const float v = x[j] * id;
            y[b].qs[j] = static_cast<int8_t>(nearest_int(v));
        }
    }
}

void quantize_row_q8_K(const float* x, void* dst, int64_t n) {
    MAGNETAR_ASSERT(n % QK_K == 0, "Q8_K row length must be a multiple of 256");
    auto* y = static_cast<block_q8_K*>(dst);
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        float max = 0.0f;
        float amax = 0.0f;
        for (int j = 0; j < QK_K; ++j) {
            const float a = abs_f32(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        // GGML leaves bsums unwritten for an all-zero block; zero is the only consistent value.
        if (amax == 0.0f) {
            y[b].d = 0.0f;
            std::memset(y[b].qs, 0, sizeof(y[b].qs));
            std::memset(y[b].bsums, 0, sizeof(y[b].bsums));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; ++j) {
            const float v = iscale * x[j];
            const int q = nearest_int(v);
            y[b].qs[j] = static_cast<int8_t>(q < 127 ? q : 127);
        }
        for (int g = 0; g < QK_K / 16; ++g) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) sum += y[b].qs[16 * g + l];
            y[b].bsums[g] = static_cast<int16_t>(sum);
        }
        y[b].d = 1.0f / iscale;
    }
}

}  // namespace magnetar
