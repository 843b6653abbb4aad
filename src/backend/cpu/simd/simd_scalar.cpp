// The scalar twins: plain C++ computing exactly what the SIMD kernels compute.
//
// f32-activation twin: dequantize the weight row with the reference dequantizer (bit-exact
// with GGML), then the canonical dot of simd.h: element i fused-multiply-added (std::fma, one
// rounding) into lane i % 16 in increasing i, zero-padded to a multiple of 16, lanes reduced
// pairwise. The SIMD variants must equal it bit for bit.
// q8-activation twin: the reference quantizers and dot products of src/quant.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/simd/dot_f32.h"
#include "backend/cpu/simd/simd_internal.h"
#include "quant/dot_ref.h"
#include "quant/quantize_act.h"
#include "quant/types.h"

namespace magnetar::cpu::simd::detail {

namespace {

float canonical_dot(const float* w, const float* x, int64_t n) {
    float acc[16] = {};
    for (int64_t i0 = 0; i0 < n; i0 += 16) {
        for (int l = 0; l < 16; ++l) {
            const int64_t i = i0 + l;
            const float wi = i < n ? w[i] : 0.0f;
            const float xi = i < n ? x[i] : 0.0f;
            acc[l] = std::fma(wi, xi, acc[l]);
        }
    }
    for (int half = 8; half >= 1; half /= 2) {
        for (int l = 0; l < half; ++l) acc[l] = acc[l] + acc[l + half];
    }
    return acc[0];
}

void rows_twin(const tensor& w, const float* const* x, float* const* y, int64_t n_tok, int64_t r0,
               int64_t r1) {
    const int64_t n_in = w.ne[0];
    const to_float_fn to_float = to_float_of(w.type);
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(n_in));
    for (int64_t o = r0; o < r1; ++o) {
        to_float(w.row_ptr(o), row.data(), n_in);
        for (int64_t t = 0; t < n_tok; ++t) y[t][o] = canonical_dot(row.data(), x[t], n_in);
    }
}

template <ggml_type T>
float dot_ref(const void* w, const void* a, int64_t n) {
    return dot_row_ref(T, w, a, n);
}

template <ggml_type T>
void q8_rows(const tensor& w, const void* act, size_t stride, const tensor& y, int64_t r0,
             int64_t r1) {
    const int64_t n_tok = y.ne[1];
    const auto* base = static_cast<const uint8_t*>(act);
    for (int64_t o = r0; o < r1; ++o) {
        for (int64_t t = 0; t < n_tok; ++t) {
            y.f32_row(t)[o] =
                dot_row_ref(T, w.row_ptr(o), base + static_cast<size_t>(t) * stride, w.ne[0]);
        }
    }
}

template <int Slot, ggml_type T>
void fill_slot(kernel_table& k) {
    k.rows[Slot] = rows_twin;
    k.matmul[Slot] = matmul_wrap<rows_twin>;
    k.dot[Slot] = dot_ref<T>;
    k.q8_matmul[Slot] = q8_rows<T>;
}

template <size_t... Slot>
void fill_slots(kernel_table& k, std::index_sequence<Slot...>) {
    (fill_slot<static_cast<int>(Slot), kSlotTypes[Slot]>(k), ...);
}

uint64_t stream_sum(const void* data, size_t bytes) {
    const auto* w = static_cast<const uint64_t*>(data);
    uint64_t a[8] = {};
    for (size_t i = 0; i < bytes / 8; i += 8) {
        for (int k = 0; k < 8; ++k) a[k] += w[i + k];
    }
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

// Eight independent int32 chains of u8 x s8 products, and eight float chains of
// multiply-adds (what the compiler makes of plain loops at the base ISA).
uint64_t peak_int8(uint64_t rounds, uint64_t* macs) {
    int32_t acc[8] = {};
    const int8_t s[8] = {-3, 5, -7, 9, -11, 13, -15, 17};
    uint64_t u = 0x0807060504030201u;  // eight u8 operands
    for (uint64_t r = 0; r < rounds; ++r) {
        asm volatile("" : "+r"(u));  // opaque: no hoisting or folding
        for (int k = 0; k < 8; ++k) {
            acc[k] += static_cast<int32_t>((u >> (8 * k)) & 0xFF) * s[k];
        }
    }
    *macs = 8 * rounds;
    uint64_t h = 0;
    for (int32_t a : acc) h = h * 31 + static_cast<uint32_t>(a);
    return h;
}

// The indexer's scores as the definition in simd.h: two heads per pass over each key
// (dot_f32_x2, the same bits as two dot_f32 calls).
void index_scores(const float* q, const float* w, float scale, int64_t n_head, int64_t hd,
                  const float* keys, int64_t key_stride, int64_t n_keys, float* score) {
    for (int64_t s = 0; s < n_keys; ++s) {
        const float* k = keys + s * key_stride;
        float acc = 0.0f;
        int64_t h = 0;
        for (; h + 2 <= n_head; h += 2) {
            float dp[2];
            dot_f32_x2(q + h * hd, q + (h + 1) * hd, k, hd, dp);
            acc += (w[h] * scale) * std::max(dp[0], 0.0f);
            acc += (w[h + 1] * scale) * std::max(dp[1], 0.0f);
        }
        for (; h < n_head; ++h) acc += (w[h] * scale) * std::max(dot_f32(q + h * hd, k, hd), 0.0f);
        score[s] = acc;
    }
}

uint64_t peak_f32(uint64_t rounds, uint64_t* macs) {
    float acc[8] = {};
    float x = 1.0f;
    for (uint64_t r = 0; r < rounds; ++r) {
        asm volatile("" : "+x"(x));
        for (int k = 0; k < 8; ++k) acc[k] = acc[k] * 0.999f + x;
    }
    *macs = 8 * rounds;
    float sum = 0;
    for (float a : acc) sum += a;
    uint32_t bits;
    std::memcpy(&bits, &sum, sizeof(bits));
    return bits;
}

}  // namespace

const kernel_table& table_scalar() {
    static const kernel_table table = [] {
        kernel_table k;
        fill_slots(k, std::make_index_sequence<n_slots>{});
        k.quantize_q8_0 = quantize_row_q8_0;
        k.quantize_q8_K = quantize_row_q8_K;
        k.stream_sum = stream_sum;
        k.peak_int8 = peak_int8;
        k.peak_f32 = peak_f32;
        k.index_scores = index_scores;
        return k;
    }();
    return table;
}

}  // namespace magnetar::cpu::simd::detail
