// CUDA backend: attention-side ops. The raw sliding-window ring store, the compressor state
// machine (spec model.md §6), the lightning indexer's top-k (§5.3e) and the sparse attention
// with sinks (§5.3d/f).
//
// The compressor runs one block per call, token by token (the frontier is a state machine),
// parallel over channels. The indexer computes each score (one thread per query and row) with
// cpu::dot_f32's accumulation order, so the top-k decision sees the CPU's bits, then selects
// with a 64-bit threshold search on (score, -index) keys: ties go to the lower index as on the
// CPU. Attention is one block
// per (token, head): scores, softmax with the sink, then the weighted sum in key order.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/rowops.cuh"

namespace magnetar::cuda {

namespace {

__global__ void kv_store_kernel(mat kv, mat ring, kpos pos, int64_t first) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t n = (kv.rows - first) * kv.cols;
    if (i >= n) return;
    const int64_t r = first + i / kv.cols;
    const int64_t c = i % kv.cols;
    ring.row((pos.get() + r) % ring.rows)[c] = kv.row(r)[c];
}

struct comp_args {
    int64_t R, d, w2;
    kpos pos;
    bool overlap, qat;
    int64_t n_nope;
    float norm_eps, had_s;
    mat kvp, sc, skv, ssc, rows;
    const uint8_t* ape;
    ggml_type ape_type;
    size_t ape_nb1;
    const float* norm;
    rope_table tab;
};

__global__ void compressor_kernel(comp_args a) {
    extern __shared__ float pooled[];  // [d]
    __shared__ double sh[32];
    const int64_t n = a.kvp.rows;
    const int64_t p0 = a.pos.get();
    for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = p0 + t;
        const int64_t slot = a.overlap ? a.R + pos % a.R : pos % a.R;
        const uint8_t* ape_row = a.ape + static_cast<size_t>(pos % a.R) * a.ape_nb1;
        float* skv = a.skv.row(slot);
        float* ssc = a.ssc.row(slot);
        const float* kt = a.kvp.row(t);
        const float* st = a.sc.row(t);
        for (int64_t i = threadIdx.x; i < a.w2; i += blockDim.x) {
            skv[i] = kt[i];
            ssc[i] = st[i] + load_elem(a.ape_type, ape_row, i);
        }
        __syncthreads();
        if ((pos + 1) % a.R != 0) continue;

        const int64_t n_cand = a.overlap ? 2 * a.R : a.R;
        for (int64_t i = threadIdx.x; i < a.d; i += blockDim.x) {
            float mx = -INFINITY;
            for (int64_t c = 0; c < n_cand; ++c) {
                const int64_t ch = a.overlap && c >= a.R ? a.d + i : i;
                mx = fmaxf(mx, a.ssc.row(c)[ch]);
            }
            float den = 0.0f, acc = 0.0f;
            for (int64_t c = 0; c < n_cand; ++c) {
                const int64_t ch = a.overlap && c >= a.R ? a.d + i : i;
                const float e = expf(a.ssc.row(c)[ch] - mx);
                den += e;
                acc += e * a.skv.row(c)[ch];
            }
            pooled[i] = acc / den;
        }
        __syncthreads();
        const int64_t row = (pos + 1) / a.R - 1;
        float* out = a.rows.row(row);
        block_rms_norm(pooled, a.norm, out, a.d, a.norm_eps, sh);
        for (int j = threadIdx.x; j < static_cast<int>(a.tab.n_rot / 2); j += blockDim.x) {
            rope_pair(out + (a.d - a.tab.n_rot), j, a.tab, row * a.R, false);
        }
        __syncthreads();
        if (a.qat) {
            block_hadamard(out, a.d, a.had_s);
            block_fp4_roundtrip(out, a.d);
        } else {
            block_fp8_roundtrip(out, a.n_nope);
        }
        if (a.overlap) {
            for (int64_t c = 0; c < a.R; ++c) {
                for (int64_t i = threadIdx.x; i < a.w2; i += blockDim.x) {
                    a.skv.row(c)[i] = a.skv.row(a.R + c)[i];
                    a.ssc.row(c)[i] = a.ssc.row(a.R + c)[i];
                }
            }
        }
        __syncthreads();
    }
}

