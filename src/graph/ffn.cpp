// The MoE FFN sub-layer (spec model.md §5.5): router (hash-routed or biased top-k selection,
// weights from the unbiased scores), routed experts and the shared expert, all with the
// clamped SwiGLU.
#include "graph/context.h"

namespace magnetar::graph {

namespace {

float swiglu_clamp_of(const hparams& hp, uint32_t il) {
    if (il < hp.swiglu_clamp.size()) return hp.swiglu_clamp[il];
    return hp.swiglu_clamp.back();
}

// Shared expert [n, D].
tensor shared_expert(const chunk_ctx& c, const layer_weights& lw, const tensor& x, float clamp) {
    const hparams& hp = c.hp;
    tensor g = c.ar.alloc_f32(hp.n_ff_exp, c.n);  // [n, F]
    tensor u = c.ar.alloc_f32(hp.n_ff_exp, c.n);  // [n, F]
    c.be.matmul(weight_tensor(lw.ffn_gate_shexp), x, g);
    c.be.matmul(weight_tensor(lw.ffn_up_shexp), x, u);
    c.be.swiglu(g, u, g, clamp);
    c.tap(g, "shexp_swiglu");
    tensor out = c.ar.alloc_f32(hp.n_embd, c.n);  // [n, D]
    c.be.matmul(weight_tensor(lw.ffn_down_shexp), g, out);
    return out;
}

// Diagnostic tap `moe_swiglu` [n, k*F]: per token, for each selected expert in selection order,
// the SwiGLU output that expert's down projection multiplies, before the routing weight (the
// engine folds the weight in before `down`; importance data, like llama.cpp's, wants it
// without). Runs the experts once with unit weights before the real pass, so it costs one more
// MoE pass, and only when the tap is wanted. It takes no scratch of its own (the measured
// arena has none for taps): the unit weights live in the router logits, no longer needed, the
// pass writes `out` and `ws`, which the real pass then overwrites, and the rows are put in
// slot order into ws.u.
void tap_moe_swiglu(const chunk_ctx& c, const tensor& x, const tensor& sel, const tensor& logits,
                    const backend::moe_weights& mw, float clamp, const tensor& out,
                    const backend::moe_workspace& ws) {
    const hparams& hp = c.hp;
    const int64_t k = hp.n_expert_used;
    const int64_t F = hp.n_ff_exp;
    const int64_t nk = c.n * k;
    const tensor ones = make_tensor(logits.data, ggml_type::F32, k, c.n);  // [n, k] (k <= E)
    c.be.fill(ones, 1.0f);
    c.be.moe(x, sel, ones, mw, clamp, out, ws);
    // ws.g holds the rows in expert-sorted order; slots[nk .. 2nk) maps slot t*k+i to its row.
    const tensor row_of =
        make_tensor(ws.slots.data ? ws.slots.i32() + nk : nullptr, ggml_type::I32, nk);  // [n*k]
    const tensor by_slot = view_rows(ws.u, 0, nk);                                       // [n*k, F]
    c.be.get_rows(view_rows(ws.g, 0, nk), row_of, by_slot, 1);
    c.tap(reshape(by_slot, k * F, c.n), "moe_swiglu");  // [n, k*F]
}

}  // namespace

tensor ffn(const chunk_ctx& c, const layer_weights& lw, const tensor& x) {
    const hparams& hp = c.hp;
    const int64_t k = hp.n_expert_used;
    const float clamp = swiglu_clamp_of(hp, lw.il);

    tensor logits = c.ar.alloc_f32(hp.n_expert, c.n);  // [n, E]
    c.be.matmul(weight_tensor(lw.ffn_gate_inp), x, logits);
    tensor sel = c.ar.alloc(ggml_type::I32, k, c.n);  // [n, k]
    tensor wts = c.ar.alloc_f32(k, c.n);              // [n, k]
    backend::router_params rp;
    rp.n_used = hp.n_expert_used;
    rp.scale = hp.expert_weights_scale;
    rp.normalize = hp.expert_weights_norm;
    // Hash layers take the table's experts; any selection bias there is ignored (spec §12.9).
    const bool hash = lw.hash_routed;
    c.be.router(rp, logits, hash ? tensor{} : weight_tensor(lw.exp_probs_b),
                hash ? weight_tensor(lw.ffn_gate_tid2eid) : tensor{}, c.ids, sel, wts);
    c.tap(sel, "moe_sel");
    c.tap(wts, "moe_weights");

    backend::moe_weights mw{weight_tensor(lw.ffn_gate_exps), weight_tensor(lw.ffn_up_exps),
                            weight_tensor(lw.ffn_down_exps)};
    backend::moe_workspace ws;
    ws.xg = c.ar.alloc_f32(hp.n_embd, c.n * k);       // [n*k, D]
    ws.g = c.ar.alloc_f32(hp.n_ff_exp, c.n * k);      // [n*k, F]
    ws.u = c.ar.alloc_f32(hp.n_ff_exp, c.n * k);      // [n*k, F]
    ws.contrib = c.ar.alloc_f32(hp.n_embd, c.n * k);  // [n*k, D]
    ws.slots = c.ar.alloc(ggml_type::I32, 2 * c.n * k + hp.n_expert + 1);
    tensor routed = c.ar.alloc_f32(hp.n_embd, c.n);  // [n, D]
    if (c.dump && c.dump->wants(c.prefix + "moe_swiglu"))
        tap_moe_swiglu(c, x, sel, logits, mw, clamp, routed, ws);
    c.be.moe(x, sel, wts, mw, clamp, routed, ws);

    tensor shared = shared_expert(c, lw, x, clamp);
    tensor out = c.ar.alloc_f32(hp.n_embd, c.n);  // [n, D]
    c.be.add(routed, shared, out, 1);
    return out;
}

}  // namespace magnetar::graph
