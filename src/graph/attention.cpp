// The attention sub-layer (spec model.md §5.3): low-rank queries, the shared KV latent, the
// compressors and the lightning indexer of compressed layers, sparse attention with sinks,
// inverse RoPE and the grouped low-rank output projection.
#include <cmath>

#include "graph/context.h"

namespace magnetar::graph {

namespace {

using backend::compressor_params;

// Queries [n, H*hd] after the per-head norm and RoPE; qr [n, q_lora] is returned for the
// indexer.
tensor queries(const chunk_ctx& c, const layer_weights& lw, const backend::rope_params& rope,
               const tensor& x, tensor* qr_out) {
    const hparams& hp = c.hp;
    tensor qr = c.ar.alloc_f32(hp.n_q_lora, c.n);  // [n, q_lora]
    c.be.matmul(weight_tensor(lw.attn_q_a), x, qr);
    c.be.rms_norm(qr, weight_tensor(lw.attn_q_a_norm), qr, hp.n_q_lora, hp.rms_eps);
    c.tap(qr, "q_lora");
    tensor q = c.ar.alloc_f32(static_cast<int64_t>(hp.n_head) * hp.n_head_dim, c.n);  // [n, H*hd]
    c.be.matmul(weight_tensor(lw.attn_q_b), qr, q);
    c.be.rms_norm(q, tensor{}, q, hp.n_head_dim, hp.rms_eps);
    c.be.rope_tail(q, hp.n_head_dim, rope, c.p0, false);
    c.tap(q, "q");
    *qr_out = qr;
    return q;
}

// The KV row of each token [n, hd]: norm, RoPE on the tail, FP8 round trip of the rest.
tensor kv_rows(const chunk_ctx& c, const layer_weights& lw, const backend::rope_params& rope,
               const tensor& x) {
    const hparams& hp = c.hp;
    tensor kv = c.ar.alloc_f32(hp.n_head_dim, c.n);  // [n, hd]
    c.be.matmul(weight_tensor(lw.attn_kv), x, kv);
    c.be.rms_norm(kv, weight_tensor(lw.attn_kv_a_norm), kv, hp.n_head_dim, hp.rms_eps);
    c.be.rope_tail(kv, hp.n_head_dim, rope, c.p0, false);
    c.be.fp8_kv_roundtrip(kv, hp.n_nope());
    c.tap(kv, "kv");
    return kv;
}

// Projects the chunk for one compressor lane and streams it through the frontier.
void compress(const chunk_ctx& c, const compressor_params& p, const weight& wkv,
              const weight& wgate, const weight& ape, const weight& norm, const tensor& x,
              const tensor& state_kv, const tensor& state_score, const tensor& rows) {
    const int64_t w2 = static_cast<int64_t>(hparams::coff(p.ratio)) * p.width;
    tensor kvp = c.ar.alloc_f32(w2, c.n);  // [n, coff*d]
    tensor sc = c.ar.alloc_f32(w2, c.n);   // [n, coff*d]
    c.be.matmul(weight_tensor(wkv), x, kvp);
    c.be.matmul(weight_tensor(wgate), x, sc);
    c.be.compressor(p, kvp, sc, weight_tensor(ape), weight_tensor(norm), state_kv, state_score,
                    rows);
}

// Indexer selection [n, K] (I32): the top-k compressed rows per query, -1 where all fit.
tensor indexer(const chunk_ctx& c, const layer_weights& lw, kv::layer_state& st,
               const backend::rope_params& rope, const tensor& x, const tensor& qr) {
    const hparams& hp = c.hp;
    const int64_t ih = hp.n_indexer_head;
    const int64_t id = hp.n_indexer_head_dim;
    tensor sel = c.ar.alloc(ggml_type::I32, hp.n_indexer_top_k, c.n);  // [n, K]
    tensor qi = c.ar.alloc_f32(ih * id, c.n);                          // [n, IH*Id]
    tensor wgt = c.ar.alloc_f32(ih, c.n);                              // [n, IH]
    // Scoring is needed only once some query sees more rows than the budget (positions only).
    const int64_t last_vis = (c.p0 + c.n) / 4;
    if (last_vis > static_cast<int64_t>(hp.n_indexer_top_k)) {
        c.be.matmul(weight_tensor(lw.idx_q_b), qr, qi);
        c.be.rope_tail(qi, hp.n_indexer_head_dim, rope, c.p0, false);
        c.be.indexer_qat(qi, hp.n_indexer_head_dim);
        c.be.matmul(weight_tensor(lw.idx_proj), x, wgt);
    }
    backend::indexer_params ip;
    ip.p0 = c.p0;
    ip.ratio = 4;
    ip.top_k = hp.n_indexer_top_k;
    ip.n_head = hp.n_indexer_head;
    ip.head_dim = hp.n_indexer_head_dim;
    ip.weight_scale =
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(id) * static_cast<double>(ih)));
    c.be.indexer_topk(ip, qi, wgt, st.idx_rows, sel);
    c.tap(sel, "index_topk");
    return sel;
}

