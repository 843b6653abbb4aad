// CPU backend: the DeepSeek V4.1 ops (spec v41.md): bf16 rounding and the run-time QDQs,
// V4.1 RoPE, single-pass mHC, the ratio-2 compressor pooling, the indexer with candidate
// blocks, sparse attention in the 64-slot decode layout, the V4.1 routed experts and Engram.
//
// Every op computes a token's outputs with the same arithmetic whatever the batch: sums run in
// a fixed order over the valid entries, and top-k selections break ties to the smaller index
// (§5.3), so decode, prefill and chunked prefill agree bit for bit.
//
// Reference order (the backend's `reference` switch, docs/v41.md "Against the reference"): the
// dot products of the indexer scores and of the attention scores become one sequential fp32
// sum per output (acc = acc + a[i] * b[i], i ascending, product and sum rounded separately),
// as the matmuls then are (cpu/ref/matmul_ref.h). Every other reduction here is sequential
// already. The PyTorch reference (tests/reference/dsv41_ref) computes in that same order.
//
// No op allocates: per-call workspace is the thread's backend scratch (sized by reserve() from
// graph::forward41_limits; each op checks its share) or a bounded stack array.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/rope41.h"
#include "quant/fp8fp4.h"

namespace magnetar::backend {

namespace {

constexpr uint32_t kMaxHc = 8;
constexpr int64_t kSlotBlock = 64;      // list slots per online-softmax block (§5.2)
constexpr int kMaxRot41 = 256;          // RoPE widths handled with a stack inv_freq table
constexpr int64_t kMaxHeads = 1024;     // attention / indexer heads (stack statistics)
constexpr int64_t kMaxIndexDim = 1024;  // indexer head width (one decoded key on the stack)
constexpr int64_t kMaxUsed41 = 64;      // routed experts per token (as the router's bound)
constexpr int64_t kMaxRatio41 = 16;     // compressor ratio (stack softmax lanes)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// 1 / sqrt(mean(f^2) + eps) over n values, fp32 as the spec's RMS statistics.
float rms_inv_f32(const float* f, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += f[i] * f[i];
    return 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
}

// One sequential fp32 sum of a[i] * b[i], i = 0 .. n-1 (the reference order).
float dot_seq(const float* a, const float* b, int64_t n) {
    float acc = 0.0f;
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
}

// (score, index) order of §5.3: larger score first, then the smaller index.
struct ranked {
    float score;
    int32_t index;
};
bool ranks_before(const ranked& a, const ranked& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.index < b.index;
}

// Keeps the first k of v[0 .. n) by ranks_before in v[0 .. min(n, k)) and returns that count
// (the set is exact; the order is not).
int64_t top_k_set(ranked* v, int64_t n, int64_t k) {
    if (n <= k) return n;
    std::nth_element(v, v + k, v + n, ranks_before);
    return k;
}

// v[0 .. n) in ascending index order.
void sort_by_index(ranked* v, int64_t n) {
    std::sort(v, v + n, [](const ranked& a, const ranked& b) { return a.index < b.index; });
}

}  // namespace

// ---- element-wise ----

void cpu_backend::round_bf16(const tensor& x) {
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            for (int64_t r = r0; r < r1; ++r) quant::round_bf16_inplace(x.f32_row(r), x.ne[0]);
        },
        16);
}

