// CPU backend: expert routing and the routed experts (spec model.md §5.5).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"

namespace magnetar::backend {

namespace {

constexpr uint32_t kMaxUsed = 64;

}  // namespace

void cpu_backend::router(const router_params& p, const tensor& logits, const tensor& bias,
                         const tensor& tid2eid, const tensor& ids, const tensor& sel,
                         const tensor& weights) {
    const op_timer timer(*this, "router");
    const int64_t E = logits.ne[0];
    const uint32_t k = p.n_used;
    MAGNETAR_ASSERT(k <= kMaxUsed && sel.ne[0] == k && weights.ne[0] == k, "router: shapes");
    const float* b = bias ? bias.f32() : nullptr;
    pool_.parallel_for(
        logits.n_rows(),
        [&](int64_t t0, int64_t t1, int th) {
            float* score = scratch(th);  // [E]
            for (int64_t t = t0; t < t1; ++t) {
                const float* lg = logits.f32_row(t);
                for (int64_t e = 0; e < E; ++e) score[e] = std::sqrt(cpu::softplus(lg[e]));
                int32_t* s = sel.i32_row(t);
                if (tid2eid) {
                    std::memcpy(s, tid2eid.i32_row(ids.i32()[t]), k * sizeof(int32_t));
                } else {
                    // k passes of an arg-max over score + bias; strict '>' keeps the lower id on
                    // ties.
                    for (uint32_t i = 0; i < k; ++i) {
                        int32_t best = -1;
                        float best_v = 0.0f;
                        for (int64_t e = 0; e < E; ++e) {
                            if (std::find(s, s + i, static_cast<int32_t>(e)) != s + i) continue;
                            const float v = b ? score[e] + b[e] : score[e];
                            if (best < 0 || v > best_v) {
                                best = static_cast<int32_t>(e);
                                best_v = v;
                            }
                        }
                        s[i] = best;
                    }
                }
                float* w = weights.f32_row(t);
                float sum = 0.0f;
                for (uint32_t i = 0; i < k; ++i) {
                    w[i] = score[s[i]];
                    sum += w[i];
                }
                const float den = std::max(sum, 6.103515625e-5f);
                for (uint32_t i = 0; i < k; ++i) w[i] = (p.normalize ? w[i] / den : w[i]) * p.scale;
            }
        },
        1);
}

void cpu_backend::moe(const tensor& x, const tensor& sel, const tensor& weights,
                      const moe_weights& w, float clamp, const tensor& out,
                      const moe_workspace& ws) {
    const op_timer timer(*this, kMoeTimer, "(gather, SwiGLU, sum)");
    const int64_t n = x.n_rows();
    const int64_t k = sel.ne[0];
    const int64_t E = w.gate_exps.ne[2];
    const int64_t D = x.ne[0];
    const int64_t F = w.gate_exps.ne[1];
    MAGNETAR_ASSERT(ws.slots.ne[0] >= 2 * n * k + E + 1 && ws.xg.n_rows() >= n * k,
                    "moe: workspace");
    // Counting sort of the n*k (token, slot) pairs by expert, keeping (token, slot) order within
    // an expert: order[j] = slot id t*k+i, row_of[t*k+i] = its row in the sorted order.
    int32_t* order = ws.slots.i32();
    int32_t* row_of = order + n * k;
    int32_t* start = row_of + n * k;  // [E + 1]
    cpu::sort_slots_by_expert(sel, E, order, row_of, start);

    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = start[e];
        const int64_t cnt = start[e + 1] - r0;
        if (cnt == 0) continue;
        const tensor xg = view_rows(ws.xg, r0, cnt);      // [cnt, D]
        const tensor g = view_rows(ws.g, r0, cnt);        // [cnt, F]
        const tensor u = view_rows(ws.u, r0, cnt);        // [cnt, F]
        const tensor c = view_rows(ws.contrib, r0, cnt);  // [cnt, D]
        for (int64_t j = 0; j < cnt; ++j) {
            std::memcpy(xg.f32_row(j), x.f32_row(order[r0 + j] / k), static_cast<size_t>(D) * 4);
        }
        matmul(cpu::expert_view(w.gate_exps, e), xg, g);
        matmul(cpu::expert_view(w.up_exps, e), xg, u);
        for (int64_t j = 0; j < cnt; ++j) {
            const int32_t slot = order[r0 + j];
            const float wt = weights.f32_row(slot / k)[slot % k];
            float* gr = g.f32_row(j);
            const float* ur = u.f32_row(j);
            for (int64_t i = 0; i < F; ++i) gr[i] = wt * cpu::swiglu_clamped(gr[i], ur[i], clamp);
        }
        matmul(cpu::expert_view(w.down_exps, e), g, c);
    }
    // Sum each token's slots in slot order.
    pool_.parallel_for(
        n,
        [&](int64_t t0, int64_t t1, int) {
            for (int64_t t = t0; t < t1; ++t) {
                float* o = out.f32_row(t);
                const float* c0 = ws.contrib.f32_row(row_of[t * k]);
                std::memcpy(o, c0, static_cast<size_t>(D) * 4);
                for (int64_t i = 1; i < k; ++i) {
                    const float* ci = ws.contrib.f32_row(row_of[t * k + i]);
                    for (int64_t d = 0; d < D; ++d) o[d] += ci[d];
                }
            }
        },
        1);
}

}  // namespace magnetar::backend
