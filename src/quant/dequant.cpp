// Scalar reference dequantizers. They follow GGML's reference code operation by operation
// (same float expression order), which makes them bit-exact.
#include "quant/dequant.h"

#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/iq2_tables.h"

namespace magnetar {

void dequantize_row_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_row_f16(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(x[i]);
}

void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(x[i]);
}

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const block_q8_0*>(src);
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float d = fp16_to_f32(x[b].d);
        for (int j = 0; j < QK8_0; ++j) dst[b * QK8_0 + j] = static_cast<float>(x[b].qs[j]) * d;
    }
}

void dequantize_row_mxfp4(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const block_mxfp4*>(src);
    for (int64_t b = 0; b < n / QK_MXFP4; ++b) {
        // 2^(e - 128) built from its bit pattern; e = 0 and e = 1 are subnormal halves.
        const int e = x[b].e;
        const float d = e >= 2 ? std::ldexp(1.0f, e - 128) : (e == 1 ? 0x1p-127f : 0x1p-128f);
        for (int j = 0; j < 16; ++j) {
            dst[b * QK_MXFP4 + j] = kMxfp4Values[x[b].qs[j] & 0x0f] * d;
            dst[b * QK_MXFP4 + j + 16] = kMxfp4Values[x[b].qs[j] >> 4] * d;
        }
    }
}

void dequantize_row_q2_K(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const block_q2_K*>(src);
    float* y = dst;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float d = fp16_to_f32(x[b].d);
        const float min = fp16_to_f32(x[b].dmin);
        const uint8_t* q = x[b].qs;
        int is = 0;
        for (int half = 0; half < QK_K / 128; ++half) {
            int shift = 0;
            for (int g = 0; g < 4; ++g) {
                uint8_t sc = x[b].scales[is++];
                float dl = d * static_cast<float>(sc & 0xF);
                float ml = min * static_cast<float>(sc >> 4);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
                sc = x[b].scales[is++];
                dl = d * static_cast<float>(sc & 0xF);
                ml = min * static_cast<float>(sc >> 4);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * static_cast<float>((q[l + 16] >> shift) & 3) - ml;
                shift += 2;
            }
            q += 32;
        }
    }
}

// Unpacks the 6-bit scale and min of sub-block j of a Q4_K block.
static inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

void dequantize_row_q4_K(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const block_q4_K*>(src);
    float* y = dst;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const uint8_t* q = x[b].qs;
        const float d = fp16_to_f32(x[b].d);
        const float min = fp16_to_f32(x[b].dmin);
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, x[b].scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = min * m;
            get_scale_min_k4(is + 1, x[b].scales, &sc, &m);
            const float d2 = d * sc;
            const float m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const block_iq2_xxs*>(src);
    float* y = dst;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float d = fp16_to_f32(x[b].d);
        for (int ib32 = 0; ib32 < QK_K / 32; ++ib32) {
            uint32_t aux32[2];
            std::memcpy(aux32, x[b].qs + 4 * ib32, 2 * sizeof(uint32_t));
            const auto* aux8 = reinterpret_cast<const uint8_t*>(aux32);
            const float db = d * (0.5f + static_cast<float>(aux32[1] >> 28)) * 0.25f;
            for (int l = 0; l < 4; ++l) {
                const uint64_t grid = kIq2xxsGrid[aux8[l]];
                const uint8_t signs = iq2_ksign((aux32[1] >> (7 * l)) & 127);
                for (int j = 0; j < 8; ++j) {
                    const float mag = static_cast<float>((grid >> (8 * j)) & 0xFF);
                    y[j] = db * mag * ((signs >> j) & 1 ? -1.f : 1.f);
                }
                y += 8;
            }
        }
    }
}

void dequantize_row_q8_K(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const block_q8_K*>(src);
    for (int64_t b = 0; b < n / QK_K; ++b) {
        for (int j = 0; j < QK_K; ++j) dst[b * QK_K + j] = x[b].d * static_cast<float>(x[b].qs[j]);
    }
}

}  // namespace magnetar