void cpu_backend::qdq_rows(const tensor& x, qdq_format fmt, const tensor& packed) {
    const op_timer timer(*this, "element-wise");
    const int64_t w = x.ne[0];
    int64_t row_bytes = 0;
    switch (fmt) {
        case qdq_format::fp8_b32:
            row_bytes = quant::window_row_bytes(w);
            break;
        case qdq_format::fp4_e4m3_b16:
            row_bytes = quant::main_kv_row_bytes(w);
            break;
        case qdq_format::mxfp4_b32:
            row_bytes = quant::index_key_row_bytes(w);
            break;
    }
    MAGNETAR_ASSERT(!packed || (packed.ne[0] == row_bytes && packed.n_rows() >= x.n_rows()),
                    "qdq_rows: packed rows");
    // Per-thread scratch: one row's codes [w] then its scales [w/16 + 1] (bytes).
    const size_t code_bytes = static_cast<size_t>(w);
    MAGNETAR_ASSERT(code_bytes + code_bytes / 16 + 1 <= scratch_floats_ * sizeof(float),
                    "qdq_rows: row wider than the backend scratch (reserve with the model's "
                    "limits)");
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int th) {
            uint8_t* codes = reinterpret_cast<uint8_t*>(scratch(th));
            uint8_t* sc = codes + code_bytes;
            for (int64_t r = r0; r < r1; ++r) {
                float* row = x.f32_row(r);
                uint8_t* out = packed ? packed.row_ptr(r) : nullptr;
                switch (fmt) {
                    case qdq_format::fp8_b32:
                        quant::qdq_fp8_block32(row, row, w, codes, sc);
                        if (out) quant::pack_window_row(codes, sc, w, out);
                        break;
                    case qdq_format::fp4_e4m3_b16:
                        quant::qdq_fp4_e4m3_block16(row, row, w, codes, sc);
                        if (out) quant::pack_main_kv_row(codes, sc, w, out);
                        break;
                    case qdq_format::mxfp4_b32:
                        quant::qdq_mxfp4_block32(row, row, w, codes, sc);
                        if (out) quant::pack_index_key_row(codes, sc, w, out);
                        break;
                }
            }
        },
        4);
}

void cpu_backend::rope41(const tensor& x, uint32_t head_dim, const rope41_params& rope, int64_t p0,
                         int64_t stride, bool inverse) {
    const op_timer timer(*this, "element-wise");
    const int nr = static_cast<int>(rope.n_rot);
    MAGNETAR_ASSERT(nr % 2 == 0 && nr <= kMaxRot41 && nr <= static_cast<int>(head_dim) &&
                        x.ne[0] % head_dim == 0,
                    "rope41: shapes");
    ::magnetar::rope41::yarn_params yarn;
    yarn.orig_ctx = rope.yarn_orig_ctx;
    yarn.factor = rope.yarn_factor;
    yarn.beta_fast = rope.beta_fast;
    yarn.beta_slow = rope.beta_slow;
    // A few pow() per call: small next to the rotations of even one decode row.
    float inv[kMaxRot41 / 2];
    ::magnetar::rope41::inv_freq(nr, rope.freq_base, &yarn, inv);
    const int64_t n_heads = x.ne[0] / head_dim;
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            for (int64_t r = r0; r < r1; ++r) {
                ::magnetar::rope41::apply_heads(x.f32_row(r), n_heads, head_dim, nr,
                                                p0 + r * stride, inv, inverse);
            }
        },
        4);
}

// ---- hyper-connections (§3.2) ----

void cpu_backend::hc41_pre(const hc_params& p, const tensor& x, const tensor& fn,
                           const tensor& scale, const tensor& base, const tensor& carry,
                           const tensor& y, const tensor& pre, const tensor& post,
                           const tensor& comb, const tensor& mix) {
    const op_timer timer(*this, "hyper-connections");
    const uint32_t nh = p.n_hc;
    const int64_t d = p.n_embd;
    MAGNETAR_ASSERT(nh <= kMaxHc && x.ne[0] == nh * d && mix.ne[0] == (2 + nh) * nh &&
                        carry.ne[0] == nh && pre.ne[0] == nh,
                    "hc41_pre: shapes");
    matmul(fn, x, mix);  // fp32 dot products, the RMS factor applied after
    const float* sc = scale.f32();
    const float* bs = base.f32();
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t t0, int64_t t1, int) {
            float z[kMaxHc * kMaxHc];
            for (int64_t t = t0; t < t1; ++t) {
                const float* f = x.f32_row(t);
                const float rho = rms_inv_f32(f, nh * d, p.norm_eps);
                const float* m = mix.f32_row(t);
                float* pr = pre.f32_row(t);
                float* po = post.f32_row(t);
                for (uint32_t j = 0; j < nh; ++j) {
                    pr[j] = cpu::sigmoid((m[j] * rho) * sc[0] + bs[j]) + p.hc_eps;
                    po[j] = 2.0f * cpu::sigmoid((m[nh + j] * rho) * sc[1] + bs[nh + j]);
                }
                for (uint32_t k = 0; k < nh * nh; ++k) {
                    z[k] = (m[2 * nh + k] * rho) * sc[2] + bs[2 * nh + k];
                }
                cpu::sinkhorn(z, comb.f32_row(t), static_cast<int>(nh), p.hc_eps,
                              static_cast<int>(p.sinkhorn_iters));
                const float* w = carry.f32_row(t);
                float* out = y.f32_row(t);
                for (int64_t i = 0; i < d; ++i) {
                    float acc = w[0] * f[i];
                    for (uint32_t j = 1; j < nh; ++j) acc += w[j] * f[j * d + i];
                    out[i] = quant::round_bf16(acc);
                }
            }
        },
        1);
}

