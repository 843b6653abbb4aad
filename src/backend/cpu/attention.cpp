// CPU backend: attention-side ops. The raw sliding-window ring store, the compressor state
// machine (spec model.md §6), the lightning indexer's top-k (§5.3e) and the sparse attention
// with sinks (§5.3d/f).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd/simd.h"

namespace magnetar::backend {

namespace {

constexpr uint32_t kMaxRot = 256;

}  // namespace

void cpu_backend::kv_store(const tensor& kv, const tensor& ring, int64_t p0) {
    const op_timer timer(*this, "element-wise");
    const int64_t n = kv.n_rows();
    const int64_t cap = ring.n_rows();
    const size_t rb = row_bytes(kv.type, kv.ne[0]);  // F32 rows, or packed I8 rows (V4.1)
    for (int64_t r = std::max<int64_t>(0, n - cap); r < n; ++r) {
        std::memcpy(ring.row_ptr((p0 + r) % cap), kv.row_ptr(r), rb);
    }
}

void cpu_backend::compressor(const compressor_params& p, const tensor& kvp, const tensor& sc,
                             const tensor& ape, const tensor& norm, const tensor& state_kv,
                             const tensor& state_score, const tensor& rows) {
    const op_timer timer(*this, "compressor");
    const int64_t R = p.ratio;
    const int64_t d = p.width;
    const bool overlap = R == 4;
    const int64_t w2 = overlap ? 2 * d : d;  // projected width (coff * d)
    MAGNETAR_ASSERT(kvp.ne[0] == w2 && sc.ne[0] == w2 && state_kv.ne[0] == w2 &&
                        state_kv.n_rows() == (overlap ? 2 * R : R) && rows.ne[0] == d &&
                        p.rope.n_rot <= kMaxRot,
                    "compressor: shapes");
    double omega[kMaxRot / 2];
    cpu::rope_freqs(p.rope, omega);
    // Sequential over tokens (the frontier is a state machine); the scratch of thread 0 holds
    // one ape row and the pooled row.
    float* ape_row = scratch(0);
    float* pooled = ape_row + w2;
    float cs[kMaxRot];
    const int64_t n = kvp.n_rows();
    for (int64_t t = 0; t < n; ++t) {
        const int64_t pos = p.p0 + t;
        const int64_t slot = overlap ? R + pos % R : pos % R;
        cpu::dequant_row(ape, pos % R, ape_row);
        float* skv = state_kv.f32_row(slot);
        float* ssc = state_score.f32_row(slot);
        const float* kt = kvp.f32_row(t);
        const float* st = sc.f32_row(t);
        for (int64_t i = 0; i < w2; ++i) {
            skv[i] = kt[i];
            ssc[i] = st[i] + ape_row[i];
        }
        if ((pos + 1) % R != 0) continue;

        // Pool every channel: ratio 4 takes lane A (channels 0..d-1) of the previous block
        // (rows 0..3) and lane B (channels d..2d-1) of this block (rows 4..7); ratio 128 the
        // single lane of rows 0..127. Previous-block scores start at -inf (weight 0).
        const int64_t n_cand = overlap ? 2 * R : R;
        for (int64_t i = 0; i < d; ++i) {
            auto chan = [&](int64_t c) { return overlap && c >= R ? d + i : i; };
            float mx = -std::numeric_limits<float>::infinity();
            for (int64_t c = 0; c < n_cand; ++c) mx = std::max(mx, state_score.f32_row(c)[chan(c)]);
            float den = 0.0f, acc = 0.0f;
            for (int64_t c = 0; c < n_cand; ++c) {
                const float e = std::exp(state_score.f32_row(c)[chan(c)] - mx);
                den += e;
                acc += e * state_kv.f32_row(c)[chan(c)];
            }
            pooled[i] = acc / den;
        }
        const int64_t row = (pos + 1) / R - 1;
        float* out = rows.f32_row(row);
        cpu::rms_norm_row(pooled, norm.f32(), out, d, p.norm_eps);
        cpu::rope_angles(omega, p.rope.n_rot, row * R, false, cs);
        cpu::rope_apply(out, static_cast<uint32_t>(d), p.rope.n_rot, cs);
        if (p.indexer_qat) {
            cpu::hadamard(out, d);
            cpu::fp4_roundtrip(out, d);
        } else {
            cpu::fp8_roundtrip(out, p.n_nope);
        }
        if (overlap) {
            // The current block becomes the previous one.
            for (int64_t c = 0; c < R; ++c) {
                std::memcpy(state_kv.f32_row(c), state_kv.f32_row(R + c),
                            static_cast<size_t>(w2) * 4);
                std::memcpy(state_score.f32_row(c), state_score.f32_row(R + c),
                            static_cast<size_t>(w2) * 4);
            }
        }
    }
}

void cpu_backend::indexer_topk(const indexer_params& p, const tensor& qi, const tensor& wgt,
                               const tensor& rows, const tensor& sel) {
    const op_timer timer(*this, "indexer");
    const int64_t K = p.top_k;
    const int64_t hd = p.head_dim;
    const int64_t nh = p.n_head;
    MAGNETAR_ASSERT(qi.ne[0] == nh * hd && wgt.ne[0] == nh && rows.ne[0] == hd && sel.ne[0] == K,
                    "indexer_topk: shapes");
    // Score of compressed row s for token t: sum over heads of w_h * relu(q_h . k_s), by the
    // SIMD library's kernel (two rows against two heads per pass; the same bits at every ISA
    // level and for any split of the rows). Each score is computed by the same code whichever
    // thread runs it.
    MAGNETAR_ASSERT(rows.nb[0] == sizeof(float) && rows.nb[1] % sizeof(float) == 0,
                    "indexer_topk: key rows must be F32");
    const cpu::simd::index_scores_fn index_scores = cpu::simd::index_scores();
    const int64_t key_stride = static_cast<int64_t>(rows.nb[1] / sizeof(float));
    auto score_rows = [&](int64_t t, int64_t s0, int64_t s1, float* score) {
        index_scores(qi.f32_row(t), wgt.f32_row(t), p.weight_scale, nh, hd, rows.f32_row(s0),
                     key_stride, s1 - s0, score + s0);
    };
    // The K best of n_vis scores (higher first, then lower index), written in ascending order.
    auto select = [&](int64_t n_vis, float* score, int32_t* idx, int32_t* out) {
        for (int64_t s = 0; s < n_vis; ++s) idx[s] = static_cast<int32_t>(s);
        auto better = [&](int32_t a, int32_t b) {
            return score[a] > score[b] || (score[a] == score[b] && a < b);
        };
        std::nth_element(idx, idx + (K - 1), idx + n_vis, better);
        std::sort(idx, idx + K);
        std::copy(idx, idx + K, out);
    };
    // Rows token t scores, or 0 when it attends every visible row (its selection is all -1).
    auto scored_rows = [&](int64_t t) -> int64_t {
        const int64_t n_vis = (p.p0 + t + 1) / p.ratio;
        if (n_vis <= K) {
            std::fill_n(sel.i32_row(t), K, -1);
            return 0;
        }
        MAGNETAR_ASSERT(static_cast<size_t>(n_vis) <= scratch_floats_ / 2,
                        "indexer scratch too small");
        return n_vis;
    };
    const int64_t n_tok = qi.n_rows();
    if (n_tok < pool_.size()) {
        // Decode (fewer tokens than threads): the rows of each token are scored by every thread
        // (disjoint ranges into thread 0's scratch), then selected on the caller; the scoring
        // grows with the context, and one thread alone would make long-context decode slower.
        float* score = scratch(0);
        auto* idx = reinterpret_cast<int32_t*>(score + (scratch_floats_ / 2));
        for (int64_t t = 0; t < n_tok; ++t) {
            const int64_t n_vis = scored_rows(t);
            if (n_vis == 0) continue;
            pool_.parallel_for(
                n_vis, [&](int64_t s0, int64_t s1, int) { score_rows(t, s0, s1, score); }, 64);
            select(n_vis, score, idx, sel.i32_row(t));
        }
        return;
    }
    pool_.parallel_for(
        n_tok,
        [&](int64_t t0, int64_t t1, int th) {
            float* score = scratch(th);
            auto* idx = reinterpret_cast<int32_t*>(score + (scratch_floats_ / 2));
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t n_vis = scored_rows(t);
                if (n_vis == 0) continue;
                score_rows(t, 0, n_vis, score);
                select(n_vis, score, idx, sel.i32_row(t));
            }
        },
        1);
}

