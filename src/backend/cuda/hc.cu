// CUDA backend: hyper-connection ops (spec model.md §5.2 pre-mix with Sinkhorn, §5.4 post-mix,
// §5.6 output-head collapse). The mixing matmul runs on the matmul kernel; one block per token
// then computes the flattened RMS (double), the gates, Sinkhorn (one thread per matrix entry,
// in cpu::sinkhorn's order) and the weighted stream sum.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"

namespace magnetar::cuda {

namespace {

constexpr int kMaxHc = 8;
constexpr int kHcThreads = 256;

// Sinkhorn of an n x n logit matrix z (shared) into out, cpu::sinkhorn's arithmetic: thread
// (a, b) owns one entry and recomputes each row / column sum itself in the CPU's order, so the
// bits are the serial loop's. `m` is shared scratch of n * n floats. All threads call it.
__device__ void sinkhorn_block(const float* z, float* out, int n, float eps, int iters, float* m) {
    const int tid = threadIdx.x;
    const bool act = tid < n * n;
    const int a = act ? tid / n : 0;
    const int b = act ? tid % n : 0;
    if (act) {
        float mx = z[a * n];
        for (int j = 1; j < n; ++j) mx = fmaxf(mx, z[a * n + j]);
        float s = 0.0f;
        for (int j = 0; j < n; ++j) s += expf(z[a * n + j] - mx);
        m[tid] = expf(z[tid] - mx) / s + eps;
    }
    __syncthreads();
    for (int it = 0; it < iters; ++it) {
        if (it > 0) {
            float s = 0.0f;
            if (act) {
                for (int j = 0; j < n; ++j) s += m[a * n + j];
            }
            __syncthreads();
            if (act) m[tid] = m[tid] / (s + eps);
            __syncthreads();
        }
        float s = 0.0f;
        if (act) {
            for (int i = 0; i < n; ++i) s += m[i * n + b];
        }
        __syncthreads();
        if (act) m[tid] = m[tid] / (s + eps);
        __syncthreads();
    }
    if (act) out[tid] = m[tid];
}

// 1 / sqrt(mean(f^2) + eps) of the flattened state of one token.
__device__ float flat_rms_inv(const float* f, int64_t n, float eps, double* sh) {
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += static_cast<double>(f[i]) * f[i];
    ss = block_sum_d(ss, sh);
    return static_cast<float>(1.0 / sqrt(ss / static_cast<double>(n) + eps));
}

__device__ void collapse(const float* x, const float* pre, int nh, int64_t d, float* y) {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float acc = pre[0] * x[i];
        for (int j = 1; j < nh; ++j) acc += pre[j] * x[j * d + i];
        y[i] = acc;
    }
}

struct hc_args {
    int nh;
    int64_t d;
    float norm_eps, hc_eps;
    int iters;
    mat x, mix, y, post, comb;
    const float* scale;
    const float* base;
};

__global__ void hc_pre_kernel(hc_args a) {
    __shared__ double sh[32];
    __shared__ float pre[kMaxHc];
    __shared__ float z[kMaxHc * kMaxHc];
    __shared__ float m_sh[kMaxHc * kMaxHc];
    const int64_t t = blockIdx.x;
    const int nh = a.nh;
    const float* f = a.x.row(t);
    const float r = flat_rms_inv(f, nh * a.d, a.norm_eps, sh);
    const float* m = a.mix.row(t);
    const int tid = threadIdx.x;
    if (tid < nh) {
        pre[tid] = sigmoid_f(m[tid] * r * a.scale[0] + a.base[tid]) + a.hc_eps;
        a.post.row(t)[tid] = 2.0f * sigmoid_f(m[nh + tid] * r * a.scale[1] + a.base[nh + tid]);
    }
    if (tid < nh * nh) z[tid] = m[2 * nh + tid] * r * a.scale[2] + a.base[2 * nh + tid];
    __syncthreads();
    sinkhorn_block(z, a.comb.row(t), nh, a.hc_eps, a.iters, m_sh);
    collapse(f, pre, nh, a.d, a.y.row(t));
}

__global__ void hc_collapse_kernel(hc_args a) {
    __shared__ double sh[32];
    __shared__ float pre[kMaxHc];
    const int64_t t = blockIdx.x;
    const int nh = a.nh;
    const float* f = a.x.row(t);
    const float r = flat_rms_inv(f, nh * a.d, a.norm_eps, sh);
    if (threadIdx.x == 0) {
        const float* m = a.mix.row(t);
        for (int j = 0; j < nh; ++j)
            pre[j] = sigmoid_f(m[j] * r * a.scale[0] + a.base[j]) + a.hc_eps;
    }
    __syncthreads();
    collapse(f, pre, nh, a.d, a.y.row(t));
}

__global__ void hc_post_kernel(int nh, int64_t d, mat x, mat f, mat post, mat comb, mat out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t w = nh * d;
    if (i >= x.rows * w) return;
    const int64_t t = i / w;
    const int b = static_cast<int>((i % w) / d);
    const int64_t c = i % d;
    const float* xs = x.row(t);
    const float* m = comb.row(t);
    float acc = post.row(t)[b] * f.row(t)[c];
    for (int a = 0; a < nh; ++a) acc += m[a * nh + b] * xs[a * d + c];
    out.row(t)[b * d + c] = acc;
}

}  // namespace
}  // namespace magnetar::cuda