void cpu_backend::hc41_collapse(const hc_params& p, const tensor& x, const tensor& w,
                                const tensor& out) {
    const op_timer timer(*this, "hyper-connections");
    const uint32_t nh = p.n_hc;
    const int64_t d = p.n_embd;
    MAGNETAR_ASSERT(x.ne[0] == nh * d && w.ne[0] == nh && out.ne[0] == d, "hc41_collapse: shapes");
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t t0, int64_t t1, int) {
            for (int64_t t = t0; t < t1; ++t) {
                const float* f = x.f32_row(t);
                const float* wt = w.f32_row(t);
                float* o = out.f32_row(t);
                for (int64_t i = 0; i < d; ++i) {
                    float acc = wt[0] * f[i];
                    for (uint32_t j = 1; j < nh; ++j) acc += wt[j] * f[j * d + i];
                    o[i] = quant::round_bf16(acc);
                }
            }
        },
        1);
}

// ---- compressor pooling (§3.4) ----

void cpu_backend::compressor41(const compressor41_params& p, const tensor& a, const tensor& b,
                               const tensor& state_a, const tensor& state_b, const tensor& z) {
    const op_timer timer(*this, "compressor");
    const int64_t r = p.ratio;
    const int64_t dh = a.ne[0];
    const int64_t n = a.n_rows();
    MAGNETAR_ASSERT(r >= 2 && r <= kMaxRatio41 && b.ne[0] == dh && state_a.ne[0] == dh &&
                        state_a.n_rows() == r && state_b.n_rows() == r && z.ne[0] == dh &&
                        z.n_rows() == (p.p0 + n) / r - p.p0 / r,
                    "compressor41: shapes");
    int64_t out = 0;
    for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = p.p0 + t;
        const int64_t slot = pos % r;
        std::memcpy(state_a.f32_row(slot), a.f32_row(t), static_cast<size_t>(dh) * 4);
        std::memcpy(state_b.f32_row(slot), b.f32_row(t), static_cast<size_t>(dh) * 4);
        if ((pos + 1) % r != 0) continue;
        float* zr = z.f32_row(out++);
        for (int64_t c = 0; c < dh; ++c) {
            float mx = state_b.f32_row(0)[c];
            for (int64_t u = 1; u < r; ++u) mx = std::max(mx, state_b.f32_row(u)[c]);
            float e[kMaxRatio41];
            float sum = 0.0f;
            for (int64_t u = 0; u < r; ++u) {
                e[u] = std::exp(state_b.f32_row(u)[c] - mx);
                sum += e[u];
            }
            float acc = 0.0f;
            for (int64_t u = 0; u < r; ++u) acc += (e[u] / sum) * state_a.f32_row(u)[c];
            zr[c] = quant::round_bf16(acc);
        }
    }
}

// ---- indexer (§3.5, §3.6) ----

