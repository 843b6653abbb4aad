// Block-cooperative row operations shared by the element-wise kernels and the compressor:
// RMS norm, RoPE of a head's tail, the FP8 / FP4 block round trips and the Hadamard rotation.
// Each computes exactly what its cpu/kernels.cpp twin computes (the RMS sum is in double, so
// only its summation order differs).
#pragma once

#include "backend/backend.h"
#include "backend/cuda/common.cuh"

namespace magnetar::cuda {

constexpr int kMaxRot = 256;

// RoPE frequencies of one configuration (cpu::rope_freqs, computed on the host).
struct rope_table {
    double omega[kMaxRot / 2];
    uint32_t n_rot = 0;
};
rope_table make_rope_table(const backend::rope_params& rope);

// out[0..n) = x / rms(x) (* w). x may equal out. All threads of the block must call it.
__device__ __forceinline__ void block_rms_norm(const float* x, const float* w, float* out,
                                               int64_t n, float eps, double* sh) {
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += static_cast<double>(x[i]) * x[i];
    ss = block_sum_d(ss, sh);
    const float r = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(n) + eps));
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        out[i] = w ? x[i] * r * w[i] : x[i] * r;
    }
    __syncthreads();
}

// Rotation of pair j of a head's tail t (= head + head_dim - n_rot) at position p.
__device__ __forceinline__ void rope_pair(float* t, int j, const rope_table& tab, int64_t p,
                                          bool inverse) {
    const double phi = static_cast<double>(p) * tab.omega[j];
    const float c = static_cast<float>(cos(phi));
    float s = static_cast<float>(sin(phi));
    if (inverse) s = -s;
    const float a = t[2 * j];
    const float b = t[2 * j + 1];
    t[2 * j] = a * c - b * s;
    t[2 * j + 1] = a * s + b * c;
}

// FP8 round trip of x[0..n) in blocks of 64; one warp per block (call from all warps).
__device__ __forceinline__ void block_fp8_roundtrip(float* x, int64_t n) {
    const int lane = threadIdx.x % kWarp;
    const int nw = blockDim.x / kWarp;
    for (int64_t b = static_cast<int64_t>(threadIdx.x / kWarp) * 64; b < n; b += 64 * nw) {
        const int64_t cnt = n - b < 64 ? n - b : 64;
        const bool v0 = lane < cnt, v1 = lane + 32 < cnt;
        const float x0 = v0 ? x[b + lane] : 0.0f;
        const float x1 = v1 ? x[b + lane + 32] : 0.0f;
        float amax = warp_max(fmaxf(fabsf(x0), fabsf(x1)));
        amax = fmaxf(amax, 1e-4f);
        const float scale = pow2_ceil_f(amax * (1.0f / 448.0f));
        if (v0) x[b + lane] = e4m3_round_f(fminf(fmaxf(x0 / scale, -448.0f), 448.0f)) * scale;
        if (v1) x[b + lane + 32] = e4m3_round_f(fminf(fmaxf(x1 / scale, -448.0f), 448.0f)) * scale;
    }
    __syncthreads();
}

// FP4 round trip of x[0..n) in blocks of 32; one warp per block.
__device__ __forceinline__ void block_fp4_roundtrip(float* x, int64_t n) {
    const int lane = threadIdx.x % kWarp;
    const int nw = blockDim.x / kWarp;
    const float floor_v = 6.0f * 0x1p-126f;
    for (int64_t b = static_cast<int64_t>(threadIdx.x / kWarp) * 32; b < n; b += 32 * nw) {
        const int64_t cnt = n - b < 32 ? n - b : 32;
        const bool valid = lane < cnt;
        const float v = valid ? x[b + lane] : 0.0f;
        float amax = warp_max(fabsf(v));
        amax = fmaxf(amax, floor_v);
        const float scale = pow2_ceil_f(amax * (1.0f / 6.0f));
        if (valid) x[b + lane] = e2m1_round_f(fminf(fmaxf(v / scale, -6.0f), 6.0f)) * scale;
    }
    __syncthreads();
}

// Normalised Walsh-Hadamard transform of x[0..n), n a power of two (each butterfly stage is
// element-wise, so the parallel order gives the CPU's bits). `s` = 1 / sqrt(n) as float.
__device__ __forceinline__ void block_hadamard(float* x, int64_t n, float s) {
    __syncthreads();
    for (int64_t h = 1; h < n; h *= 2) {
        for (int64_t q = threadIdx.x; q < n / 2; q += blockDim.x) {
            const int64_t i = (q / h) * 2 * h + (q % h);
            const float a = x[i];
            const float b = x[i + h];
            x[i] = a + b;
            x[i + h] = a - b;
        }
        __syncthreads();
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] *= s;
    __syncthreads();
}

inline float hadamard_scale(int64_t n) {
    return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
}

}  // namespace magnetar::cuda
