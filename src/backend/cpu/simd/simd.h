// SIMD matrix products over quantized weights: the kernels decode streams through.
//
// Owns: two kernel families for every stored weight type (F32, F16, BF16, Q8_0, Q4_K, Q2_K,
// IQ2_XXS, MXFP4), each with an always-compiled scalar twin, AVX2 and AVX-512 variants chosen
// once at start-up by CPUID (override: MAGNETAR_SIMD=off|avx2|avx512|auto), and thread-pool
// drivers for whole products, batched prefill and expert-gathered (MoE) products.
//
//  (a) f32-activation kernels, the engine's correctness path. y[t][o] = dot(dequant(w row o),
//      x row t) where dequant is bit-identical to GGML's dequantize_row_* and the dot is a fixed
//      order of fused multiply-adds: element i goes to lane i % 16 of 16 float accumulators
//      (in increasing i), the lanes are reduced pairwise (l + l^8, then ^4, ^2, ^1). Rows whose
//      length is not a multiple of 16 are zero-padded. Every variant (scalar, AVX2, AVX-512)
//      computes exactly this, so results are bit-identical whatever the ISA, batch size, row
//      range or thread count.
//  (b) q8-activation kernels, GGML-compatible and faster: the activation is converted once to
//      the weight type's partner (Q8_0 for Q8_0 and MXFP4, Q8_K for the K / IQ types, F16 /
//      BF16 / F32 for the float types, GGML's bytes) and dot products sum integer products
//      exactly per block, as GGML does. They equal the scalar references of quant/dot_ref.h up
//      to float summation order (not bit for bit).
//
// Does not own: the scalar backend table (backend/cpu/matmul.h; it takes simd_matmul_for's
// entries when they are not null), activation quantizer references (quant/quantize_act.h) or
// weight quantizers (quant/quantize.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace magnetar::cpu::simd {

enum class isa_level { scalar, avx2, avx512 };

// The level in use: the best this CPU supports, capped by MAGNETAR_SIMD (read once).
isa_level active_level();
// Whether this CPU can run a level (scalar always can).
bool cpu_supports(isa_level level);
const char* level_name(isa_level level);

// ---------------------------------------------------------------------------------------------
// (a) f32-activation family
// ---------------------------------------------------------------------------------------------

// Same signature as cpu::matmul_fn. w: [n_in, n_out] weights (rows may be strided); x: F32
// [n_in, n_tokens] with row stride x.nb[1]; y: F32 [n_out, n_tokens]. Computes y[t][o] for
// o in [r0, r1) and every token, reading each weight row once per call. scratch is unused
// (may be null).
using matmul_fn = void (*)(const tensor& w, const tensor& x, const tensor& y, int64_t r0,
                           int64_t r1, float* scratch);

// The best f32-activation kernel for a weight type at the active level; nullptr when the
// level is scalar (MAGNETAR_SIMD=off or no AVX2) or the type has no kernel (I32, Q8_K).
matmul_fn simd_matmul_for(ggml_type t);
// The kernel of one level (nullptr if that level is not compiled for the type). The scalar
// level returns the twin: dequantize the row, then the canonical fixed-order dot.
matmul_fn matmul_at(isa_level level, ggml_type t);

// Every row of w on the pool (static partition, so results do not depend on the thread
// count). fn null means simd_matmul_for(w.type), falling back to the scalar twin.
void matmul(thread_pool& pool, const tensor& w, const tensor& x, const tensor& y,
            matmul_fn fn = nullptr);

// Expert-gathered product for MoE. w: [n_in, n_out, n_expert]; for each route i < n_routes,
// y row y_rows[i] = W[expert[i]] * x row x_rows[i]. Routes of one expert share each weight row
// read; the work is split over (expert, row range) pairs. Results equal matmul() of the
// gathered rows bit for bit.
struct expert_routes {
    const int32_t* expert;  // [n_routes]
    const int32_t* x_rows;  // [n_routes]
    const int32_t* y_rows;  // [n_routes]
    int64_t n_routes;
};
void matmul_experts(thread_pool& pool, const tensor& w, const tensor& x, const tensor& y,
                    const expert_routes& routes, isa_level level);

// ---------------------------------------------------------------------------------------------
// (b) q8-activation family (GGML-compatible)
// ---------------------------------------------------------------------------------------------

// Bytes of one activation row of n elements converted for weights of type wt.
size_t act_row_bytes(ggml_type wt, int64_t n);
// Converts a float row to wt's partner type with GGML's exact bytes (SIMD where available).
void quantize_act(ggml_type wt, const float* x, void* dst, int64_t n, isa_level level);

// One weight row against one converted activation row; n a multiple of the weight block.
using vec_dot_fn = float (*)(const void* w, const void* act, int64_t n);
vec_dot_fn vec_dot_at(isa_level level, ggml_type wt);

// act: n_tokens converted rows (y.ne[1] of them), row stride act_stride bytes. Computes y[t][o]
// for o in [r0, r1), each weight row read once.
using q8_matmul_fn = void (*)(const tensor& w, const void* act, size_t act_stride, const tensor& y,
                              int64_t r0, int64_t r1);
q8_matmul_fn q8_matmul_at(isa_level level, ggml_type wt);

// Whole product: converts x (F32 [n_in, n_tokens]) into act (caller memory, at least
// n_tokens * act_row_bytes(w.type, n_in) bytes) on the pool, then every row of w.
void q8_matmul(thread_pool& pool, const tensor& w, const tensor& x, const tensor& y, void* act,
               isa_level level);

// ---------------------------------------------------------------------------------------------
// The lightning indexer's scores (spec model.md §5.3e)
// ---------------------------------------------------------------------------------------------

// score[s] for s < n_keys: the sum over heads h = 0, 1, ... (in that order) of
// (w[h] * scale) * max(dot_f32(q + h * hd, keys + s * key_stride, hd), 0), with dot_f32 of
// backend/cpu/kernels.h (products then sums into 16 lanes, fixed reduction). Every level gives
// the scalar twin's bits; the SIMD levels score two keys against two heads per pass.
using index_scores_fn = void (*)(const float* q, const float* w, float scale, int64_t n_head,
                                 int64_t hd, const float* keys, int64_t key_stride, int64_t n_keys,
                                 float* score);
// The kernel of one level (the scalar twin at the scalar level; null if the CPU lacks the level)
// and of the active level (never null).
index_scores_fn index_scores_at(isa_level level);
index_scores_fn index_scores();

// ---------------------------------------------------------------------------------------------
// Benchmark support
// ---------------------------------------------------------------------------------------------

// Sum of a buffer's 64-bit words read with the active level's widest loads, each 64 KiB block
// as four interleaved streams (the pattern of a tile of four rows; decode tiles read one row,
// a single stream): the plain streaming read that kernel bandwidth is compared with. bytes is a
// multiple of 256.
uint64_t stream_sum(const void* data, size_t bytes);

// Register-resident multiply-add loops at the active level: the arithmetic ceiling of one core
// that prefill throughput is compared with. peak_int8 runs the u8 x s8 -> s32 dot of the
// q8-activation kernels (AVX2: maddubs + madd pairs; AVX-512: VNNI dpbusd on 512-bit
// registers; scalar: integer loops), peak_f32 fused multiply-adds on float vectors. Each runs
// `rounds` rounds of independent accumulator chains, sets *macs to the multiply-adds done and
// returns a value that depends on every accumulator.
uint64_t peak_int8(uint64_t rounds, uint64_t* macs);
uint64_t peak_f32(uint64_t rounds, uint64_t* macs);

}  // namespace magnetar::cpu::simd