void cpu_backend::indexer41(const indexer41_params& p, const tensor& qi, const tensor& w,
                            const tensor& keys, const tensor& cand_in, const tensor& cand_out,
                            const tensor& sel) {
    const op_timer timer(*this, "indexer");
    const int64_t n = qi.n_rows();
    const int64_t hi = p.n_head;
    const int64_t di = p.head_dim;
    const int64_t r = p.ratio;
    const int64_t kk = p.top_k;
    const int64_t n_tot = (p.p0 + n) / r;
    const int64_t bsz = p.cand_block_size;
    MAGNETAR_ASSERT(qi.ne[0] == hi * di && w.ne[0] == hi && sel.ne[0] == kk &&
                        keys.ne[0] == quant::index_key_row_bytes(di) && keys.n_rows() >= n_tot &&
                        (!cand_out || cand_out.ne[0] == p.cand_blocks) &&
                        (!cand_in || cand_in.ne[0] == p.cand_blocks) &&
                        ((!cand_in && !cand_out) || bsz > 0),
                    "indexer41: shapes");
    MAGNETAR_ASSERT(hi <= kMaxHeads && di <= kMaxIndexDim, "indexer41: too many or too wide heads");
    float (*const dot)(const float*, const float*, int64_t) = reference_ ? dot_seq : cpu::dot_f32;
    pool_.parallel_for(
        n,
        [&](int64_t t0, int64_t t1, int th) {
            // Per-thread scratch: every visible entry as (score, index) [n_vis], then the block
            // maxima of a candidate source or the allowed-block flags of a Reindex layer (one
            // after the other, at most one per entry): 4 * n_vis floats.
            ranked* cand = reinterpret_cast<ranked*>(scratch(th));
            float kj[kMaxIndexDim];
            float wt[kMaxHeads];
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t n_vis = (p.p0 + t + 1) / r;
                MAGNETAR_ASSERT(static_cast<size_t>(4 * n_vis) <= scratch_floats_,
                                "indexer41: more visible entries than the backend scratch holds "
                                "(reserve with the model's limits)");
                ranked* blocks = cand + n_vis;
                const float* q = qi.f32_row(t);
                for (int64_t h = 0; h < hi; ++h) {
                    wt[h] = quant::round_bf16(w.f32_row(t)[h] * p.weight_scale);
                }
                for (int64_t j = 0; j < n_vis; ++j) {
                    // Decoded on the fly (exact: a packed key decodes to its QDQ values); the
                    // decode costs 1/HI of the scoring.
                    quant::unpack_index_key_row(keys.row_ptr(j), di, kj);
                    float sum = 0.0f;
                    for (int64_t h = 0; h < hi; ++h) {
                        const float s = quant::round_bf16(dot(q + h * di, kj, di));
                        sum += quant::round_bf16(std::max(s, 0.0f) * wt[h]);
                    }
                    cand[j] = {quant::round_bf16(sum), static_cast<int32_t>(j)};
                }
                if (cand_out) {
                    // Block maxima over the visible entries; the newest visible block pinned.
                    int32_t* co = cand_out.i32_row(t);
                    std::fill_n(co, p.cand_blocks, -1);
                    if (n_vis > 0) {
                        const int64_t n_blocks = (n_vis + bsz - 1) / bsz;
                        for (int64_t bb = 0; bb < n_blocks; ++bb) {
                            float mx = kNegInf;
                            for (int64_t j = bb * bsz; j < std::min(n_vis, (bb + 1) * bsz); ++j) {
                                mx = std::max(mx, cand[j].score);
                            }
                            blocks[bb] = {mx, static_cast<int32_t>(bb)};
                        }
                        blocks[(n_vis - 1) / bsz].score = std::numeric_limits<float>::infinity();
                        const int64_t kept = top_k_set(blocks, n_blocks, p.cand_blocks);
                        sort_by_index(blocks, kept);
                        int64_t o = 0;
                        for (int64_t i = 0; i < kept; ++i) {
                            if (blocks[i].score != kNegInf) co[o++] = blocks[i].index;
                        }
                    }
                }
                // The entries of allowed blocks (all of them without candidates), in index
                // order, compacted in place.
                int64_t n_cand = n_vis;
                if (cand_in) {
                    const int64_t n_allowed = (n_vis + bsz - 1) / bsz;
                    uint8_t* allowed = reinterpret_cast<uint8_t*>(blocks);
                    std::fill_n(allowed, n_allowed, uint8_t{0});
                    const int32_t* ci = cand_in.i32_row(t);
                    for (uint32_t i = 0; i < p.cand_blocks; ++i) {
                        if (ci[i] >= 0 && ci[i] < n_allowed) allowed[ci[i]] = 1;
                    }
                    n_cand = 0;
                    for (int64_t j = 0; j < n_vis; ++j) {
                        if (allowed[j / bsz]) cand[n_cand++] = cand[j];
                    }
                }
                const int64_t kept = top_k_set(cand, n_cand, kk);
                sort_by_index(cand, kept);
                int32_t* s = sel.i32_row(t);
                std::fill_n(s, kk, -1);
                for (int64_t i = 0; i < kept; ++i) s[i] = cand[i].index;
            }
        },
        1);
}

