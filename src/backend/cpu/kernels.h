// Scalar building blocks of the CPU backend, shared by its ops and visible to the op tests.
//
// Owns: the model-defined rounding steps (FP8 E4M3 and FP4
// E2M1 round trips with power-of-two block scales, spec model.md §4.3/§4.4/§12.3), the
// Hadamard rotation, RoPE/YaRN frequencies and rotation (§4.2), Sinkhorn (§5.2) and the small
// activation helpers (§4.5). Every function is deterministic: the same inputs give the same
// bits whatever the caller's batch or thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/simd/dot_f32.h"

namespace magnetar::cpu {

// Smallest power of two >= v (v > 0, finite), from the float32 bit pattern of v: its exponent,
// plus one if any mantissa bit is set (§12.3). Not ceil(log2(v)).
float pow2_ceil(float v);

// Nearest E4M3FN value of v, |v| <= 448, ties to the even code.
float e4m3_round(float v);
// Nearest E2M1 value of v, |v| <= 6, ties to the even code.
float e2m1_round(float v);

// In place: FP8 round trip of x[0..n) in blocks of 64 (amax floor 1e-4, max 448).
void fp8_roundtrip(float* x, int64_t n);
// In place: FP4 round trip of x[0..n) in blocks of 32 (amax floor 6 * 2^-126, max 6).
void fp4_roundtrip(float* x, int64_t n);
// In place: normalised Sylvester Walsh-Hadamard transform, n a power of two.
void hadamard(float* x, int64_t n);

// Per-pair frequencies omega_j (j < n_rot / 2) of a RoPE configuration, in double.
void rope_freqs(const backend::rope_params& rope, double* omega);
// In place: rotates the last rope.n_rot dims of x[0..head_dim) by the angles p * omega_j;
// cs holds (cos, sin) pairs of those angles (sin already negated for the inverse).
void rope_apply(float* x, uint32_t head_dim, uint32_t n_rot, const float* cs);
// (cos, sin) of p * omega_j for j < n_rot / 2, sin negated when inverse.
void rope_angles(const double* omega, uint32_t n_rot, int64_t p, bool inverse, float* cs);

// Sinkhorn normalisation of an n x n logit matrix z (row a = source stream) into m (§5.2).
void sinkhorn(const float* z, float* m, int n, float eps, int iters);

inline float sigmoid(float z) {
    return 1.0f / (1.0f + std::exp(-z));
}
inline float silu(float z) {
    return z / (1.0f + std::exp(-z));
}
// Numerically stable softplus (§4.5).
inline float softplus(float z) {
    if (z > 20.0f) return z;
    if (z < -20.0f) return std::exp(z);
    return std::log1p(std::exp(z));
}
inline float swiglu_clamped(float g, float u, float c) {
    const float gc = g < c ? g : c;
    const float uc = u < -c ? -c : (u > c ? c : u);
    return silu(gc) * uc;
}

// Weighted RMS norm of one row segment: out = x / sqrt(mean(x^2) + eps) * w (w may be null).
void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps);

// Expert e's matrix inside a routed-expert tensor [n_in, n_out, E].
tensor expert_view(const tensor& w, int64_t e);

// Counting sort of the n*k (token, slot) pairs of sel [n, k] by expert id, keeping (token, slot)
// order within an expert: order[j] = slot id t*k+i at sorted row j, row_of[t*k+i] = its row,
// start[e] .. start[e+1] the rows of expert e (start has E + 1 entries).
void sort_slots_by_expert(const tensor& sel, int64_t n_expert, int32_t* order, int32_t* row_of,
                          int32_t* start);

// Dequantizes row r of a weight tensor (any stored type) into dst (ne[0] floats).
void dequant_row(const tensor& w, int64_t r, float* dst);

}  // namespace magnetar::cpu
