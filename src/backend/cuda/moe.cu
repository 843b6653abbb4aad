// CUDA backend: expert routing and the routed experts (spec model.md §5.5).
//
// The router is one thread per token (k arg-max passes, strict '>' keeps the lower expert id).
// The MoE op sorts the (token, slot) pairs by expert on the device (stable: (token, slot) order
// within an expert, the CPU backend's workspace layout), cuts each expert's rows into tiles of at
// most kTileTokens rows, and runs the gate / up / down products as grouped launches of the
// matmul kernel over that tile table: each expert's weights are read once per tile, and only
// the experts that have rows are read at all. No host round trip, so the step can be captured.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"

namespace magnetar::cuda {

namespace {

struct router_args {
    int64_t E;
    int k;
    float scale;
    bool normalize;
    mat logits;
    const float* bias;
    const int32_t* tid2eid;
    int64_t tid_ld;
    const int32_t* ids;
    imat sel;
    mat wts;
};

__device__ __forceinline__ float route_score(float lg) {
    return sqrtf(softplus_f(lg));
}

__global__ void router_kernel(router_args a) {
    const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= a.logits.rows) return;
    const float* lg = a.logits.row(t);
    int32_t* s = a.sel.row(t);
    if (a.tid2eid) {
        const int32_t* row = a.tid2eid + static_cast<int64_t>(a.ids[t]) * a.tid_ld;
        for (int i = 0; i < a.k; ++i) s[i] = row[i];
    } else {
        for (int i = 0; i < a.k; ++i) {
            int32_t best = -1;
            float best_v = 0.0f;
            for (int64_t e = 0; e < a.E; ++e) {
                bool taken = false;
                for (int j = 0; j < i; ++j) taken = taken || s[j] == e;
                if (taken) continue;
                const float v = a.bias ? route_score(lg[e]) + a.bias[e] : route_score(lg[e]);
                if (best < 0 || v > best_v) {
                    best = static_cast<int32_t>(e);
                    best_v = v;
                }
            }
            s[i] = best;
        }
    }
    float* w = a.wts.row(t);
    float sum = 0.0f;
    for (int i = 0; i < a.k; ++i) {
        w[i] = route_score(lg[s[i]]);
        sum += w[i];
    }
    const float den = fmaxf(sum, 6.103515625e-5f);
    for (int i = 0; i < a.k; ++i) w[i] = (a.normalize ? w[i] / den : w[i]) * a.scale;
}

// One block: counting sort of the n*k pairs by expert into slots = [order | row_of | start],
// plus the tile table [n_tiles_max, 3].
__global__ void moe_sort_kernel(imat sel, int64_t n, int64_t k, int64_t E, int32_t* slots,
                                int32_t* tiles, int64_t n_tiles_max) {
    const int64_t nk = n * k;
    int32_t* order = slots;
    int32_t* row_of = slots + nk;
    int32_t* start = row_of + nk;  // [E + 1]
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        int32_t c = 0;
        for (int64_t j = 0; j < nk; ++j) c += sel.row(j / k)[j % k] == e;
        start[e + 1] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        start[0] = 0;
        for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
        int64_t ti = 0;
        for (int64_t e = 0; e < E; ++e) {
            for (int32_t r = start[e]; r < start[e + 1]; r += kTileTokens) {
                tiles[3 * ti] = static_cast<int32_t>(e);
                tiles[3 * ti + 1] = r;
                tiles[3 * ti + 2] = min(kTileTokens, start[e + 1] - r);
                ++ti;
            }
        }
        for (; ti < n_tiles_max; ++ti) tiles[3 * ti] = -1;
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        int32_t r = start[e];
        for (int64_t j = 0; j < nk; ++j) {
            if (sel.row(j / k)[j % k] != e) continue;
            order[r] = static_cast<int32_t>(j);
            row_of[j] = r;
            ++r;
        }
    }
}

__global__ void moe_gather_kernel(mat x, const int32_t* order, int64_t nk, int64_t k, mat xg) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= nk * x.cols) return;
    const int64_t r = i / x.cols, c = i % x.cols;
    xg.row(r)[c] = x.row(order[r] / k)[c];
}

__global__ void moe_act_kernel(mat g, mat u, const int32_t* order, int64_t nk, int64_t k, mat wts,
                               float clamp) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= nk * g.cols) return;
    const int64_t r = i / g.cols, c = i % g.cols;
    const int32_t slot = order[r];
    const float wt = wts.row(slot / k)[slot % k];
    g.row(r)[c] = wt * swiglu_f(g.row(r)[c], u.row(r)[c], clamp);
}

__global__ void moe_combine_kernel(mat contrib, const int32_t* row_of, int64_t k, mat out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= out.rows * out.cols) return;
    const int64_t t = i / out.cols, d = i % out.cols;
    float acc = contrib.row(row_of[t * k])[d];
    for (int64_t s = 1; s < k; ++s) acc += contrib.row(row_of[t * k + s])[d];
    out.row(t)[d] = acc;
}

}  // namespace
}  // namespace magnetar::cuda