// ---- sparse attention (§3.3, §5.2) ----

void cpu_backend::attention41(const attention41_params& p, const tensor& q, const tensor& kv,
                              const tensor& ring, const tensor& comp, const tensor& sel,
                              const tensor& sinks, const tensor& out) {
    const op_timer timer(*this, "attention");
    const int64_t hd = p.head_dim;
    const int64_t H = p.n_head;
    const int64_t W = p.window;
    const int64_t n = q.n_rows();
    const int64_t n_sel = sel ? sel.ne[0] : 0;
    MAGNETAR_ASSERT(q.ne[0] == H * hd && kv.ne[0] == hd && out.ne[0] == H * hd &&
                        ring.ne[0] == quant::window_row_bytes(hd) && ring.n_rows() == W &&
                        (!sel || comp.ne[0] == quant::main_kv_row_bytes(hd)) && hd <= 4096 &&
                        H <= kMaxHeads && out.data != q.data && out.data != kv.data,
                    "attention41: shapes");
    // Per-thread scratch: one block of decoded keys [64, Dh].
    MAGNETAR_ASSERT(static_cast<size_t>(kSlotBlock * hd) <= scratch_floats_,
                    "attention41: key block wider than the backend scratch (reserve with the "
                    "model's limits)");
    const float* sink = sinks.f32();
    float (*const dot)(const float*, const float*, int64_t) = reference_ ? dot_seq : cpu::dot_f32;
    pool_.parallel_for(
        n,
        [&](int64_t t0, int64_t t1, int th) {
            float* keys = scratch(th);
            float m[kMaxHeads];
            float den[kMaxHeads];
            float s[kSlotBlock];
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t pos = p.p0 + t;
                // The P.V accumulators [H, Dh] live in the token's output row.
                float* acc = out.f32_row(t);
                std::fill_n(acc, H * hd, 0.0f);
                std::fill_n(m, H, -1e30f);
                std::fill_n(den, H, 0.0f);
                const int32_t* chosen = sel ? sel.i32_row(t) : nullptr;
                const bool draft = p.ring_slots >= 0;
                const int64_t n_slots = draft ? p.ring_slots + n : W + n_sel;
                for (int64_t b0 = 0; b0 < n_slots; b0 += kSlotBlock) {
                    const int64_t b1 = std::min(n_slots, b0 + kSlotBlock);
                    // Valid keys of this block, decoded in slot order.
                    int64_t nv = 0;
                    for (int64_t slot = b0; slot < b1; ++slot) {
                        float* dst = keys + nv * hd;
                        if (draft) {
                            if (slot < p.ring_slots) {
                                quant::unpack_window_row(ring.row_ptr(slot), hd, dst);
                            } else {
                                std::memcpy(dst, kv.f32_row(slot - p.ring_slots),
                                            static_cast<size_t>(hd) * 4);
                            }
                        } else if (slot < W) {
                            const int64_t kp = pos - W + 1 + slot;
                            if (kp < 0) continue;
                            if (kp >= p.p0) {
                                std::memcpy(dst, kv.f32_row(kp - p.p0),
                                            static_cast<size_t>(hd) * 4);
                            } else {
                                quant::unpack_window_row(ring.row_ptr(kp % W), hd, dst);
                            }
                        } else {
                            const int32_t e = chosen[slot - W];
                            if (e < 0) continue;
                            quant::unpack_main_kv_row(comp.row_ptr(e), hd, dst);
                        }
                        ++nv;
                    }
                    if (nv == 0) continue;  // an all-empty block is an exact no-op
                    for (int64_t h = 0; h < H; ++h) {
                        const float* qh = q.f32_row(t) + h * hd;
                        float mx = m[h];
                        for (int64_t j = 0; j < nv; ++j) {
                            s[j] = dot(qh, keys + j * hd, hd) * p.scale;
                            mx = std::max(mx, s[j]);
                        }
                        const float a = std::exp(m[h] - mx);
                        float psum = 0.0f;
                        float* ah = acc + h * hd;
                        for (int64_t i = 0; i < hd; ++i) ah[i] *= a;
                        for (int64_t j = 0; j < nv; ++j) {
                            const float pj = std::exp(s[j] - mx);
                            psum += pj;
                            const float pb = quant::round_bf16(pj);
                            const float* kj = keys + j * hd;
                            for (int64_t i = 0; i < hd; ++i) ah[i] += pb * kj[i];
                        }
                        den[h] = den[h] * a + psum;
                        m[h] = mx;
                    }
                }
                for (int64_t h = 0; h < H; ++h) {
                    const float dn = den[h] + std::exp(sink[h] - m[h]);
                    float* ah = acc + h * hd;
                    for (int64_t i = 0; i < hd; ++i) ah[i] = quant::round_bf16(ah[i] / dn);
                }
            }
        },
        1);
}

