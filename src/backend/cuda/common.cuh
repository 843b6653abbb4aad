// Shared device code of the CUDA backend: the error-check macros, the float matrix view that
// kernels take, the block dequantizers (bit-exact with src/quant/dequant.cpp), the model-defined
// rounding steps (bit-exact with cpu/kernels.cpp) and warp / block reductions.
//
// Every kernel launch is followed by MAGNETAR_CUDA_LAUNCHED("op") and every runtime call goes
// through MAGNETAR_CUDA_CHECK, which throws magnetar::Error naming the call and the CUDA error.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "core/format.h"
#include "core/tensor.h"

namespace magnetar::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line);

#define MAGNETAR_CUDA_CHECK(call)                                                \
    do {                                                                         \
        const cudaError_t err_ = (call);                                         \
        if (err_ != cudaSuccess)                                                 \
            ::magnetar::cuda::throw_cuda_error(err_, #call, __FILE__, __LINE__); \
    } while (0)

// After a kernel launch: configuration errors surface here, faults at the next synchronize.
#define MAGNETAR_CUDA_LAUNCHED(op)                                                         \
    do {                                                                                   \
        const cudaError_t err_ = cudaGetLastError();                                       \
        if (err_ != cudaSuccess)                                                           \
            ::magnetar::cuda::throw_cuda_error(err_, "launch of " op, __FILE__, __LINE__); \
    } while (0)

constexpr int kWarp = 32;

// A float matrix view for kernels: row r at p + r * ld.
struct mat {
    float* p = nullptr;
    int64_t ld = 0;  // row stride in floats
    int64_t rows = 0;
    int64_t cols = 0;
    __host__ __device__ float* row(int64_t r) const { return p + r * ld; }
};

struct imat {
    int32_t* p = nullptr;
    int64_t ld = 0;
    int64_t rows = 0;
    int64_t cols = 0;
    __host__ __device__ int32_t* row(int64_t r) const { return p + r * ld; }
};

// Host: the view of a device tensor (F32 / I32 rows; dims 2 and 3 folded into rows).
inline mat as_mat(const tensor& t) {
    MAGNETAR_ASSERT(t.ne[2] * t.ne[3] == 1 || t.rows_contiguous(), "cuda: rows must fold");
    mat m;
    m.p = static_cast<float*>(t.data);
    m.ld = t.ne[1] * t.ne[2] * t.ne[3] > 1 ? static_cast<int64_t>(t.nb[1] / 4) : t.ne[0];
    m.rows = t.n_rows();
    m.cols = t.ne[0];
    return m;
}
inline imat as_imat(const tensor& t) {
    const mat m = as_mat(t);
    return imat{reinterpret_cast<int32_t*>(m.p), m.ld, m.rows, m.cols};
}

// A kernel's position argument: absolute (off) or relative to the device scalar of a graph step.
struct kpos {
    int64_t off = 0;
    const int64_t* dev = nullptr;
    __device__ __forceinline__ int64_t get() const { return dev ? *dev + off : off; }
};

inline unsigned grid_for(int64_t n, int block) {
    return static_cast<unsigned>((n + block - 1) / block);
}

// ---------------------------------------------------------------------------------------------
// Scalars
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float half_bits_to_f32(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) {
    return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

__device__ __forceinline__ float sigmoid_f(float z) {
    return 1.0f / (1.0f + expf(-z));
}
__device__ __forceinline__ float silu_f(float z) {
    return z / (1.0f + expf(-z));
}
__device__ __forceinline__ float softplus_f(float z) {
    if (z > 20.0f) return z;
    if (z < -20.0f) return expf(z);
    return log1pf(expf(z));
}
__device__ __forceinline__ float swiglu_f(float g, float u, float c) {
    const float gc = g < c ? g : c;
    const float uc = u < -c ? -c : (u > c ? c : u);
    return silu_f(gc) * uc;
}

// Smallest power of two >= v from the bit pattern (cpu::pow2_ceil).
__device__ __forceinline__ float pow2_ceil_f(float v) {
    const uint32_t bits = __float_as_uint(v);
    uint32_t e = (bits >> 23) & 0xffu;
    const uint32_t mant = bits & 0x7fffffu;
    if (e == 0) return __uint_as_float(1u << 23);
    if (mant != 0) ++e;
    return __uint_as_float(e << 23);
}

// Nearest E4M3FN value, ties to even (cpu::e4m3_round).
__device__ __forceinline__ float e4m3_round_f(float v) {
    const float a = fabsf(v);
    float q;
    if (a < 0.015625f) {
        q = rintf(a * 512.0f) * (1.0f / 512.0f);
    } else {
        int e;
        frexpf(a, &e);
        const float step = ldexpf(1.0f, e - 1 - 3);
        q = rintf(a / step) * step;
    }
    return v < 0.0f ? -q : q;
}

// Nearest E2M1 value, ties to the even code (cpu::e2m1_round).
__device__ __forceinline__ float e2m1_round_f(float v) {
    const float a = fabsf(v);
    float q;
    if (a <= 0.25f)
        q = 0.0f;
    else if (a < 0.75f)
        q = 0.5f;
    else if (a <= 1.25f)
        q = 1.0f;
    else if (a < 1.75f)
        q = 1.5f;
    else if (a <= 2.5f)
        q = 2.0f;
    else if (a < 3.5f)
        q = 3.0f;
    else if (a <= 5.0f)
        q = 4.0f;
    else
        q = 6.0f;
    return v < 0.0f ? -q : q;
}

// ---------------------------------------------------------------------------------------------
// Reductions (fixed butterfly order: the result never depends on the launch)
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `sh` holds 32 doubles.
__device__ __forceinline__ double block_sum_d(double v, double* sh) {
    const int lane = threadIdx.x % kWarp;
    const int wid = threadIdx.x / kWarp;
    const int nw = blockDim.x / kWarp;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    double t = lane < nw ? sh[lane] : 0.0;
    t = warp_sum_d(t);
    return t;
}

// ---------------------------------------------------------------------------------------------
// Block dequantizers: 32 consecutive values of a row at a time ("sub-block" s = elements
// [32 s, 32 s + 32)). Arithmetic identical to src/quant/dequant.cpp.
// ---------------------------------------------------------------------------------------------

template <ggml_type T>
__device__ __forceinline__ int dequant_sub(const uint8_t* row, int64_t s, int64_t n, float* v);

template <>
__device__ __forceinline__ int dequant_sub<ggml_type::F32>(const uint8_t* row, int64_t s, int64_t n,
                                                           float* v) {
    const float* r = reinterpret_cast<const float*>(row) + 32 * s;
    const int cnt = static_cast<int>(n - 32 * s < 32 ? n - 32 * s : 32);
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = j < cnt ? __ldg(r + j) : 0.0f;
    return cnt;
}

template <>
__device__ __forceinline__ int dequant_sub<ggml_type::F16>(const uint8_t* row, int64_t s, int64_t n,
                                                           float* v) {
    const uint16_t* r = reinterpret_cast<const uint16_t*>(row) + 32 * s;
    const int cnt = static_cast<int>(n - 32 * s < 32 ? n - 32 * s : 32);
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = j < cnt ? half_bits_to_f32(__ldg(r + j)) : 0.0f;
    return cnt;
}

template <>
__device__ __forceinline__ int dequant_sub<ggml_type::BF16>(const uint8_t* row, int64_t s,
                                                            int64_t n, float* v) {
    const uint16_t* r = reinterpret_cast<const uint16_t*>(row) + 32 * s;
    const int cnt = static_cast<int>(n - 32 * s < 32 ? n - 32 * s : 32);
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = j < cnt ? bf16_bits_to_f32(__ldg(r + j)) : 0.0f;
    return cnt;
}

template <>
__device__ __forceinline__ int dequant_sub<ggml_type::Q8_0>(const uint8_t* row, int64_t s, int64_t,
                                                            float* v) {
    const uint8_t* b = row + 34 * s;  // block_q8_0: fp16 d, 32 int8
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
    const float d = half_bits_to_f32(__ldg(h));
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const uint16_t pair = __ldg(h + 1 + j);
        v[2 * j] = static_cast<float>(static_cast<int8_t>(pair & 0xff)) * d;
        v[2 * j + 1] = static_cast<float>(static_cast<int8_t>(pair >> 8)) * d;
    }
    return 32;
}

template <>
__device__ __forceinline__ int dequant_sub<ggml_type::Q4_K>(const uint8_t* row, int64_t s, int64_t,
                                                            float* v) {
    const uint8_t* b = row + 144 * (s / 8);  // block_q4_K: d, dmin, scales[12], qs[128]
    const int j = static_cast<int>(s % 8);   // 32-value chunk; nibble j & 1 of byte group j / 2
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
    const float d = half_bits_to_f32(__ldg(h));
    const float dmin = half_bits_to_f32(__ldg(h + 1));
    const uint8_t* sc = b + 4;
    uint8_t scv, mv;
    if (j < 4) {
        scv = __ldg(sc + j) & 63;
        mv = __ldg(sc + j + 4) & 63;
    } else {
        scv = static_cast<uint8_t>((__ldg(sc + j + 4) & 0xF) | ((__ldg(sc + j - 4) >> 6) << 4));
        mv = static_cast<uint8_t>((__ldg(sc + j + 4) >> 4) | ((__ldg(sc + j) >> 6) << 4));
    }
    const float d1 = d * scv;
    const float m1 = dmin * mv;
    const uint32_t* q = reinterpret_cast<const uint32_t*>(b + 16 + 32 * (j / 2));
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
        const uint32_t word = __ldg(q + w);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t code = (word >> (8 * k + shift)) & 0xF;
            v[4 * w + k] = d1 * static_cast<float>(code) - m1;
        }
    }
    return 32;
}

