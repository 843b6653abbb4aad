// The DeepSeek V4.1 low-precision formats, bit by bit (spec v41 §4, §5.4): element formats
// (E4M3 satfinite, E2M1, UE8M0), the power-of-two scale rule, the three block QDQs the
// reference graph applies at run time, the canonical packed cache rows, and MXFP4 between
// the checkpoint's nibble order and GGML's block_mxfp4.
//
// Owns: scalar, exact implementations (the correctness reference for any fast variant).
// Does not own: the GGML block dequantizers (quant/dequant.h), weight quantizers of the other
// types (quant/quantize.h), where in the graph each QDQ is applied (the graph).
//
// Array arguments hold bf16 values in float (the reference graph computes in bf16). Every QDQ
// output is exactly representable in bf16, and every packed row decodes to the QDQ output bit
// for bit, because the packers take the quantizer's own codes and scales: never re-quantize a
// dequantized row. Element counts must be multiples of the block size (checked: Error).
// Non-finite inputs give a NaN block (scale byte 255 / NaN) rather than a crash.
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace magnetar::quant {

// ---------------------------------------------------------------------------------------------
// Element formats (§4.1)
// ---------------------------------------------------------------------------------------------

// E4M3 (float8_e4m3fn): clamp to [-448, 448], round to nearest, ties to the even code; the
// sign of zero is kept; NaN -> 0x7f (with its sign). Never produces the NaN code otherwise.
uint8_t e4m3_encode(float v);
// Code -> value (exact); 0x7f / 0xff are NaN.
float e4m3_decode(uint8_t code);

// E2M1 (FP4): clamps to [-6, 6], then round to nearest, ties to the even code (0.25, 1.25, 2.5
// and 5 round down; 0.75, 1.75 and 3.5 round up). Negative inputs set bit 3, so -0 is kept.
// NaN encodes as code 0 (the format has no NaN; callers pass finite values).
uint8_t e2m1_encode(float v);
// Low 4 bits of code -> value in {0, 0.5, 1, 1.5, 2, 3, 4, 6} with bit 3 the sign (exact).
float e2m1_decode(uint8_t code);

// UE8M0 (float8_e8m0fnu): byte b means 2^(b - 127); b = 255 is NaN.
float ue8m0_to_float(uint8_t b);
// Exponent E (2^E) -> byte E + 127; E outside [-127, 127] gives 255 (NaN).
uint8_t ue8m0_from_exponent(int e);

// The reciprocal constants of the scale rule: f32(1/448) and f32(1/6).
inline constexpr uint32_t kR448Bits = 0x3b124925u;
inline constexpr uint32_t kR6Bits = 0x3e2aaaabu;
float r448();
float r6();

// fast_round_scale: y = f32(amax * r); E = expfield(y) - 127 + (mantfield(y) != 0), i.e.
// ceil(log2 y) for normal y. Returns 128 for non-finite y (whose byte, 255, is NaN).
int fast_round_scale(float amax, float r);

// bf16 rounding (RNE, NaN kept quiet) of one value / an array in place.
float round_bf16(float v);
void round_bf16_inplace(float* x, int64_t n);

// ---------------------------------------------------------------------------------------------
// Block QDQs (§4.2 - §4.4). x: n input values; y: n QDQ outputs (may alias x, may be null);
// the code / scale outputs may be null when not wanted.
// ---------------------------------------------------------------------------------------------

inline constexpr int64_t kFp8Block = 32;
inline constexpr int64_t kFp4E4m3Block = 16;
inline constexpr int64_t kMxfp4Block = 32;

// §4.2 FP8 per 32 with a UE8M0 scale: codes[n] E4M3 codes, exps[n/32] UE8M0 bytes.
void qdq_fp8_block32(const float* x, float* y, int64_t n, uint8_t* codes, uint8_t* exps);
// §4.3 FP4 per 16 with an E4M3 scale, true fp32 divisions: codes[n] E2M1 codes (one per
// byte, low nibble), scales[n/16] E4M3 scale codes.
void qdq_fp4_e4m3_block16(const float* x, float* y, int64_t n, uint8_t* codes, uint8_t* scales);
// §4.4 MXFP4 per 32 with a UE8M0 scale: codes[n] E2M1 codes (one per byte), exps[n/32].
void qdq_mxfp4_block32(const float* x, float* y, int64_t n, uint8_t* codes, uint8_t* exps);

// ---------------------------------------------------------------------------------------------
// FP8-linear activations (§4.6)
// ---------------------------------------------------------------------------------------------
//
// fp8_linear_act_row returns the §4.2 QDQ of a row of K activations, x̂_k = e4m3(q_k) * 2^E_b,
// as exact floats. Why a float dot over x̂ reproduces the FP8 GEMM of §4.6 exactly: with a
// lossless weight W̃ = w * 2^S (E4M3 or E2M1 times a power of two, exact in bf16/fp32), each
// product x̂_k * W̃_k = (q_k * w_k) * 2^(E_b + S) is exact (4 x 4 significant bits), and a sum
// of such products rounds at the same places as the sum of q_k * w_k scaled by 2^(E_b + S),
// because multiplying by a power of two commutes with round-to-nearest (barring under- or
// overflow). So part_b(x̂, W̃) == part_b(q, w) * 2^(E_b + S) bit for bit, and adding the
// per-block partials to an fp32 accumulator in block order (fp8_linear_dot_ref) gives acc_n.
// The order of the additions inside a block is unspecified by the spec (~1 bf16 ulp apart).
void fp8_linear_act_row(const float* x, float* xq, int64_t k);
// Reference dot for FP8-/FP4-linear: per block of 32, a sequential fp32 partial sum of
// xq[k] * w[k]; the partials are added to the accumulator in block order. Returns acc (fp32;
// the linear's output is round_bf16 of it). k is a multiple of 32.
float fp8_linear_dot_ref(const float* xq, const float* w, int64_t k);

// ---------------------------------------------------------------------------------------------
// Canonical packed rows (§5.4)
// ---------------------------------------------------------------------------------------------

// Main compressed KV entry: dh/2 bytes of E2M1 codes (byte b = element 2b low nibble | element
// 2b+1 high nibble) then dh/16 E4M3 scales. dh = 512 gives 288 B.
int64_t main_kv_row_bytes(int64_t dh);
// Index key entry: di/2 bytes of E2M1 codes (same nibble order) then di/32 UE8M0 bytes.
// di = 128 gives 68 B.
int64_t index_key_row_bytes(int64_t di);
// Window row: dh E4M3 codes then dh/32 UE8M0 bytes. dh = 512 gives 528 B.
int64_t window_row_bytes(int64_t dh);

// Packs quantizer outputs (codes one per byte, as the qdq_* functions write them).
void pack_main_kv_row(const uint8_t* codes, const uint8_t* scales, int64_t dh, uint8_t* row);
void pack_index_key_row(const uint8_t* codes, const uint8_t* exps, int64_t di, uint8_t* row);
void pack_window_row(const uint8_t* codes, const uint8_t* exps, int64_t dh, uint8_t* row);

// QDQ then pack in one call; qdq (optional, n floats) receives the QDQ form of x.
void quantize_main_kv_row(const float* x, int64_t dh, uint8_t* row, float* qdq);
void quantize_index_key_row(const float* x, int64_t di, uint8_t* row, float* qdq);
void quantize_window_row(const float* x, int64_t dh, uint8_t* row, float* qdq);

// Row -> dequantized floats, equal bit for bit to the QDQ output the row was packed from.
void unpack_main_kv_row(const uint8_t* row, int64_t dh, float* y);
void unpack_index_key_row(const uint8_t* row, int64_t di, float* y);
void unpack_window_row(const uint8_t* row, int64_t dh, float* y);

// ---------------------------------------------------------------------------------------------
// MXFP4: checkpoint order <-> GGML block_mxfp4
// ---------------------------------------------------------------------------------------------
//
// Checkpoint: for a row of n elements, n/2 code bytes with element 2b in the low nibble of
// byte b and 2b+1 in the high nibble, plus n/32 UE8M0 bytes. GGML: one block_mxfp4 per 32,
// element j (< 16) in the low nibble of qs[j], element j + 16 in its high nibble; the block
// byte e is the same UE8M0 byte (GGML's doubled table times 2^(e-128) equals e2m1 * 2^(e-127)).
void mxfp4_checkpoint_to_ggml(const uint8_t* packed, const uint8_t* exps, int64_t n,
                              block_mxfp4* out);
void mxfp4_ggml_to_checkpoint(const block_mxfp4* in, int64_t n, uint8_t* packed, uint8_t* exps);

// float row -> GGML MXFP4 blocks by the §4.4 rule (amax floor 6*2^-126, scale by R6, E2M1 RNE).
// Dequantizing the result with dequantize_row_mxfp4 gives the values of qdq_mxfp4_block32
// (E2M1 * 2^E is exact in bf16), except that GGML's integer table decodes -0 as +0.
void quantize_row_mxfp4(const float* x, block_mxfp4* y, int64_t n);

}  // namespace magnetar::quant