// ---- routed experts (§3.8) ----

void cpu_backend::moe41(const tensor& xq, const tensor& sel, const tensor& weights,
                        const moe_weights& w, float clamp, const tensor& out,
                        const moe_workspace& ws) {
    const op_timer timer(*this, kMoeTimer, "(gather, SwiGLU, sum)");
    const int64_t n = xq.n_rows();
    const int64_t k = sel.ne[0];
    const int64_t E = w.gate_exps.ne[2];
    const int64_t D = xq.ne[0];
    const int64_t F = w.gate_exps.ne[1];
    MAGNETAR_ASSERT(ws.slots.ne[0] >= 2 * n * k + E + 1 && ws.xg.n_rows() >= n * k &&
                        F % quant::kFp8Block == 0 && k <= kMaxUsed41,
                    "moe41: workspace");
    int32_t* order = ws.slots.i32();
    int32_t* row_of = order + n * k;
    int32_t* start = row_of + n * k;  // [E + 1]
    cpu::sort_slots_by_expert(sel, E, order, row_of, start);

    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = start[e];
        const int64_t cnt = start[e + 1] - r0;
        if (cnt == 0) continue;
        const tensor xg = view_rows(ws.xg, r0, cnt);
        const tensor g = view_rows(ws.g, r0, cnt);
        const tensor u = view_rows(ws.u, r0, cnt);
        const tensor c = view_rows(ws.contrib, r0, cnt);
        for (int64_t j = 0; j < cnt; ++j) {
            std::memcpy(xg.f32_row(j), xq.f32_row(order[r0 + j] / k), static_cast<size_t>(D) * 4);
        }
        matmul(cpu::expert_view(w.gate_exps, e), xg, g);
        matmul(cpu::expert_view(w.up_exps, e), xg, u);
        for (int64_t j = 0; j < cnt; ++j) {
            const int32_t slot = order[r0 + j];
            const float wt = weights.f32_row(slot / k)[slot % k];
            float* gr = g.f32_row(j);
            const float* ur = u.f32_row(j);
            // Each linear's output is bf16 in the reference graph.
            for (int64_t i = 0; i < F; ++i) {
                const float a = std::min(quant::round_bf16(gr[i]), clamp);
                const float uu = std::clamp(quant::round_bf16(ur[i]), -clamp, clamp);
                gr[i] = quant::round_bf16(wt * (cpu::silu(a) * uu));
            }
            quant::qdq_fp8_block32(gr, gr, F, nullptr, nullptr);
        }
        matmul(cpu::expert_view(w.down_exps, e), g, c);
        round_bf16(c);
    }
    // Each token's experts summed in ascending expert id (fp32).
    pool_.parallel_for(
        n,
        [&](int64_t t0, int64_t t1, int) {
            std::pair<int32_t, int32_t> by_expert[kMaxUsed41];
            for (int64_t t = t0; t < t1; ++t) {
                for (int64_t i = 0; i < k; ++i) {
                    by_expert[i] = {sel.i32_row(t)[i], row_of[t * k + i]};
                }
                std::sort(by_expert, by_expert + k);
                float* o = out.f32_row(t);
                std::fill_n(o, D, 0.0f);
                for (int64_t i = 0; i < k; ++i) {
                    const float* ci = ws.contrib.f32_row(by_expert[i].second);
                    for (int64_t d = 0; d < D; ++d) o[d] += ci[d];
                }
            }
        },
        1);
}

