// The forward pass driver: embedding and HC expansion, the layer loop with each block's HC
// pre/post mixes, the output head and the MTP block (spec model.md §5.1-§5.7).
#include "graph/forward.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "backend/null_backend.h"
#include "core/error.h"
#include "core/format.h"
#include "graph/context.h"

namespace magnetar::graph {

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

tensor weight_tensor(const weight& w) {
    if (!w) return tensor{};
    return make_tensor(const_cast<uint8_t*>(w.data), w.type, w.ne[0], w.ne[1], w.ne[2], w.ne[3]);
}

void tap_rows(backend::backend& be, dump_sink* dump, const std::string& name, int64_t p0,
              const tensor& t) {
    if (!dump || !dump->wants(name)) return;
    std::vector<float> host(static_cast<size_t>(t.n_elements()));
    if (t.type == ggml_type::I32) {
        std::vector<int32_t> ids(host.size());
        be.download(t, ids.data());
        std::transform(ids.begin(), ids.end(), host.begin(),
                       [](int32_t v) { return static_cast<float>(v); });
    } else {
        be.download(t, host.data());
    }
    dump->rows(name, p0, t.n_rows(), t.ne[0], host.data());
}

void chunk_ctx::tap(const tensor& t, const char* what) const {
    if (dump) tap_rows(be, dump, prefix + what, p0, t);
}

backend::rope_params rope_for(const hparams& hp, uint32_t ratio) {
    backend::rope_params r;
    r.n_rot = hp.n_rot;
    if (ratio == 0) {
        r.freq_base = hp.rope_freq_base;
        return r;
    }
    r.freq_base = hp.compress_rope_freq_base;
    r.yarn = true;
    r.yarn_factor = hp.rope_scaling_factor;
    r.yarn_orig_ctx = hp.rope_orig_ctx;
    r.beta_fast = hp.yarn_beta_fast;
    r.beta_slow = hp.yarn_beta_slow;
    return r;
}

backend::hc_params hc_for(const hparams& hp) {
    backend::hc_params p;
    p.n_hc = hp.n_hc;
    p.n_embd = hp.n_embd;
    p.norm_eps = hp.rms_eps;
    p.hc_eps = hp.hc_eps;
    p.sinkhorn_iters = hp.n_sinkhorn_iter;
    return p;
}

namespace {

// ---------------------------------------------------------------------------------------------
// HC sites
// ---------------------------------------------------------------------------------------------

struct hc_site {
    const weight& fn;
    const weight& scale;
    const weight& base;
    const weight& norm;
};

struct hc_mix {
    tensor post;  // [n, n_hc]
    tensor comb;  // [n, n_hc*n_hc]
};

// HC pre-mix and the sub-layer norm: returns the sub-layer input [n, D] and the mix that the
// post-mix needs.
tensor hc_pre_norm(const chunk_ctx& c, const hc_site& s, const tensor& x, hc_mix* mix) {
    const hparams& hp = c.hp;
    tensor y = c.ar.alloc_f32(hp.n_embd, c.n);           // [n, D]
    mix->post = c.ar.alloc_f32(hp.n_hc, c.n);            // [n, n_hc]
    mix->comb = c.ar.alloc_f32(hp.n_hc * hp.n_hc, c.n);  // [n, n_hc*n_hc]
    tensor logits = c.ar.alloc_f32(hp.n_hc_mix(), c.n);  // [n, (2+n_hc)*n_hc]
    c.be.hc_pre(hc_for(hp), x, weight_tensor(s.fn), weight_tensor(s.scale), weight_tensor(s.base),
                y, mix->post, mix->comb, logits);
    c.be.rms_norm(y, weight_tensor(s.norm), y, hp.n_embd, hp.rms_eps);
    return y;
}

// ---------------------------------------------------------------------------------------------
// Output head (spec §5.6), shared by the main model and the MTP block
// ---------------------------------------------------------------------------------------------

struct head_weights {
    const weight& fn;
    const weight& scale;
    const weight& base;
    const weight& norm;
    const weight& output;
};

constexpr int64_t kHeadBlock = 32;  // logit rows per head matmul (bounds the scratch)

// Collapses x [n, n_hc*D] and writes logits of every row (all) or of the last row (last) to
// out [rows, n_vocab] on the host.
void head(const chunk_ctx& c, const head_weights& w, const tensor& x, bool all, bool last,
          float* out) {
    const hparams& hp = c.hp;
    const bool dump_norm = c.dump && c.dump->wants(c.prefix + "result_norm");
    if (!all && !last && !dump_norm) return;
    const bool every_row = all || dump_norm;
    const tensor xs = every_row ? x : view_rows(x, c.n - 1, 1);
    const int64_t rows = xs.n_rows();
    tensor h = c.ar.alloc_f32(hp.n_embd, rows);  // [rows, D]
    tensor mix = c.ar.alloc_f32(hp.n_hc, rows);  // [rows, n_hc]
    c.be.hc_collapse(hc_for(hp), xs, weight_tensor(w.fn), weight_tensor(w.scale),
                     weight_tensor(w.base), h, mix);
    c.be.rms_norm(h, weight_tensor(w.norm), h, hp.n_embd, hp.rms_eps);
    if (every_row) c.tap(h, "result_norm");
    if (!all && !last) return;
    const int64_t first = all ? 0 : rows - 1;
    const int64_t count = all ? rows : 1;
    const int64_t block = std::min(kHeadBlock, count);
    tensor lg = c.ar.alloc_f32(hp.n_vocab, block);  // [block, n_vocab]
    const tensor wo = weight_tensor(w.output);
    for (int64_t r = 0; r < count; r += block) {
        const int64_t nb = std::min(block, count - r);
        const tensor lv = view_rows(lg, 0, nb);
        c.be.matmul(wo, view_rows(h, first + r, nb), lv);
        c.be.download(lv, out ? out + r * static_cast<int64_t>(hp.n_vocab) : nullptr);
    }
}

// Token ids [m] starting at row off of ids (keeps null data in measuring passes).
tensor ids_view(const tensor& ids, int64_t off, int64_t m) {
    return make_tensor(ids.data ? ids.i32() + off : nullptr, ggml_type::I32, m);
}

// ---------------------------------------------------------------------------------------------
// MTP block (spec §5.7, §12.4, §12.5)
// ---------------------------------------------------------------------------------------------

// The MTP block over the rows of mc (positions mc.p0 ..): hs [m, n_hc*D] the input states,
// mc.ids the tokens whose embeddings join them. Returns the block's output state [m, n_hc*D].
tensor mtp_block(chunk_ctx& mc, const model_weights& w, const tensor& hs) {
    const hparams& hp = mc.hp;
    const mtp_weights& mw = *w.mtp;
    const int64_t hc_w = static_cast<int64_t>(hp.n_hc) * hp.n_embd;
    const int64_t m = mc.n;
    tensor e = mc.ar.alloc_f32(hp.n_embd, m);  // [m, D]
    mc.be.get_rows(weight_tensor(w.token_embd), mc.ids, e, 1);
    mc.be.rms_norm(e, weight_tensor(mw.enorm), e, hp.n_embd, hp.rms_eps);
    tensor ep = mc.ar.alloc_f32(hp.n_embd, m);  // [m, D]
    mc.be.matmul(weight_tensor(mw.e_proj), e, ep);
    const tensor streams = reshape(hs, hp.n_embd, m * hp.n_hc);  // [m*n_hc, D]
    tensor hn = mc.ar.alloc_f32(hp.n_embd, m * hp.n_hc);         // [m*n_hc, D]
    mc.be.rms_norm(streams, weight_tensor(mw.hnorm), hn, hp.n_embd, hp.rms_eps);
    tensor hproj = mc.ar.alloc_f32(hp.n_embd, m * hp.n_hc);  // [m*n_hc, D]
    mc.be.matmul(weight_tensor(mw.h_proj), hn, hproj);
    tensor xm = mc.ar.alloc_f32(hc_w, m);  // [m, n_hc*D]
    tensor tm = mc.ar.alloc_f32(hc_w, m);  // [m, n_hc*D]
    mc.be.add(hproj, ep, reshape(xm, hp.n_embd, m * hp.n_hc), static_cast<int>(hp.n_hc));

    layer(mc, mw.block, hp.n_layer, xm, tm);
    mc.prefix = "mtp.";
    return xm;
}

head_weights mtp_head(const model_weights& w) {
    const mtp_weights& mw = *w.mtp;
    return {mw.hc_head_fn, mw.hc_head_scale, mw.hc_head_base, mw.norm, w.output};
}

// Advances the MTP block over this chunk. Its row j sits at position q0 + j: the main model's
// final state at that position with the embedding of the token after it. The state of the
// chunk's last position waits in the cache for the next token.
chunk_result mtp(const chunk_ctx& c, const model_weights& w, kv::cache& cache, const tensor& x,
                 const chunk_request& req) {
    const hparams& hp = c.hp;
    const int64_t hc_w = static_cast<int64_t>(hp.n_hc) * hp.n_embd;
    const bool has_prev = c.p0 > 0;
    const int64_t m = has_prev ? c.n : c.n - 1;
    chunk_result res;
    res.mtp_first_pos = has_prev ? c.p0 - 1 : c.p0;
    res.mtp_rows = m;
    if (m > 0) {
        tensor hs = c.ar.alloc_f32(hc_w, m);  // [m, n_hc*D] main final states
        if (has_prev) {
            c.be.copy(cache.mtp_prev_hc(), view_rows(hs, 0, 1));
            if (m > 1) c.be.copy(view_rows(x, 0, m - 1), view_rows(hs, 1, m - 1));
        } else {
            c.be.copy(view_rows(x, 0, m), hs);
        }
        chunk_ctx mc{c.be, hp, c.ar};
        mc.p0 = res.mtp_first_pos;
        mc.n = m;
        mc.ids = ids_view(c.ids, has_prev ? 0 : 1, m);
        const seq_rows seq{0, m, mc.p0, &cache, nullptr};
        mc.seqs = {&seq, 1};
        mc.dump = c.dump;
        mc.prefix = "mtp.";
        const tensor xm = mtp_block(mc, w, hs);
        head(mc, mtp_head(w), xm, req.mtp_logits, false, req.mtp_out);
    }
    c.be.copy(view_rows(x, c.n - 1, 1), cache.mtp_prev_hc());
    return res;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// One transformer block
// ---------------------------------------------------------------------------------------------

namespace {

// Directional steering of the rows of y [n, D] (one sub-layer's output of layer il), each
// sequence by its own scales; the MTP block (il == n_layer) has no direction.
void steer_rows(const chunk_ctx& c, uint32_t il, const tensor& y, bool attn) {
    for (const seq_rows& s : c.seqs) {
        const steering* st = s.steer;
        if (!st || !st->active() || il >= st->directions.size() || !st->directions[il]) continue;
        const float scale = attn ? st->attn : st->ffn;
        if (scale != 0.0f) c.be.project_out(view_rows(y, s.row0, s.n), st->directions[il], scale);
    }
}

}  // namespace

void layer(const chunk_ctx& c, const layer_weights& lw, uint32_t il, const tensor& x,
           const tensor& t) {
    const size_t mark = c.ar.mark();
    hc_mix mix;

    c.tap(x, "hc_attn_in");
    const tensor xa =
        hc_pre_norm(c, {lw.hc_attn_fn, lw.hc_attn_scale, lw.hc_attn_base, lw.attn_norm}, x, &mix);
    c.tap(xa, "attn_norm");
    const tensor a = attention(c, lw, il, xa);  // [n, D]
    steer_rows(c, il, a, true);
    c.tap(a, "attn_out");
    c.be.hc_post(hc_for(c.hp), x, a, mix.post, mix.comb, t);
    c.tap(t, "hc_ffn_in");
    c.ar.reset(mark);

    const tensor xf =
        hc_pre_norm(c, {lw.hc_ffn_fn, lw.hc_ffn_scale, lw.hc_ffn_base, lw.ffn_norm}, t, &mix);
    c.tap(xf, "ffn_norm");
    const tensor f = ffn(c, lw, xf);  // [n, D]
    steer_rows(c, il, f, false);
    c.tap(f, "ffn_out");
    c.be.hc_post(hc_for(c.hp), t, f, mix.post, mix.comb, x);
    c.tap(x, "out");
    c.ar.reset(mark);
}

// ---------------------------------------------------------------------------------------------
// Driver
// ---------------------------------------------------------------------------------------------

backend::limits scratch_limits(const hparams& hp, int64_t n_ctx) {
    backend::limits l;
    l.max_row =
        std::max<int64_t>({static_cast<int64_t>(hp.n_hc) * hp.n_embd, hp.n_embd, hp.n_q_lora,
                           hp.o_group_in(), static_cast<int64_t>(hp.n_o_group) * hp.n_o_lora,
                           hp.n_ff_exp, hp.n_expert, 2 * static_cast<int64_t>(hp.n_head_dim)});
    int64_t comp = 0;
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const uint32_t r = hp.compress_ratio(il);
        if (r == 4)
            comp = std::max<int64_t>(comp, std::min<int64_t>(n_ctx / 4, hp.n_indexer_top_k));
        if (r != 0 && r != 4) comp = std::max<int64_t>(comp, n_ctx / r);
    }
    l.max_keys = hp.n_swa + comp;
    l.max_index_rows = n_ctx / 4;
    return l;
}

size_t measure_arena(const model& m, kv::cache& cache, int64_t chunk, uint32_t layer_begin,
                     uint32_t layer_end, bool mtp) {
    backend::null_backend nb;
    forward probe(m, nb);
    arena measuring = arena::measuring();
    chunk_request req;
    req.p0 = 1;  // a resumed chunk: the MTP block then has one row per token
    req.n = chunk;
    req.logits_all = true;
    req.mtp = mtp;
    req.mtp_logits = mtp;
    req.layer_begin = layer_begin;
    req.layer_end = layer_end;
    probe.run(req, cache, measuring, nullptr);
    return measuring.peak();
}

chunk_result forward::run(const chunk_request& req, kv::cache& cache, arena& ar,
                          dump_sink* dump) const {
    const hparams& hp = m_.hp();
    const model_weights& w = m_.weights();
    const int64_t hc_w = static_cast<int64_t>(hp.n_hc) * hp.n_embd;
    ar.reset();

    chunk_ctx c{be_, hp, ar};
    c.p0 = req.p0;
    c.n = req.n;
    const seq_rows seq{0, req.n, req.p0, &cache, req.steer};
    c.seqs = {&seq, 1};
    c.dump = dump;
    c.ids = ar.alloc(ggml_type::I32, req.n);  // [n]
    be_.upload(c.ids, req.tokens);
    tensor x = ar.alloc_f32(hc_w, req.n);  // [n, n_hc*D] HC state
    tensor t = ar.alloc_f32(hc_w, req.n);  // [n, n_hc*D] scratch state
    const uint32_t l0 = std::min(req.layer_begin, hp.n_layer);
    const uint32_t l1 = std::min(req.layer_end, hp.n_layer);
    if (l0 == 0) {
        be_.get_rows(weight_tensor(w.token_embd), c.ids, x, static_cast<int>(hp.n_hc));
        c.tap(view_cols(x, 0, hp.n_embd), "embd");
    } else {
        be_.upload(x, req.hc_in);
    }

    const size_t mark = ar.mark();
    for (uint32_t il = l0; il < l1; ++il) {
        if (req.cancel && *req.cancel && (*req.cancel)()) {
            be_.synchronize();
            chunk_result res;
            res.cancelled = true;
            return res;
        }
        if (dump) c.prefix = strfmt("blk.%u.", il);
        layer(c, w.layers[il], il, x, t);
        ar.reset(mark);
    }
    c.prefix.clear();
    if (l1 < hp.n_layer) {
        // Not the last stage: the HC state goes on to the next one.
        be_.download(x, req.hc_out);
        return chunk_result{};
    }
    const head_weights hw{w.output_hc_fn, w.output_hc_scale, w.output_hc_base, w.output_norm,
                          w.output};
    if (req.hc_final) be_.download(x, req.hc_final);
    head(c, hw, x, req.logits_all, req.logits_last, req.logits);
    ar.reset(mark);

    chunk_result res;
    if (req.mtp && w.mtp) res = mtp(c, w, cache, x, req);
    return res;
}

size_t measure_batch_arena(const model& m, kv::cache& cache, int64_t rows, bool mtp) {
    backend::null_backend nb;
    forward probe(m, nb);
    arena measuring = arena::measuring();
    std::vector<batch_row> rs(static_cast<size_t>(rows), batch_row{1, 0, &cache, nullptr});
    batch_request req;
    req.rows = rs;
    req.mtp = mtp;
    req.mtp_logits = mtp;  // the null backend writes nothing to the host
    probe.run_batch(req, measuring);
    return measuring.peak();
}

void forward::run_batch(const batch_request& req, arena& ar) const {
    const hparams& hp = m_.hp();
    const model_weights& w = m_.weights();
    const int64_t hc_w = static_cast<int64_t>(hp.n_hc) * hp.n_embd;
    const int64_t n = static_cast<int64_t>(req.rows.size());
    ar.reset();

    std::vector<seq_rows> seqs;
    std::vector<int32_t> toks;
    seqs.reserve(req.rows.size());
    toks.reserve(req.rows.size());
    for (int64_t i = 0; i < n; ++i) {
        const batch_row& r = req.rows[static_cast<size_t>(i)];
        seqs.push_back({i, 1, r.pos, r.cache, r.steer});
        toks.push_back(r.token);
    }
    chunk_ctx c{be_, hp, ar};
    c.n = n;
    c.seqs = seqs;
    c.ids = ar.alloc(ggml_type::I32, n);  // [n]
    be_.upload(c.ids, toks.data());
    tensor x = ar.alloc_f32(hc_w, n);  // [n, n_hc*D] HC state
    tensor t = ar.alloc_f32(hc_w, n);  // [n, n_hc*D] scratch state
    be_.get_rows(weight_tensor(w.token_embd), c.ids, x, static_cast<int>(hp.n_hc));
    const size_t mark = ar.mark();
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        layer(c, w.layers[il], il, x, t);
        ar.reset(mark);
    }
    const head_weights hw{w.output_hc_fn, w.output_hc_scale, w.output_hc_base, w.output_norm,
                          w.output};
    head(c, hw, x, true, false, req.logits);
    ar.reset(mark);
    if (!req.mtp || !w.mtp) return;

