// CUDA backend: matrix products and row gathers straight from the stored weight types.
//
// One warp per output row, NT tokens per warp: each lane dequantizes 32-value sub-blocks
// s = lane, lane + 32, ... of the row into registers and accumulates dot(sub-block, x) for each
// token, then the warp reduces with a fixed butterfly. A token's result therefore depends only
// on its own row of x, never on the batch or the tile it was computed in (decode == prefill).
// Grouped expert products reuse the kernel with a tile table (expert, first row, rows).
#include <string>

#include "backend/cuda/common.cuh"
#include "quant/iq2_tables.h"

namespace magnetar::cuda {

__constant__ uint64_t c_iq2xxs_grid[256];

template <>
__device__ __forceinline__ int dequant_sub<ggml_type::IQ2_XXS>(const uint8_t* row, int64_t s,
                                                               int64_t, float* v) {
    const uint8_t* b = row + 66 * (s / 8);  // block_iq2_xxs: d, qs[32] (uint16)
    const int ib32 = static_cast<int>(s % 8);
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
    const float d = half_bits_to_f32(__ldg(h));
    const uint16_t* qs = h + 1 + 4 * ib32;
    const uint32_t a0 =
        static_cast<uint32_t>(__ldg(qs)) | (static_cast<uint32_t>(__ldg(qs + 1)) << 16);
    const uint32_t a1 =
        static_cast<uint32_t>(__ldg(qs + 2)) | (static_cast<uint32_t>(__ldg(qs + 3)) << 16);
    const float db = d * (0.5f + static_cast<float>(a1 >> 28)) * 0.25f;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
        const uint64_t grid = c_iq2xxs_grid[(a0 >> (8 * l)) & 0xff];
        const uint8_t signs = iq2_ksign_d((a1 >> (7 * l)) & 127);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float mag = static_cast<float>((grid >> (8 * j)) & 0xFF);
            v[8 * l + j] = db * mag * ((signs >> j) & 1 ? -1.f : 1.f);
        }
    }
    return 32;
}