// ---- Engram (§3.9.4) ----

void cpu_backend::engram_gather(const tensor& table, const tensor& idx, const tensor& out) {
    const op_timer timer(*this, "engram");
    const int64_t rb = table.ne[0];  // ED + ED/32 bytes
    const int64_t ed = rb * 32 / 33;
    const int64_t C = idx.ne[0];
    MAGNETAR_ASSERT(
        table.type == ggml_type::I8 && ed + ed / 32 == rb && ed % 32 == 0 && out.ne[0] == C * ed,
        "engram_gather: shapes");
    const int64_t rows = table.n_rows();
    pool_.parallel_for(
        idx.n_rows(),
        [&](int64_t t0, int64_t t1, int) {
            for (int64_t t = t0; t < t1; ++t) {
                for (int64_t c = 0; c < C; ++c) {
                    const int32_t row = idx.i32_row(t)[c];
                    MAGNETAR_ASSERT(row >= 0 && row < rows, "engram_gather: row out of range");
                    // A row264 row has the window-row layout: ED E4M3 codes, then ED/32 UE8M0.
                    quant::unpack_window_row(table.row_ptr(row), ed, out.f32_row(t) + c * ed);
                }
            }
        },
        1);
}

void cpu_backend::engram_gate(const engram_params& p, const tensor& x, const tensor& kv,
                              const tensor& wq, const tensor& out) {
    const op_timer timer(*this, "engram");
    const int64_t nh = p.n_hc;
    const int64_t d = p.n_embd;
    MAGNETAR_ASSERT(x.ne[0] == nh * d && kv.ne[0] == (nh + 1) * d && wq.ne[0] == d &&
                        wq.n_rows() == nh && out.ne[0] == nh * d,
                    "engram_gate: shapes");
    const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(d));
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t t0, int64_t t1, int) {
            for (int64_t t = t0; t < t1; ++t) {
                const float* val = kv.f32_row(t) + nh * d;
                for (int64_t i = 0; i < nh; ++i) {
                    const float* h = x.f32_row(t) + i * d;
                    const float* key = kv.f32_row(t) + i * d;
                    const float* wi = wq.f32_row(i);
                    const float rho =
                        rms_inv_f32(h, d, p.norm_eps) * rms_inv_f32(key, d, p.norm_eps);
                    float dot = 0.0f;
                    for (int64_t j = 0; j < d; ++j) dot += (h[j] * wi[j]) * key[j];
                    dot = dot * rho * inv_sqrt_d;
                    const float mag = std::sqrt(std::max(std::fabs(dot), 1e-6f));
                    const float gate = cpu::sigmoid(std::copysign(mag, dot));
                    float* o = out.f32_row(t) + i * d;
                    for (int64_t j = 0; j < d; ++j) o[j] = quant::round_bf16(h[j] + gate * val[j]);
                }
            }
        },
        1);
}

}  // namespace magnetar::backend