// cpu::dot_f32 with its exact accumulation order.
__device__ __forceinline__ float dot_f32_cpu_order(const float* a, const float* b, int64_t n) {
    float acc[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[j] = 0.0f;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
#pragma unroll
        for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
    }
    float tail = 0.0f;
    for (; i < n; ++i) tail += a[i] * b[i];
#pragma unroll
    for (int w = 8; w >= 1; w /= 2) {
#pragma unroll
        for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
    }
    return acc[0] + tail;
}

// Higher score first, then lower index: a larger key is better.
__device__ __forceinline__ uint64_t topk_key(float score, int64_t s) {
    uint32_t u = __float_as_uint(score);
    if ((u & 0x7fffffffu) == 0) u = 0;  // -0 and +0 tie, as in the CPU's float comparison
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (static_cast<uint64_t>(u) << 32) | (0xffffffffu - static_cast<uint32_t>(s));
}

struct topk_args {
    kpos pos;
    int64_t ratio, K, nh, hd;
    float weight_scale;
    mat qi, wgt, rows;
    imat sel;
    float* scores;  // [n, n_vis_max]
    int64_t n_vis_max;
};

// One thread per (query, visible row): the score in cpu::dot_f32's order.
__global__ void indexer_score_kernel(topk_args a) {
    const int64_t t = blockIdx.y;
    const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t n_vis = (a.pos.get() + t + 1) / a.ratio;
    if (n_vis <= a.K || s >= n_vis) return;
    const float* q = a.qi.row(t);
    const float* w = a.wgt.row(t);
    const float* k = a.rows.row(s);
    float acc = 0.0f;
    for (int64_t h = 0; h < a.nh; ++h) {
        const float dp = dot_f32_cpu_order(q + h * a.hd, k, a.hd);
        acc += (w[h] * a.weight_scale) * (dp < 0.0f ? 0.0f : dp);
    }
    a.scores[t * a.n_vis_max + s] = acc;
}

__global__ void indexer_topk_kernel(topk_args a) {
    __shared__ int count;
    __shared__ int warp_counts[32];
    const int lane = threadIdx.x % kWarp;
    const int wid = threadIdx.x / kWarp;
    const int nw = blockDim.x / kWarp;
    const int64_t p0 = a.pos.get();
    for (int64_t t = blockIdx.x; t < a.qi.rows; t += gridDim.x) {
        int32_t* out = a.sel.row(t);
        const int64_t n_vis = (p0 + t + 1) / a.ratio;
        if (n_vis <= a.K) {
            for (int64_t i = threadIdx.x; i < a.K; i += blockDim.x) out[i] = -1;
            continue;
        }
        const float* score = a.scores + t * a.n_vis_max;
        // The K-th largest key, bit by bit from the top.
        uint64_t thr = 0;
        for (int bit = 63; bit >= 0; --bit) {
            const uint64_t cand = thr | (uint64_t{1} << bit);
            int c = 0;
            for (int64_t s = threadIdx.x; s < n_vis; s += blockDim.x)
                c += topk_key(score[s], s) >= cand;
            if (threadIdx.x == 0) count = 0;
            __syncthreads();
            if (c) atomicAdd(&count, c);
            __syncthreads();
            if (count >= a.K) thr = cand;
            __syncthreads();
        }
        // The chosen indices in ascending order.
        int64_t base = 0;
        for (int64_t c0 = 0; c0 < n_vis; c0 += blockDim.x) {
            const int64_t s = c0 + threadIdx.x;
            const bool f = s < n_vis && topk_key(score[s], s) >= thr;
            const unsigned ballot = __ballot_sync(0xffffffffu, f);
            if (lane == 0) warp_counts[wid] = __popc(ballot);
            __syncthreads();
            int off = 0, total = 0;
            for (int i = 0; i < nw; ++i) {
                if (i < wid) off += warp_counts[i];
                total += warp_counts[i];
            }
            if (f) out[base + off + __popc(ballot & ((1u << lane) - 1u))] = static_cast<int32_t>(s);
            base += total;
            __syncthreads();
        }
    }
}

struct attn_args {
    kpos pos;
    int64_t H, hd, window, ratio, top_k;
    float scale;
    mat q, kv, ring, comp, out;
    imat sel;
    bool has_sel;
    const float* sinks;
};