namespace magnetar::backend {

using cuda::as_mat;

void cuda_backend::hc_pre(const hc_params& p, const tensor& x, const tensor& fn,
                          const tensor& scale, const tensor& base, const tensor& y,
                          const tensor& post, const tensor& comb, const tensor& mix) {
    const uint32_t nh = p.n_hc;
    MAGNETAR_ASSERT(nh <= cuda::kMaxHc && x.ne[0] == nh * p.n_embd && mix.ne[0] == (2 + nh) * nh &&
                        scale.type == ggml_type::F32 && base.type == ggml_type::F32,
                    "hc_pre: shapes");
    matmul(fn, x, mix);
    if (x.n_rows() == 0) return;
    if (probe(op_kind::hc_pre, p.n_hc, p.n_embd, p.norm_eps, p.hc_eps, p.sinkhorn_iters, x, scale,
              base, y, post, comb, mix)) {
        return;
    }
    cuda::hc_args a{};
    a.nh = static_cast<int>(nh);
    a.d = p.n_embd;
    a.norm_eps = p.norm_eps;
    a.hc_eps = p.hc_eps;
    a.iters = static_cast<int>(p.sinkhorn_iters);
    a.x = as_mat(dev(x, "hc_pre"));
    a.mix = as_mat(dev(mix, "hc_pre"));
    a.y = as_mat(dev(y, "hc_pre"));
    a.post = as_mat(dev(post, "hc_pre"));
    a.comb = as_mat(dev(comb, "hc_pre"));
    a.scale = static_cast<const float*>(dev(scale, "hc_pre").data);
    a.base = static_cast<const float*>(dev(base, "hc_pre").data);
    cuda::hc_pre_kernel<<<static_cast<unsigned>(x.n_rows()), cuda::kHcThreads, 0,
                          static_cast<cudaStream_t>(stream_)>>>(a);
    MAGNETAR_CUDA_LAUNCHED("hc_pre");
}

void cuda_backend::hc_post(const hc_params& p, const tensor& x, const tensor& f, const tensor& post,
                           const tensor& comb, const tensor& out) {
    const int64_t n = x.n_rows() * p.n_hc * p.n_embd;
    if (n == 0) return;
    if (probe(op_kind::hc_post, p.n_hc, p.n_embd, x, f, post, comb, out)) return;
    cuda::hc_post_kernel<<<cuda::grid_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream_)>>>(
        static_cast<int>(p.n_hc), p.n_embd, as_mat(dev(x, "hc_post")), as_mat(dev(f, "hc_post")),
        as_mat(dev(post, "hc_post")), as_mat(dev(comb, "hc_post")), as_mat(dev(out, "hc_post")));
    MAGNETAR_CUDA_LAUNCHED("hc_post");
}

void cuda_backend::hc_collapse(const hc_params& p, const tensor& x, const tensor& fn,
                               const tensor& scale, const tensor& base, const tensor& out,
                               const tensor& mix) {
    const uint32_t nh = p.n_hc;
    MAGNETAR_ASSERT(nh <= cuda::kMaxHc && mix.ne[0] == nh && scale.type == ggml_type::F32 &&
                        base.type == ggml_type::F32,
                    "hc_collapse: shapes");
    matmul(fn, x, mix);
    if (x.n_rows() == 0) return;
    if (probe(op_kind::hc_collapse, p.n_hc, p.n_embd, p.norm_eps, p.hc_eps, x, scale, base, out,
              mix)) {
        return;
    }
    cuda::hc_args a{};
    a.nh = static_cast<int>(nh);
    a.d = p.n_embd;
    a.norm_eps = p.norm_eps;
    a.hc_eps = p.hc_eps;
    a.x = as_mat(dev(x, "hc_collapse"));
    a.mix = as_mat(dev(mix, "hc_collapse"));
    a.y = as_mat(dev(out, "hc_collapse"));
    a.scale = static_cast<const float*>(dev(scale, "hc_collapse").data);
    a.base = static_cast<const float*>(dev(base, "hc_collapse").data);
    cuda::hc_collapse_kernel<<<static_cast<unsigned>(x.n_rows()), cuda::kHcThreads, 0,
                               static_cast<cudaStream_t>(stream_)>>>(a);
    MAGNETAR_CUDA_LAUNCHED("hc_collapse");
}

}  // namespace magnetar::backend
