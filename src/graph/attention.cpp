// The attention sub-layer (spec model.md §5.3): low-rank queries, the shared KV latent, the
// compressors and the lightning indexer of compressed layers, sparse attention with sinks,
// inverse RoPE and the grouped low-rank output projection.
#include <cmath>

#include "graph/context.h"

namespace magnetar::graph {

namespace {

using backend::compressor_params;

// RoPE on the tail of every row, each sequence's rows at its own positions.
void rope_rows(const chunk_ctx& c, const tensor& t, int64_t head_dim,
               const backend::rope_params& rope, bool inverse) {
    for (const seq_rows& s : c.seqs)
        c.be.rope_tail(view_rows(t, s.row0, s.n), head_dim, rope, s.p0, inverse);
}

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
    rope_rows(c, q, hp.n_head_dim, rope, false);
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
    rope_rows(c, kv, hp.n_head_dim, rope, false);
    c.be.fp8_kv_roundtrip(kv, hp.n_nope());
    c.tap(kv, "kv");
    return kv;
}

// Projects the rows for one compressor lane and streams each sequence's rows through its
// frontier (lane: which of the layer state's tensors).
struct lane {
    tensor kv::layer_state::*state_kv;
    tensor kv::layer_state::*state_score;
    tensor kv::layer_state::*rows;
};

void compress(const chunk_ctx& c, uint32_t il, compressor_params p, const weight& wkv,
              const weight& wgate, const weight& ape, const weight& norm, const tensor& x,
              const lane& ln) {
    const int64_t w2 = static_cast<int64_t>(hparams::coff(p.ratio)) * p.width;
    tensor kvp = c.ar.alloc_f32(w2, c.n);  // [n, coff*d]
    tensor sc = c.ar.alloc_f32(w2, c.n);   // [n, coff*d]
    c.be.matmul(weight_tensor(wkv), x, kvp);
    c.be.matmul(weight_tensor(wgate), x, sc);
    for (const seq_rows& s : c.seqs) {
        kv::layer_state& st = s.cache->layer(il);
        p.p0 = s.p0;
        c.be.compressor(p, view_rows(kvp, s.row0, s.n), view_rows(sc, s.row0, s.n),
                        weight_tensor(ape), weight_tensor(norm), st.*ln.state_kv,
                        st.*ln.state_score, st.*ln.rows);
    }
}

// Indexer selection [n, K] (I32): the top-k compressed rows per query, -1 where all fit.
tensor indexer(const chunk_ctx& c, const layer_weights& lw, uint32_t il,
               const backend::rope_params& rope, const tensor& x, const tensor& qr) {
    const hparams& hp = c.hp;
    const int64_t ih = hp.n_indexer_head;
    const int64_t id = hp.n_indexer_head_dim;
    tensor sel = c.ar.alloc(ggml_type::I32, hp.n_indexer_top_k, c.n);  // [n, K]
    tensor qi = c.ar.alloc_f32(ih * id, c.n);                          // [n, IH*Id]
    tensor wgt = c.ar.alloc_f32(ih, c.n);                              // [n, IH]
    // Scoring is needed only once some query sees more rows than the budget (positions only;
    // the selection of a query that sees no more never reads its scores).
    bool scored = false;
    for (const seq_rows& s : c.seqs)
        scored = scored || (s.p0 + s.n) / 4 > static_cast<int64_t>(hp.n_indexer_top_k);
    if (scored) {
        c.be.matmul(weight_tensor(lw.idx_q_b), qr, qi);
        rope_rows(c, qi, hp.n_indexer_head_dim, rope, false);
        c.be.indexer_qat(qi, hp.n_indexer_head_dim);
        c.be.matmul(weight_tensor(lw.idx_proj), x, wgt);
    }
    backend::indexer_params ip;
    ip.ratio = 4;
    ip.top_k = hp.n_indexer_top_k;
    ip.n_head = hp.n_indexer_head;
    ip.head_dim = hp.n_indexer_head_dim;
    ip.weight_scale =
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(id) * static_cast<double>(ih)));
    for (const seq_rows& s : c.seqs) {
        ip.p0 = s.p0;
        c.be.indexer_topk(ip, view_rows(qi, s.row0, s.n), view_rows(wgt, s.row0, s.n),
                          s.cache->layer(il).idx_rows, view_rows(sel, s.row0, s.n));
    }
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

tensor attention(const chunk_ctx& c, const layer_weights& lw, uint32_t il, const tensor& x) {
    const hparams& hp = c.hp;
    const uint32_t ratio = c.seqs.front().cache->layer(il).ratio;
    const backend::rope_params rope = rope_for(hp, ratio);

    tensor qr;
    const tensor q = queries(c, lw, rope, x, &qr);  // [n, H*hd]
    const tensor kv = kv_rows(c, lw, rope, x);      // [n, hd]

    tensor sel;
    if (ratio != 0) {
        compressor_params cp;
        cp.ratio = ratio;
        cp.width = hp.n_head_dim;
        cp.norm_eps = hp.rms_eps;
        cp.rope = rope;
        cp.n_nope = hp.n_nope();
        using st = kv::layer_state;
        compress(c, il, cp, lw.comp_kv, lw.comp_gate, lw.comp_ape, lw.comp_norm, x,
                 {&st::comp_kv, &st::comp_score, &st::comp_rows});
        if (ratio == 4) {
            compressor_params ip = cp;
            ip.width = hp.n_indexer_head_dim;
            ip.indexer_qat = true;
            ip.n_nope = 0;
            compress(c, il, ip, lw.idx_comp_kv, lw.idx_comp_gate, lw.idx_comp_ape, lw.idx_comp_norm,
                     x, {&st::idx_kv, &st::idx_score, &st::idx_rows});
            sel = indexer(c, lw, il, rope, x, qr);
        }
    }

    backend::attention_params ap;
    ap.n_head = hp.n_head;
    ap.head_dim = hp.n_head_dim;
    ap.window = hp.n_swa;
    ap.ratio = ratio;
    ap.top_k = hp.n_indexer_top_k;
    ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hp.n_head_dim)));
    tensor o = c.ar.alloc_f32(static_cast<int64_t>(hp.n_head) * hp.n_head_dim, c.n);  // [n, H*hd]
    for (const seq_rows& s : c.seqs) {
        kv::layer_state& st = s.cache->layer(il);
        ap.p0 = s.p0;
        const tensor kv_s = view_rows(kv, s.row0, s.n);
        c.be.sparse_attention(ap, view_rows(q, s.row0, s.n), kv_s, st.raw, st.comp_rows,
                              sel ? view_rows(sel, s.row0, s.n) : sel, weight_tensor(lw.attn_sinks),
                              view_rows(o, s.row0, s.n));
        // The chunk's rows enter the ring only after every query of the chunk has attended.
        c.be.kv_store(kv_s, st.raw, s.p0);
    }
    rope_rows(c, o, hp.n_head_dim, rope, true);
    return output(c, lw, o);
}

}  // namespace magnetar::graph