namespace {

// o[h][i] = sum over keys k, in increasing k, of e[h][k] * keys[k][i] for M heads, each output
// element a chain of products and sums from 0 in key order (as adding key after key into a
// zeroed row), two keys per pass over the output rows: half the loads and stores of the rows,
// the same operations per element, so the same bits. (Keeping 16 elements' sums in registers
// across all keys instead measured slower: it walks the 640 key rows of a token once per 16
// elements.)
template <int M>  // 1 or 2
void weighted_sum(const float* const* keys, int64_t n_keys, float* const* e, int64_t hd,
                  float* const* o) {
    for (int h = 0; h < M; ++h) std::fill_n(o[h], hd, 0.0f);
    int64_t k = 0;
    float* o0 = o[0];
    float* o1 = o[M - 1];
    for (; k + 2 <= n_keys; k += 2) {
        const float* v0 = keys[k];
        const float* v1 = keys[k + 1];
        const float a0 = e[0][k], a1 = e[0][k + 1];
        const float b0 = e[M - 1][k], b1 = e[M - 1][k + 1];
        for (int64_t i = 0; i < hd; ++i) {
            o0[i] = (o0[i] + a0 * v0[i]) + a1 * v1[i];
            if constexpr (M == 2) o1[i] = (o1[i] + b0 * v0[i]) + b1 * v1[i];
        }
    }
    for (; k < n_keys; ++k) {
        const float* v = keys[k];
        const float a = e[0][k], b = e[M - 1][k];
        for (int64_t i = 0; i < hd; ++i) {
            o0[i] += a * v[i];
            if constexpr (M == 2) o1[i] += b * v[i];
        }
    }
}

}  // namespace