__device__ __forceinline__ const float* attn_key(const attn_args& a, int64_t p0, int64_t k,
                                                 int64_t lo, int64_t n_raw, const int32_t* chosen) {
    if (k < n_raw) {
        const int64_t kp = lo + k;
        return kp >= p0 ? a.kv.row(kp - p0) : a.ring.row(kp % a.ring.rows);
    }
    const int64_t c = k - n_raw;
    return a.comp.row(chosen ? chosen[c] : c);
}

__global__ void attention_kernel(attn_args a) {
    extern __shared__ float w[];  // [n_keys]
    __shared__ float red[32];
    __shared__ float den_sh;
    const int64_t t = blockIdx.x / a.H;
    const int64_t h = blockIdx.x % a.H;
    const int64_t p0 = a.pos.get();
    const int64_t pos = p0 + t;
    const float* qh = a.q.row(t) + h * a.hd;
    const int64_t lo = pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
    const int64_t n_raw = pos - lo + 1;
    int64_t n_comp = 0;
    const int32_t* chosen = nullptr;
    if (a.ratio != 0) {
        n_comp = (pos + 1) / a.ratio;
        if (a.ratio == 4 && n_comp > a.top_k) {
            n_comp = a.top_k;
            chosen = a.sel.row(t);
        }
    }
    const int64_t n_keys = n_raw + n_comp;
    const int lane = threadIdx.x % kWarp;
    const int wid = threadIdx.x / kWarp;
    const int nw = blockDim.x / kWarp;
    const float sink = a.sinks[h];
    float mx = sink;
    for (int64_t k = wid; k < n_keys; k += nw) {
        const float* key = attn_key(a, p0, k, lo, n_raw, chosen);
        float part = 0.0f;
        for (int64_t i = lane; i < a.hd; i += kWarp) part = fmaf(qh[i], key[i], part);
        const float s = warp_sum(part) * a.scale;
        if (lane == 0) w[k] = s;
        mx = fmaxf(mx, s);
    }
    mx = warp_max(mx);
    if (lane == 0) red[wid] = mx;
    __syncthreads();
    mx = red[0];
    for (int i = 1; i < nw; ++i) mx = fmaxf(mx, red[i]);
    for (int64_t k = threadIdx.x; k < n_keys; k += blockDim.x) w[k] = expf(w[k] - mx);
    __syncthreads();
    if (threadIdx.x == 0) {
        float den = expf(sink - mx);
        for (int64_t k = 0; k < n_keys; ++k) den += w[k];
        den_sh = den;
    }
    __syncthreads();
    const float inv = 1.0f / den_sh;
    float* o = a.out.row(t) + h * a.hd;
    for (int64_t i = threadIdx.x; i < a.hd; i += blockDim.x) {
        float acc = 0.0f;
        for (int64_t k = 0; k < n_keys; ++k) acc += w[k] * attn_key(a, p0, k, lo, n_raw, chosen)[i];
        o[i] = acc * inv;
    }
}

constexpr int kTopkBlocksMax = 264;  // selection blocks: two waves of an H200's SMs at most
constexpr size_t kDefaultSmem = 48 * 1024;

}  // namespace
}  // namespace magnetar::cuda

