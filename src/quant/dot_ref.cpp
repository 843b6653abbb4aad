// Scalar reference dot products, modelled on GGML's ggml_vec_dot_*_generic: integer products
// are summed exactly per (super-)block and scaled once, and the plain float types accumulate
// in double as GGML's scalar fallbacks do.
#include "quant/dot_ref.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/iq2_tables.h"
#include "quant/row_kernels.h"

namespace magnetar {

namespace quant {

float dot_ref_f32(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const float*>(w);
    const auto* y = static_cast<const float*>(a);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
    return static_cast<float>(sum);
}

float dot_ref_f16(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const uint16_t*>(w);
    const auto* y = static_cast<const uint16_t*>(a);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i)
        sum += static_cast<double>(fp16_to_f32(x[i]) * fp16_to_f32(y[i]));
    return static_cast<float>(sum);
}

float dot_ref_bf16(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const uint16_t*>(w);
    const auto* y = static_cast<const uint16_t*>(a);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i)
        sum += static_cast<double>(bf16_to_f32(x[i]) * bf16_to_f32(y[i]));
    return static_cast<float>(sum);
}

float dot_ref_q8_0(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const block_q8_0*>(w);
    const auto* y = static_cast<const block_q8_0*>(a);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < QK8_0; ++j) isum += x[b].qs[j] * y[b].qs[j];
        sum += static_cast<float>(isum) * (fp16_to_f32(x[b].d) * fp16_to_f32(y[b].d));
    }
    return sum;
}

// MXFP4 against Q8_0 (GGML's pairing): per block, the doubled E2M1 values times the int8
// codes, scaled by 2^(e - 128) and the activation scale.
float dot_ref_mxfp4(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const block_mxfp4*>(w);
    const auto* y = static_cast<const block_q8_0*>(a);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_MXFP4; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < 16; ++j) {
            isum += kMxfp4Values[x[b].qs[j] & 0x0f] * y[b].qs[j];
            isum += kMxfp4Values[x[b].qs[j] >> 4] * y[b].qs[j + 16];
        }
        const int e = x[b].e;
        const float d = e >= 2 ? std::ldexp(1.0f, e - 128) : (e == 1 ? 0x1p-127f : 0x1p-128f);
        sum += static_cast<float>(isum) * (d * fp16_to_f32(y[b].d));
    }
    return sum;
}

// x = d * sc * code - dmin * m per 16 elements; the min term uses the Q8_K block sums.
float dot_ref_q2_K(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const block_q2_K*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const uint8_t* sc = x[b].scales;
        int32_t summs = 0;
        for (int j = 0; j < QK_K / 16; ++j) summs += y[b].bsums[j] * (sc[j] >> 4);

        const uint8_t* q2 = x[b].qs;
        const int8_t* q8 = y[b].qs;
        int32_t isum = 0;
        int is = 0;
        for (int half = 0; half < QK_K / 128; ++half) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int sub = 0; sub < 2; ++sub) {
                    int32_t s = 0;
                    for (int l = 16 * sub; l < 16 * sub + 16; ++l)
                        s += q8[l] * ((q2[l] >> shift) & 3);
                    isum += (sc[is++] & 0xF) * s;
                }
                q8 += 32;
            }
            q2 += 32;
        }
        const float dall = y[b].d * fp16_to_f32(x[b].d);
        const float dmin = y[b].d * fp16_to_f32(x[b].dmin);
        sum += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
    }
    return sum;
}

// 6-bit scale and min of sub-block j of a Q4_K block (same packing as the dequantizer).
inline void q4_K_scale_min(int j, const uint8_t* q, int32_t* sc, int32_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

float dot_ref_q4_K(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const block_q4_K*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const uint8_t* q4 = x[b].qs;
        const int8_t* q8 = y[b].qs;
        int32_t isum = 0;
        int32_t summs = 0;
        for (int k = 0; k < QK_K / 64; ++k) {
            int32_t sc_lo, m_lo, sc_hi, m_hi;
            q4_K_scale_min(2 * k, x[b].scales, &sc_lo, &m_lo);
            q4_K_scale_min(2 * k + 1, x[b].scales, &sc_hi, &m_hi);
            int32_t s_lo = 0, s_hi = 0;
            for (int l = 0; l < 32; ++l) {
                s_lo += q8[l] * (q4[l] & 0xF);
                s_hi += q8[l + 32] * (q4[l] >> 4);
            }
            isum += sc_lo * s_lo + sc_hi * s_hi;
            // Each sub-block of 32 spans two Q8_K bsums of 16.
            summs += m_lo * (y[b].bsums[4 * k] + y[b].bsums[4 * k + 1]);
            summs += m_hi * (y[b].bsums[4 * k + 2] + y[b].bsums[4 * k + 3]);
            q4 += 32;
            q8 += 64;
        }
        const float d = fp16_to_f32(x[b].d) * y[b].d;
        const float dmin = fp16_to_f32(x[b].dmin) * y[b].d;
        sum += d * static_cast<float>(isum) - dmin * static_cast<float>(summs);
    }
    return sum;
}

// db = d * (0.5 + s) * 0.25 = d * (2s + 1) / 8: the odd integer 2s+1 stays in the integer
// sum and the 1/8 is applied once at the end, as GGML does.
float dot_ref_iq2_xxs(const void* w, const void* a, int64_t n) {
    const auto* x = static_cast<const block_iq2_xxs*>(w);
    const auto* y = static_cast<const block_q8_K*>(a);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const int8_t* q8 = y[b].qs;
        int32_t bsum = 0;
        for (int ib32 = 0; ib32 < QK_K / 32; ++ib32) {
            uint32_t aux32[2];
            std::memcpy(aux32, x[b].qs + 4 * ib32, sizeof(aux32));
            const int32_t ls = static_cast<int32_t>(2 * (aux32[1] >> 28) + 1);
            int32_t sumi = 0;
            for (int l = 0; l < 4; ++l) {
                const uint64_t grid = kIq2xxsGrid[(aux32[0] >> (8 * l)) & 0xFF];
                const uint8_t signs = iq2_ksign((aux32[1] >> (7 * l)) & 127);
                for (int j = 0; j < 8; ++j) {
                    const int32_t p = static_cast<int32_t>((grid >> (8 * j)) & 0xFF) * q8[j];
                    sumi += (signs >> j) & 1 ? -p : p;
                }
                q8 += 8;
            }
            bsum += sumi * ls;
        }
        const float d = fp16_to_f32(x[b].d) * y[b].d;
        sum += d * static_cast<float>(bsum);
    }
    return 0.125f * sum;
}

}  // namespace quant

ggml_type dot_partner_type(ggml_type weight_type) {
    const scalar_kernels& k = scalar_kernels_of(weight_type);
    MAGNETAR_ASSERT(k.dot != nullptr, "type has no dot product partner");
    return k.dot_partner;
}

float dot_row_ref(ggml_type wt, const void* w, const void* act, int64_t n) {
    MAGNETAR_ASSERT(n % type_traits_of(wt).block_elems == 0,
                    "dot length not a multiple of the block");
    const scalar_kernels& k = scalar_kernels_of(wt);
    MAGNETAR_ASSERT(k.dot != nullptr, "type has no dot product");
    return k.dot(w, act, n);
}

}  // namespace magnetar