template <>
__device__ __forceinline__ int dequant_sub<ggml_type::Q2_K>(const uint8_t* row, int64_t s, int64_t,
                                                            float* v) {
    const uint8_t* b = row + 84 * (s / 8);  // block_q2_K: scales[16], qs[64], d, dmin
    const int j = static_cast<int>(s % 8);
    const int half = j / 4;
    const int g = j % 4;
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b + 80);
    const float d = half_bits_to_f32(__ldg(h));
    const float mn = half_bits_to_f32(__ldg(h + 1));
    const uint32_t* q = reinterpret_cast<const uint32_t*>(b + 16 + 32 * half);
    const int shift = 2 * g;
#pragma unroll
    for (int part = 0; part < 2; ++part) {
        const uint8_t scb = __ldg(b + half * 8 + 2 * g + part);
        const float dl = d * static_cast<float>(scb & 0xF);
        const float ml = mn * static_cast<float>(scb >> 4);
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const uint32_t word = __ldg(q + 4 * part + w);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const uint32_t code = (word >> (8 * k + shift)) & 3;
                v[16 * part + 4 * w + k] = dl * static_cast<float>(code) - ml;
            }
        }
    }
    return 32;
}

__device__ __forceinline__ uint8_t iq2_ksign_d(uint32_t i) {
    uint32_t p = i ^ (i >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return static_cast<uint8_t>(i | ((p & 1u) << 7));
}

// IQ2_XXS (its grid lives in constant memory): matmul.cu.

template <>
__device__ __forceinline__ int dequant_sub<ggml_type::MXFP4>(const uint8_t* row, int64_t s, int64_t,
                                                             float* v) {
    const uint8_t* b = row + 17 * s;  // block_mxfp4: e, qs[16]
    const int e = __ldg(b);
    const float d = e >= 2 ? ldexpf(1.0f, e - 128) : (e == 1 ? 0x1p-127f : 0x1p-128f);
    constexpr int8_t vals[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const uint8_t q = __ldg(b + 1 + j);
        v[j] = static_cast<float>(vals[q & 0x0f]) * d;
        v[j + 16] = static_cast<float>(vals[q >> 4]) * d;
    }
    return 32;
}

// Element i of a small F32 / F16 / BF16 row (biases, positional tables).
__device__ __forceinline__ float load_elem(ggml_type t, const uint8_t* row, int64_t i) {
    // Only float rows reach here (the callers' tensors are F32 / F16 / BF16 by the catalogue).
    if (t == ggml_type::F16) return half_bits_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
    if (t == ggml_type::BF16) return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
    return reinterpret_cast<const float*>(row)[i];
}

// ---------------------------------------------------------------------------------------------
// Launchers implemented across the .cu files (all on `stream`)
// ---------------------------------------------------------------------------------------------

// y[t][o] = dot(row o of w, x row t). When `tiles` is given (grouped expert products), the
// launch covers n_tiles_max tile slots; tile i = (expert, first row, rows) or expert -1, and
// w's expert e starts at w + e * w_nb2.
struct matmul_args {
    const uint8_t* w = nullptr;
    ggml_type type = ggml_type::F32;
    size_t w_nb1 = 0;
    size_t w_nb2 = 0;
    int64_t n_in = 0;
    int64_t n_out = 0;
    mat x;
    mat y;
    const int32_t* tiles = nullptr;  // [n_tiles_max, 3]
    int64_t n_tiles_max = 0;
};
// Rows of one grouped tile: every launcher groups rows in tiles of at most this many tokens.
constexpr int kTileTokens = 8;
void launch_matmul(const matmul_args& a, cudaStream_t stream);
bool matmul_type_supported(ggml_type t);

// out row i (n_rep copies) = dequantized row ids[i] of w.
void launch_get_rows(const uint8_t* w, ggml_type type, size_t w_nb1, int64_t width,
                     const int32_t* ids, int64_t n, float* out, int n_rep, cudaStream_t stream);

}  // namespace magnetar::cuda