void cpu_backend::sparse_attention(const attention_params& p, const tensor& q, const tensor& kv,
                                   const tensor& ring, const tensor& comp, const tensor& sel,
                                   const tensor& sinks, const tensor& out) {
    const op_timer timer(*this, "attention");
    const int64_t hd = p.head_dim;
    const int64_t H = p.n_head;
    const int64_t n = q.n_rows();
    const int64_t cap = ring.n_rows();
    MAGNETAR_ASSERT(q.ne[0] == H * hd && kv.ne[0] == hd && out.ne[0] == H * hd,
                    "sparse_attention: shapes");
    const float* sink = sinks.f32();
    // Work units of two heads of one token: both heads read the same keys and values, so a
    // pair shares every load (dot_f32_x2, one pass of the weighted sums). Each head's
    // arithmetic is exactly what it is alone, so pairing changes no bit.
    const int64_t HP = (H + 1) / 2;
    pool_.parallel_for(
        n * HP,
        [&](int64_t j0, int64_t j1, int th) {
            float* w = scratch(th);
            for (int64_t j = j0; j < j1; ++j) {
                const int64_t t = j / HP;
                const int64_t h0 = 2 * (j % HP);
                const int64_t pos = p.p0 + t;
                // Key list: raw window (ascending position) then compressed rows (ascending index).
                auto raw_key = [&](int64_t kp) -> const float* {
                    return kp >= p.p0 ? kv.f32_row(kp - p.p0) : ring.f32_row(kp % cap);
                };
                const int64_t lo = std::max<int64_t>(0, pos - p.window + 1);
                const int64_t n_raw = pos - lo + 1;
                int64_t n_comp = 0;
                const int32_t* chosen = nullptr;
                if (p.ratio != 0) {
                    n_comp = (pos + 1) / p.ratio;
                    if (p.ratio == 4 && n_comp > p.top_k) {
                        n_comp = p.top_k;
                        chosen = sel.i32_row(t);
                    }
                }
                auto key_at = [&](int64_t k) -> const float* {
                    return k < n_raw ? raw_key(lo + k)
                                     : comp.f32_row(chosen ? chosen[k - n_raw] : k - n_raw);
                };
                const int64_t n_keys = n_raw + n_comp;
                const int64_t n_heads = std::min<int64_t>(2, H - h0);
                // Scratch: the keys' row pointers (two floats each), then the score rows of both
                // heads side by side when the scratch holds them, else one head at a time (the
                // same results).
                MAGNETAR_ASSERT(static_cast<size_t>(3 * n_keys) <= scratch_floats_,
                                "attention scratch too small");
                const bool pair =
                    n_heads == 2 && static_cast<size_t>(4 * n_keys) <= scratch_floats_;
                auto** keys = reinterpret_cast<const float**>(w);
                for (int64_t k = 0; k < n_keys; ++k) keys[k] = key_at(k);
                float* scores = w + 2 * n_keys;
                for (int64_t h = h0; h < h0 + n_heads; h += pair ? 2 : 1) {
                    const int64_t m = pair ? 2 : 1;
                    const float* qh[2] = {q.f32_row(t) + h * hd, q.f32_row(t) + (h + m - 1) * hd};
                    float* wh[2] = {scores, scores + (m - 1) * n_keys};
                    float mx[2] = {sink[h], sink[h + m - 1]};
                    for (int64_t k = 0; k < n_keys; ++k) {
                        float d[2];
                        if (m == 2) {
                            cpu::dot_f32_x2(qh[0], qh[1], keys[k], hd, d);
                        } else {
                            d[0] = cpu::dot_f32(qh[0], keys[k], hd);
                        }
                        for (int64_t i = 0; i < m; ++i) {
                            wh[i][k] = d[i] * p.scale;
                            mx[i] = std::max(mx[i], wh[i][k]);
                        }
                    }
                    float den[2];
                    for (int64_t i = 0; i < m; ++i) {
                        den[i] = std::exp(sink[h + i] - mx[i]);
                        for (int64_t k = 0; k < n_keys; ++k) {
                            wh[i][k] = std::exp(wh[i][k] - mx[i]);
                            den[i] += wh[i][k];
                        }
                    }
                    float* o[2] = {out.f32_row(t) + h * hd, out.f32_row(t) + (h + m - 1) * hd};
                    if (m == 2) {
                        weighted_sum<2>(keys, n_keys, wh, hd, o);
                    } else {
                        weighted_sum<1>(keys, n_keys, wh, hd, o);
                    }
                    for (int64_t i = 0; i < m; ++i) {
                        const float inv = 1.0f / den[i];
                        for (int64_t e = 0; e < hd; ++e) o[i][e] *= inv;
                    }
                }
            }
        },
        1);
}

}  // namespace magnetar::backend