namespace magnetar::backend {

using cuda::as_imat;
using cuda::as_mat;

void cuda_backend::kv_store(const tensor& kv, const tensor& ring, int64_t p0) {
    const int64_t n = kv.n_rows();
    const int64_t cap = ring.n_rows();
    MAGNETAR_ASSERT(kv.ne[0] == ring.ne[0] && cap > 0, "kv_store: shapes");
    const int64_t first = std::max<int64_t>(0, n - cap);
    const int64_t total = (n - first) * kv.ne[0];
    if (total <= 0) return;
    const bool probing = probe(op_kind::kv_store, kv, ring);
    const pos_arg pa = pos(p0);
    if (probing) return;
    cuda::
        kv_store_kernel<<<cuda::grid_for(total, 256), 256, 0, static_cast<cudaStream_t>(stream_)>>>(
            as_mat(dev(kv, "kv_store")), as_mat(dev(ring, "kv_store")), cuda::kpos{pa.off, pa.dev},
            first);
    MAGNETAR_CUDA_LAUNCHED("kv_store");
}

void cuda_backend::compressor(const compressor_params& p, const tensor& kvp, const tensor& sc,
                              const tensor& ape, const tensor& norm, const tensor& state_kv,
                              const tensor& state_score, const tensor& rows) {
    const int64_t R = p.ratio;
    const int64_t d = p.width;
    const bool overlap = R == 4;
    const int64_t w2 = overlap ? 2 * d : d;
    MAGNETAR_ASSERT(kvp.ne[0] == w2 && sc.ne[0] == w2 && state_kv.ne[0] == w2 &&
                        state_kv.n_rows() == (overlap ? 2 * R : R) && rows.ne[0] == d &&
                        p.rope.n_rot <= cuda::kMaxRot && p.rope.n_rot <= d,
                    "compressor: shapes");
    MAGNETAR_ASSERT(
        ape.type == ggml_type::F32 || ape.type == ggml_type::F16 || ape.type == ggml_type::BF16,
        "compressor: the positional bias must be F32, F16 or BF16");
    MAGNETAR_ASSERT(!p.indexer_qat || (d & (d - 1)) == 0,
                    "compressor: QAT width not a power of two");
    if (kvp.n_rows() == 0) return;
    const bool probing =
        probe(op_kind::compressor, p.ratio, p.width, p.norm_eps, p.rope, p.indexer_qat, p.n_nope,
              kvp, sc, ape, norm, state_kv, state_score, rows);
    const pos_arg pa = pos(p.p0);
    if (probing) return;
    cuda::comp_args a{};
    a.R = R;
    a.d = d;
    a.w2 = w2;
    a.pos = cuda::kpos{pa.off, pa.dev};
    a.overlap = overlap;
    a.qat = p.indexer_qat;
    a.n_nope = p.n_nope;
    a.norm_eps = p.norm_eps;
    a.had_s = cuda::hadamard_scale(d);
    a.kvp = as_mat(dev(kvp, "compressor"));
    a.sc = as_mat(dev(sc, "compressor"));
    a.skv = as_mat(dev(state_kv, "compressor"));
    a.ssc = as_mat(dev(state_score, "compressor"));
    a.rows = as_mat(dev(rows, "compressor"));
    a.ape = static_cast<const uint8_t*>(dev(ape, "compressor").data);
    a.ape_type = ape.type;
    a.ape_nb1 = ape.nb[1];
    a.norm = static_cast<const float*>(dev(norm, "compressor").data);
    a.tab = cuda::make_rope_table(p.rope);
    const size_t smem = static_cast<size_t>(d) * sizeof(float);
    MAGNETAR_ASSERT(smem <= cuda::kDefaultSmem, "compressor: width too large");
    cuda::compressor_kernel<<<1, 256, smem, static_cast<cudaStream_t>(stream_)>>>(a);
    MAGNETAR_CUDA_LAUNCHED("compressor");
}

void cuda_backend::indexer_topk(const indexer_params& p, const tensor& qi, const tensor& wgt,
                                const tensor& rows, const tensor& sel) {
    const int64_t K = p.top_k;
    MAGNETAR_ASSERT(qi.ne[0] == static_cast<int64_t>(p.n_head) * p.head_dim &&
                        wgt.ne[0] == p.n_head && rows.ne[0] == p.head_dim && sel.ne[0] == K &&
                        p.ratio > 0,
                    "indexer_topk: shapes");
    const int64_t n = sel.n_rows();
    if (n == 0) return;
    int64_t n_vis_max = std::max<int64_t>(1, (p.p0 + n) / p.ratio);
    // A graph step serves later positions too: size for the reserved context.
    const bool graph = graph_mode();
    if (graph) n_vis_max = std::max(n_vis_max, limits_.max_index_rows);
    const int blocks = static_cast<int>(std::min<int64_t>(n, cuda::kTopkBlocksMax));
    const size_t scratch_bytes =
        static_cast<size_t>(n) * static_cast<size_t>(n_vis_max) * sizeof(float);
    const bool probing = probe(op_kind::indexer_topk, p.ratio, p.top_k, p.n_head, p.head_dim,
                               p.weight_scale, qi, wgt, rows, sel, n_vis_max);
    const pos_arg pa = pos(p.p0);
    void* scr = graph ? step_scratch(0, scratch_bytes) : scratch(0, scratch_bytes);
    if (probing) return;
    cuda::topk_args a{};
    a.pos = cuda::kpos{pa.off, pa.dev};
    a.ratio = p.ratio;
    a.K = K;
    a.nh = p.n_head;
    a.hd = p.head_dim;
    a.weight_scale = p.weight_scale;
    a.sel = as_imat(dev(sel, "indexer_topk"));
    // Below the budget nothing is read (the graph skips the projections then).
    if (n_vis_max > K || graph) {
        a.qi = as_mat(dev(qi, "indexer_topk"));
        a.wgt = as_mat(dev(wgt, "indexer_topk"));
        a.rows = as_mat(dev(rows, "indexer_topk"));
    }
    a.qi.rows = n;
    a.n_vis_max = n_vis_max;
    a.scores = static_cast<float*>(scr);
    const cudaStream_t s = static_cast<cudaStream_t>(stream_);
    const dim3 score_grid(cuda::grid_for(n_vis_max, 128), static_cast<unsigned>(n));
    cuda::indexer_score_kernel<<<score_grid, 128, 0, s>>>(a);
    MAGNETAR_CUDA_LAUNCHED("indexer_topk scores");
    cuda::indexer_topk_kernel<<<blocks, 256, 0, s>>>(a);
    MAGNETAR_CUDA_LAUNCHED("indexer_topk");
}

void cuda_backend::sparse_attention(const attention_params& p, const tensor& q, const tensor& kv,
                                    const tensor& ring, const tensor& comp, const tensor& sel,
                                    const tensor& sinks, const tensor& out) {
    const int64_t hd = p.head_dim;
    const int64_t H = p.n_head;
    const int64_t n = q.n_rows();
    MAGNETAR_ASSERT(
        q.ne[0] == H * hd && kv.ne[0] == hd && out.ne[0] == H * hd && sinks.type == ggml_type::F32,
        "sparse_attention: shapes");
    if (n == 0) return;
    int64_t max_comp = 0;
    if (p.ratio != 0) {
        max_comp = (p.p0 + n) / p.ratio;
        if (p.ratio == 4) max_comp = std::min<int64_t>(max_comp, p.top_k);
    }
    int64_t max_keys = std::min<int64_t>(p.window, p.p0 + n) + max_comp;
    // A graph step serves later positions too: size for the reserved context.
    if (graph_mode()) max_keys = std::max(max_keys, limits_.max_keys);
    const size_t smem = static_cast<size_t>(max_keys) * sizeof(float);
    static size_t smem_granted = cuda::kDefaultSmem;
    if (smem > smem_granted) {
        int dev_id = 0, max_optin = 0;
        MAGNETAR_CUDA_CHECK(cudaGetDevice(&dev_id));
        MAGNETAR_CUDA_CHECK(
            cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_id));
        if (smem + 1024 > static_cast<size_t>(max_optin)) {
            throw Error(
                strfmt("cuda sparse_attention: %lld keys per query exceed the %d bytes of "
                       "shared memory of this device",
                       static_cast<long long>(max_keys), max_optin));
        }
        MAGNETAR_CUDA_CHECK(cudaFuncSetAttribute(
            cuda::attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_optin - 1024));
        smem_granted = static_cast<size_t>(max_optin - 1024);
    }
    const bool probing = probe(op_kind::sparse_attention, p.n_head, p.head_dim, p.window, p.ratio,
                               p.top_k, p.scale, q, kv, ring, comp, sel, sinks, out, max_keys);
    const pos_arg pa = pos(p.p0);
    if (probing) return;
    cuda::attn_args a{};
    a.pos = cuda::kpos{pa.off, pa.dev};
    a.H = H;
    a.hd = hd;
    a.window = p.window;
    a.ratio = p.ratio;
    a.top_k = p.top_k;
    a.scale = p.scale;
    a.q = as_mat(dev(q, "sparse_attention"));
    a.kv = as_mat(dev(kv, "sparse_attention"));
    a.ring = as_mat(dev(ring, "sparse_attention"));
    if (comp) a.comp = as_mat(dev(comp, "sparse_attention"));
    if (sel) a.sel = as_imat(dev(sel, "sparse_attention"));
    a.out = as_mat(dev(out, "sparse_attention"));
    a.sinks = static_cast<const float*>(dev(sinks, "sparse_attention").data);
    cuda::attention_kernel<<<static_cast<unsigned>(n * H), 128, smem,
                             static_cast<cudaStream_t>(stream_)>>>(a);
    MAGNETAR_CUDA_LAUNCHED("sparse_attention");
}

}  // namespace magnetar::backend