    // The MTP block's row i: row i's previous main state with the embedding of its token, at
    // the position before it; the new main state then waits for the next token.
    tensor hs = ar.alloc_f32(hc_w, n);  // [n, n_hc*D]
    std::vector<seq_rows> mseqs = seqs;
    for (int64_t i = 0; i < n; ++i) {
        seq_rows& s = mseqs[static_cast<size_t>(i)];
        MAGNETAR_ASSERT(s.p0 >= 1, "run_batch: an MTP row needs a previous position");
        s.p0 -= 1;
        s.steer = nullptr;
        be_.copy(s.cache->mtp_prev_hc(), view_rows(hs, i, 1));
    }
    chunk_ctx mc{be_, hp, ar};
    mc.n = n;
    mc.ids = c.ids;
    mc.seqs = mseqs;
    const tensor xm = mtp_block(mc, w, hs);
    head(mc, mtp_head(w), xm, req.mtp_logits, false, req.mtp_out);
    for (int64_t i = 0; i < n; ++i)
        be_.copy(view_rows(x, i, 1), seqs[static_cast<size_t>(i)].cache->mtp_prev_hc());
}

int32_t argmax_margin(const float* row, size_t n, float* margin) {
    int32_t best = 0;
    float top = row[0];
    float second = -std::numeric_limits<float>::infinity();
    for (size_t i = 1; i < n; ++i) {
        if (row[i] > top) {
            second = top;
            top = row[i];
            best = static_cast<int32_t>(i);
        } else if (row[i] > second) {
            second = row[i];
        }
    }
    *margin = top - second;
    return best;
}

int forward::draft(const draft_request& req, kv::cache& cache, arena& ar) const {
    const hparams& hp = m_.hp();
    const model_weights& w = m_.weights();
    MAGNETAR_ASSERT(w.mtp && cache.has_mtp() && req.p0 >= 0, "draft: no MTP block or no state");
    ar.reset();
    const int64_t hc_w = static_cast<int64_t>(hp.n_hc) * hp.n_embd;
    const size_t n_vocab = hp.n_vocab;
    tensor state = ar.alloc_f32(hc_w, 1);  // [1, n_hc*D] the block's next input state
    be_.copy(cache.mtp_prev_hc(), state);
    tensor ids = ar.alloc(ggml_type::I32, 1);
    const size_t mark = ar.mark();
    int32_t tok = req.token;
    int made = 0;
    for (int k = 0; k < req.max_steps; ++k) {
        be_.upload(ids, &tok);
        chunk_ctx mc{be_, hp, ar};
        mc.p0 = req.p0 + k;
        mc.n = 1;
        mc.ids = ids;
        const seq_rows seq{0, 1, mc.p0, &cache, nullptr};
        mc.seqs = {&seq, 1};
        mc.prefix = "mtp.";
        const tensor out = mtp_block(mc, w, state);
        be_.copy(out, state);
        head(mc, mtp_head(w), out, false, true, req.logits);
        ar.reset(mark);
        be_.synchronize();
        float margin = 0.0f;
        const int32_t best = argmax_margin(req.logits, n_vocab, &margin);
        if (margin < req.min_margin) break;
        req.drafts[made++] = best;
        tok = best;
    }
    return made;
}

}  // namespace magnetar::graph