namespace {

constexpr int kRowsPerBlock = 4;  // warps per block, one output row each

template <ggml_type T, int NT>
__global__ void matmul_kernel(matmul_args a) {
    const int lane = threadIdx.x % kWarp;
    const int64_t o = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
    if (o >= a.n_out) return;
    int64_t t0, nt;
    const uint8_t* wbase = a.w;
    if (a.tiles) {
        const int32_t* tile = a.tiles + 3 * static_cast<int64_t>(blockIdx.y);
        const int32_t e = tile[0];
        if (e < 0) return;
        wbase += static_cast<size_t>(e) * a.w_nb2;
        t0 = tile[1];
        nt = tile[2];
    } else {
        t0 = static_cast<int64_t>(blockIdx.y) * NT;
        nt = a.x.rows - t0 < NT ? a.x.rows - t0 : NT;
    }
    const uint8_t* row = wbase + static_cast<size_t>(o) * a.w_nb1;
    const int64_t n_sub = (a.n_in + 31) / 32;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    for (int64_t s = lane; s < n_sub; s += kWarp) {
        float v[32];
        const int cnt = dequant_sub<T>(row, s, a.n_in, v);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t < nt) {
                const float* xt = a.x.row(t0 + t) + 32 * s;
                float part = 0.0f;
                if (cnt == 32) {
#pragma unroll
                    for (int j = 0; j < 32; ++j) part = fmaf(v[j], xt[j], part);
                } else {
                    for (int j = 0; j < cnt; ++j) part = fmaf(v[j], xt[j], part);
                }
                acc[t] += part;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float r = warp_sum(acc[t]);
        if (lane == 0 && t < nt) a.y.row(t0 + t)[o] = r;
    }
}

template <ggml_type T>
void launch_typed(const matmul_args& a, cudaStream_t stream) {
    const dim3 block(kRowsPerBlock * kWarp);
    if (a.tiles) {
        const dim3 grid(grid_for(a.n_out, kRowsPerBlock), static_cast<unsigned>(a.n_tiles_max));
        matmul_kernel<T, kTileTokens><<<grid, block, 0, stream>>>(a);
    } else if (a.x.rows == 1) {
        const dim3 grid(grid_for(a.n_out, kRowsPerBlock), 1);
        matmul_kernel<T, 1><<<grid, block, 0, stream>>>(a);
    } else {
        const dim3 grid(grid_for(a.n_out, kRowsPerBlock), grid_for(a.x.rows, kTileTokens));
        matmul_kernel<T, kTileTokens><<<grid, block, 0, stream>>>(a);
    }
    MAGNETAR_CUDA_LAUNCHED("matmul");
}

template <ggml_type T>
__global__ void get_rows_kernel(const uint8_t* w, size_t w_nb1, int64_t width, const int32_t* ids,
                                int64_t n, float* out, int n_rep) {
    const int64_t i = blockIdx.y;
    const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t n_sub = (width + 31) / 32;
    if (i >= n || s >= n_sub) return;
    const uint8_t* row = w + static_cast<size_t>(ids[i]) * w_nb1;
    float v[32];
    const int cnt = dequant_sub<T>(row, s, width, v);
    for (int r = 0; r < n_rep; ++r) {
        float* o = out + (i * n_rep + r) * width + 32 * s;
        for (int j = 0; j < cnt; ++j) o[j] = v[j];
    }
}

template <ggml_type T>
void launch_get_rows_typed(const uint8_t* w, size_t w_nb1, int64_t width, const int32_t* ids,
                           int64_t n, float* out, int n_rep, cudaStream_t stream) {
    const int64_t n_sub = (width + 31) / 32;
    const dim3 grid(grid_for(n_sub, 64), static_cast<unsigned>(n));
    get_rows_kernel<T><<<grid, 64, 0, stream>>>(w, w_nb1, width, ids, n, out, n_rep);
    MAGNETAR_CUDA_LAUNCHED("get_rows");
}

void upload_tables() {
    static bool done = false;  // per process; the backend is created on one thread
    if (done) return;
    MAGNETAR_CUDA_CHECK(cudaMemcpyToSymbol(c_iq2xxs_grid, kIq2xxsGrid, sizeof(kIq2xxsGrid)));
    done = true;
}

// The CUDA type table: one row per weight type with device kernels (its dequant_sub in
// common.cuh, or IQ2_XXS's above). A new type is one row here.
struct type_row {
    ggml_type type;
    void (*matmul)(const matmul_args& a, cudaStream_t stream);
    void (*get_rows)(const uint8_t* w, size_t w_nb1, int64_t width, const int32_t* ids, int64_t n,
                     float* out, int n_rep, cudaStream_t stream);
};

template <ggml_type T>
constexpr type_row row_of() {
    return {T, launch_typed<T>, launch_get_rows_typed<T>};
}

constexpr type_row kTypes[] = {
    row_of<ggml_type::F32>(),     row_of<ggml_type::F16>(),   row_of<ggml_type::BF16>(),
    row_of<ggml_type::Q8_0>(),    row_of<ggml_type::Q4_K>(),  row_of<ggml_type::Q2_K>(),
    row_of<ggml_type::IQ2_XXS>(), row_of<ggml_type::MXFP4>(),
};

const type_row* find_row(ggml_type t) {
    for (const type_row& r : kTypes) {
        if (r.type == t) return &r;
    }
    return nullptr;
}

}  // namespace

bool matmul_type_supported(ggml_type t) {
    return find_row(t) != nullptr;
}

void init_device_tables() {
    upload_tables();
}

void launch_matmul(const matmul_args& a, cudaStream_t stream) {
    if (a.n_out == 0 || a.x.rows == 0) return;
    const type_row* r = find_row(a.type);
    if (r == nullptr) {
        throw Error(
            strfmt("cuda matmul: no kernel for weight type %s", type_traits_of(a.type).name));
    }
    r->matmul(a, stream);
}

void launch_get_rows(const uint8_t* w, ggml_type type, size_t w_nb1, int64_t width,
                     const int32_t* ids, int64_t n, float* out, int n_rep, cudaStream_t stream) {
    if (n == 0) return;
    const type_row* r = find_row(type);
    if (r == nullptr) {
        throw Error(
            strfmt("cuda get_rows: no kernel for weight type %s", type_traits_of(type).name));
    }
    r->get_rows(w, w_nb1, width, ids, n, out, n_rep, stream);
}

}  // namespace magnetar::cuda