// Grouped low-rank output (spec §5.3g): o [n, H*hd] -> [n, D].
tensor output(const chunk_ctx& c, const layer_weights& lw, const tensor& o) {
    const hparams& hp = c.hp;
    const int64_t G = hp.n_o_group;
    const int64_t lora = hp.n_o_lora;
    const int64_t gin = hp.o_group_in();
    c.tap(o, "attn_o");
    tensor z = c.ar.alloc_f32(G * lora, c.n);  // [n, G*o_lora]
    const tensor wa = weight_tensor(lw.attn_output_a);
    for (int64_t g = 0; g < G; ++g) {
        // Group g: heads g*H/G .. , i.e. columns g*gin of o, through rows g*lora of wo_a.
        c.be.matmul(view_rows(wa, g * lora, lora), view_cols(o, g * gin, gin),
                    view_cols(z, g * lora, lora));
    }
    c.tap(z, "attn_o_lora");
    tensor out = c.ar.alloc_f32(hp.n_embd, c.n);  // [n, D]
    c.be.matmul(weight_tensor(lw.attn_output_b), z, out);
    return out;
}

}  // namespace

tensor attention(const chunk_ctx& c, const layer_weights& lw, kv::layer_state& st,
                 const tensor& x) {
    const hparams& hp = c.hp;
    const uint32_t ratio = st.ratio;
    const backend::rope_params rope = rope_for(hp, ratio);

    tensor qr;
    const tensor q = queries(c, lw, rope, x, &qr);  // [n, H*hd]
    const tensor kv = kv_rows(c, lw, rope, x);      // [n, hd]

    tensor sel;
    if (ratio != 0) {
        compressor_params cp;
        cp.ratio = ratio;
        cp.width = hp.n_head_dim;
        cp.p0 = c.p0;
        cp.norm_eps = hp.rms_eps;
        cp.rope = rope;
        cp.n_nope = hp.n_nope();
        compress(c, cp, lw.comp_kv, lw.comp_gate, lw.comp_ape, lw.comp_norm, x, st.comp_kv,
                 st.comp_score, st.comp_rows);
        if (ratio == 4) {
            compressor_params ip = cp;
            ip.width = hp.n_indexer_head_dim;
            ip.indexer_qat = true;
            ip.n_nope = 0;
            compress(c, ip, lw.idx_comp_kv, lw.idx_comp_gate, lw.idx_comp_ape, lw.idx_comp_norm, x,
                     st.idx_kv, st.idx_score, st.idx_rows);
            sel = indexer(c, lw, st, rope, x, qr);
        }
    }

    backend::attention_params ap;
    ap.p0 = c.p0;
    ap.n_head = hp.n_head;
    ap.head_dim = hp.n_head_dim;
    ap.window = hp.n_swa;
    ap.ratio = ratio;
    ap.top_k = hp.n_indexer_top_k;
    ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hp.n_head_dim)));
    tensor o = c.ar.alloc_f32(static_cast<int64_t>(hp.n_head) * hp.n_head_dim, c.n);  // [n, H*hd]
    c.be.sparse_attention(ap, q, kv, st.raw, st.comp_rows, sel, weight_tensor(lw.attn_sinks), o);
    // The chunk's rows enter the ring only after every query of the chunk has attended.
    c.be.kv_store(kv, st.raw, c.p0);
    c.be.rope_tail(o, hp.n_head_dim, rope, c.p0, true);
    return output(c, lw, o);
}

}  // namespace magnetar::graph
