// Plumbing shared by the SIMD translation units: the per-level kernel tables that dispatch.cpp
// chooses from, the row-pointer form of the f32-activation kernels (used by the matmul_fn
// wrappers and the expert-gathered path), the IQ2_XXS lookup tables in float form and the
// MXFP4 block scale.
//
// Each ISA level lives in its own translation unit compiled with that level's flags
// (simd_avx2.cpp, simd_avx512.cpp, simd_avx512bf16.cpp); nothing compiled with ISA flags may
// be reachable before dispatch.cpp has checked CPUID.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/simd/simd.h"

namespace magnetar::cpu::simd::detail {

// Weight types with kernels, in table order: a new type is a slot here and its entry in
// kSlotTypes; the kernel files fill the slot (f32act_kernels.h, q8act_kernels.h) and the
// scalar twin fills every slot from quant's table.
enum type_slot : int {
    slot_f32,
    slot_f16,
    slot_bf16,
    slot_q8_0,
    slot_q4_K,
    slot_q2_K,
    slot_iq2_xxs,
    slot_mxfp4,
    n_slots
};
inline constexpr ggml_type kSlotTypes[n_slots] = {
    ggml_type::F32,  ggml_type::F16,  ggml_type::BF16,    ggml_type::Q8_0,
    ggml_type::Q4_K, ggml_type::Q2_K, ggml_type::IQ2_XXS, ggml_type::MXFP4,
};
// The slot of a type, -1 for types without kernels.
int slot_of(ggml_type t);

// Core of the f32-activation kernels: y_rows[t][o] = dot(w row o, x_rows[t]) for o in
// [r0, r1) and t < n_tok. w is a 2-D view (one matrix); x_rows[t] points at n_in floats;
// y_rows[t] points at column 0 of an output row.
using rows_fn = void (*)(const tensor& w, const float* const* x_rows, float* const* y_rows,
                         int64_t n_tok, int64_t r0, int64_t r1);

struct kernel_table {
    rows_fn rows[n_slots] = {};
    matmul_fn matmul[n_slots] = {};
    vec_dot_fn dot[n_slots] = {};
    q8_matmul_fn q8_matmul[n_slots] = {};
    void (*quantize_q8_0)(const float* x, void* dst, int64_t n) = nullptr;
    void (*quantize_q8_K)(const float* x, void* dst, int64_t n) = nullptr;
    uint64_t (*stream_sum)(const void* data, size_t bytes) = nullptr;
    uint64_t (*peak_int8)(uint64_t rounds, uint64_t* macs) = nullptr;
    uint64_t (*peak_f32)(uint64_t rounds, uint64_t* macs) = nullptr;
    index_scores_fn index_scores = nullptr;
};

// Tables of the compiled levels (call only for levels the CPU supports).
const kernel_table& table_scalar();
const kernel_table& table_avx2();
const kernel_table* table_avx512();
// The BF16 x BF16 dot with AVX512-BF16 instructions and the q8-family product over it (so
// tiles equal vec_dot bit for bit on those CPUs too).
vec_dot_fn bf16_dot_avx512bf16();
q8_matmul_fn bf16_matmul_avx512bf16();

// IQ2_XXS tables of the f32-activation family: grid entries as 8 floats (the magnitudes 8, 25,
// 43) and sign patterns as 8 float sign-bit masks. Built once, before first use. (The
// q8-activation family loads kIq2xxsGrid and kIq2xxsSignBytes of quant/iq2_tables.h.)
struct iq2_tables {
    alignas(64) float grid[256][8];
    alignas(64) uint32_t sign_mask[128][8];
};
const iq2_tables& iq2();

// The scale of an MXFP4 block, 2^(e - 128) (the E8M0 scale halved, since the value table holds
// doubled E2M1 magnitudes), built from its bit pattern as GGML's GGML_E8M0_TO_FP32_HALF: e = 0
// and 1 are the subnormals 2^-128 and 2^-127, e = 255 is 2^127 (not NaN). Bit-identical to
// the scale of dequantize_row_mxfp4.
inline float mxfp4_scale(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

// Wraps a rows_fn as a matmul_fn (builds the row-pointer arrays tile by tile).
void matmul_via_rows(rows_fn fn, const tensor& w, const tensor& x, const tensor& y, int64_t r0,
                     int64_t r1);

// The matmul_fn of a rows_fn (a function pointer known at compile time).
template <rows_fn F>
void matmul_wrap(const tensor& w, const tensor& x, const tensor& y, int64_t r0, int64_t r1,
                 float*) {
    matmul_via_rows(F, w, x, y, r0, r1);
}

// A q8-activation product from a vec_dot, one (row, token) pair at a time: the float weight
// types (the activation is the weight's own float type) and kernels without tiles.
template <vec_dot_fn Dot>
void matmul_rows(const tensor& w, const void* act, size_t stride, const tensor& y, int64_t r0,
                 int64_t r1) {
    const int64_t n = w.ne[0];
    const int64_t n_tok = y.ne[1];
    const auto* base = static_cast<const uint8_t*>(act);
    for (int64_t o = r0; o < r1; ++o) {
        const uint8_t* wr = w.row_ptr(o);
        for (int64_t t = 0; t < n_tok; ++t)
            y.f32_row(t)[o] = Dot(wr, base + static_cast<size_t>(t) * stride, n);
    }
}

// Tokens handled per row-pointer tile by the wrappers.
constexpr int64_t kTokenTile = 64;

}  // namespace magnetar::cpu::simd::detail