namespace magnetar::backend {

using cuda::as_imat;
using cuda::as_mat;
using cuda::grid_for;

void cuda_backend::router(const router_params& p, const tensor& logits, const tensor& bias,
                          const tensor& tid2eid, const tensor& ids, const tensor& sel,
                          const tensor& weights) {
    MAGNETAR_ASSERT(p.n_used <= 64 && sel.ne[0] == p.n_used && weights.ne[0] == p.n_used,
                    "router: shapes");
    MAGNETAR_ASSERT(!bias || bias.type == ggml_type::F32, "router: bias must be F32");
    MAGNETAR_ASSERT(!tid2eid || (tid2eid.type == ggml_type::I32 && ids), "router: hash table");
    const int64_t n = logits.n_rows();
    if (n == 0) return;
    if (probe(op_kind::router, p.n_used, p.scale, p.normalize, logits, bias, tid2eid, ids, sel,
              weights)) {
        return;
    }
    cuda::router_args a{};
    a.E = logits.ne[0];
    a.k = static_cast<int>(p.n_used);
    a.scale = p.scale;
    a.normalize = p.normalize;
    a.logits = as_mat(dev(logits, "router"));
    a.bias = bias ? static_cast<const float*>(dev(bias, "router").data) : nullptr;
    if (tid2eid) {
        a.tid2eid = static_cast<const int32_t*>(dev(tid2eid, "router").data);
        a.tid_ld = static_cast<int64_t>(tid2eid.nb[1] / 4);
        a.ids = static_cast<const int32_t*>(dev(ids, "router").data);
    }
    a.sel = as_imat(dev(sel, "router"));
    a.wts = as_mat(dev(weights, "router"));
    cuda::router_kernel<<<grid_for(n, 64), 64, 0, static_cast<cudaStream_t>(stream_)>>>(a);
    MAGNETAR_CUDA_LAUNCHED("router");
}

void cuda_backend::moe(const tensor& x, const tensor& sel, const tensor& weights,
                       const moe_weights& w, float clamp, const tensor& out,
                       const moe_workspace& ws) {
    const int64_t n = x.n_rows();
    const int64_t k = sel.ne[0];
    const int64_t E = w.gate_exps.ne[2];
    const int64_t D = x.ne[0];
    const int64_t F = w.gate_exps.ne[1];
    MAGNETAR_ASSERT(ws.slots.ne[0] >= 2 * n * k + E + 1 && ws.xg.n_rows() >= n * k &&
                        w.up_exps.ne[2] == E && w.down_exps.ne[2] == E && w.down_exps.ne[1] == D &&
                        w.down_exps.ne[0] == F && w.gate_exps.ne[0] == D,
                    "moe: workspace or expert shapes");
    const int64_t nk = n * k;
    if (nk == 0) return;
    const cudaStream_t s = static_cast<cudaStream_t>(stream_);
    const int64_t n_tiles_max = (nk + cuda::kTileTokens - 1) / cuda::kTileTokens + std::min(E, nk);
    const bool probing = probe(op_kind::moe, x, sel, weights, w.gate_exps, w.up_exps, w.down_exps,
                               clamp, out, ws.xg, ws.g, ws.u, ws.contrib, ws.slots);
    void* tiles_p = graph_mode() ? step_scratch(1, static_cast<size_t>(n_tiles_max) * 3 * 4)
                                 : scratch(1, static_cast<size_t>(n_tiles_max) * 3 * 4);
    if (probing) return;
    auto* tiles = static_cast<int32_t*>(tiles_p);
    auto* slots = static_cast<int32_t*>(dev(ws.slots, "moe").data);
    const int32_t* order = slots;
    const int32_t* row_of = slots + nk;
    cuda::moe_sort_kernel<<<1, 256, 0, s>>>(as_imat(dev(sel, "moe")), n, k, E, slots, tiles,
                                            n_tiles_max);
    MAGNETAR_CUDA_LAUNCHED("moe sort");

    const cuda::mat xg = as_mat(dev(view_rows(ws.xg, 0, nk), "moe"));
    const cuda::mat g = as_mat(dev(view_rows(ws.g, 0, nk), "moe"));
    const cuda::mat u = as_mat(dev(view_rows(ws.u, 0, nk), "moe"));
    const cuda::mat c = as_mat(dev(view_rows(ws.contrib, 0, nk), "moe"));
    cuda::moe_gather_kernel<<<grid_for(nk * D, 256), 256, 0, s>>>(as_mat(dev(x, "moe")), order, nk,
                                                                  k, xg);
    MAGNETAR_CUDA_LAUNCHED("moe gather");

    auto grouped = [&](const tensor& wt, const cuda::mat& in, const cuda::mat& outm) {
        cuda::matmul_args a;
        a.w = static_cast<const uint8_t*>(dev(wt, "moe").data);
        a.type = wt.type;
        a.w_nb1 = wt.nb[1];
        a.w_nb2 = wt.nb[2];
        a.n_in = wt.ne[0];
        a.n_out = wt.ne[1];
        a.x = in;
        a.y = outm;
        a.tiles = tiles;
        a.n_tiles_max = n_tiles_max;
        cuda::launch_matmul(a, s);
    };
    grouped(w.gate_exps, xg, g);
    grouped(w.up_exps, xg, u);
    cuda::moe_act_kernel<<<grid_for(nk * F, 256), 256, 0, s>>>(g, u, order, nk, k,
                                                               as_mat(dev(weights, "moe")), clamp);
    MAGNETAR_CUDA_LAUNCHED("moe swiglu");
    grouped(w.down_exps, g, c);
    cuda::moe_combine_kernel<<<grid_for(n * D, 256), 256, 0, s>>>(c, row_of, k,
                                                                  as_mat(dev(out, "moe")));
    MAGNETAR_CUDA_LAUNCHED("moe combine");
}

}  // namespace magnetar::backend
