// The DeepSeek V4.1 forward pass (spec v41.md §3): see forward41.h.
#include "graph/forward41.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/null_backend.h"
#include "core/error.h"
#include "graph/context.h"
#include "model/engram_hash.h"
#include "quant/fp8fp4.h"
#include "quant/types.h"

namespace magnetar::graph {

namespace {

using backend::qdq_format;

// One chunk's shared state: the backend, the arena, positions, and the per-call slots of the
// attention runtime (§3.7).
struct ctx41 {
    ctx41(backend::backend& b, const hparams& h, arena& a, kv::cache41& kc,
          const chunk41_options& o)
        : be(b), hp(h), ar(a), cache(kc), opts(o) {}

    backend::backend& be;
    const hparams& hp;
    arena& ar;
    kv::cache41& cache;
    const chunk41_options& opts;
    int64_t p0 = 0;
    int64_t n = 0;
    dump_sink* dump = nullptr;
    std::string prefix;

    // Allocated once per chunk, before the layers (they outlive each block's scratch).
    tensor topk;  // [n, K] I32: the latest index source's selection (raw entry ids)
    tensor cand;  // [n, NB] I32: the candidate source's kept blocks
    bool have_topk = false;
    bool have_cand = false;
    // DSpark draft block (§3.10): rows at positions p0.. attend over their stage's ring (this
    // many slots, slot order) and the whole block; nothing is stored. -1: the backbone.
    int64_t draft_ring_slots = -1;
    // Directional steering of the current main layer (zero scales: none).
    tensor steer_v;  // [D] F32
    float steer_attn = 0.0f;
    float steer_ffn = 0.0f;

    void tap(const tensor& t, const char* what) const {
        if (dump) tap_rows(be, dump, prefix + what, p0, t);
    }
};

backend::rope41_params rope41_for(const hparams& hp, uint32_t ratio) {
    backend::rope41_params r;
    r.n_rot = hp.n_rot;
    if (ratio == 0) {
        r.freq_base = hp.rope_freq_base;
        return r;
    }
    r.freq_base = hp.compress_rope_freq_base;
    r.yarn_orig_ctx = hp.rope_orig_ctx;
    r.yarn_factor = hp.rope_scaling_factor;
    r.beta_fast = hp.yarn_beta_fast;
    r.beta_slow = hp.yarn_beta_slow;
    return r;
}

// The three precision classes of a linear (v41 §0.2, §4.6); outputs [n, w.ne[1]].
// FP8-linear / FP4-linear: the input's block-32 FP8 QDQ, fp32 accumulation, bf16 output.
tensor fp8_linear(const ctx41& c, const weight& w, const tensor& x) {
    tensor xq = c.ar.alloc_f32(x.ne[0], x.n_rows());
    c.be.copy(x, xq);
    c.be.qdq_rows(xq, qdq_format::fp8_b32, tensor{});
    tensor y = c.ar.alloc_f32(w.ne[1], x.n_rows());
    c.be.matmul(weight_tensor(w), xq, y);
    c.be.round_bf16(y);
    return y;
}
// BF16-linear: bf16 products, fp32 accumulation, bf16 output.
tensor bf16_linear(const ctx41& c, const weight& w, const tensor& x) {
    tensor y = c.ar.alloc_f32(w.ne[1], x.n_rows());
    c.be.matmul(weight_tensor(w), x, y);
    c.be.round_bf16(y);
    return y;
}
// F32-linear: fp32 output.
tensor f32_linear(const ctx41& c, const weight& w, const tensor& x) {
    tensor y = c.ar.alloc_f32(w.ne[1], x.n_rows());
    c.be.matmul(weight_tensor(w), x, y);
    return y;
}
// RMSNorm with the weight product in fp32 and one bf16 rounding (v41 §0.2); in place.
void rms_norm_bf16(const ctx41& c, const tensor& x, const weight& w) {
    c.be.rms_norm(x, weight_tensor(w), x, static_cast<uint32_t>(x.ne[0]), c.hp.rms_eps);
    c.be.round_bf16(x);
}

// Replaces the rows of a selection tensor [n, w] (positions p0..) by the forced ones, counting
// the positions whose own choice was a different set. Returns false when nothing is forced.
// (Tests only: the name is built, and anything allocated, only when decisions are forced.)
bool force_rows(const ctx41& c, const char* what, const tensor& sel) {
    if (!c.opts.forced) return false;
    const std::string name = c.prefix + what;
    const auto it = c.opts.forced->rows.find(name);
    if (it == c.opts.forced->rows.end()) return false;
    const int64_t w = sel.ne[0];
    MAGNETAR_ASSERT(c.opts.forced->width.at(name) == w &&
                        static_cast<int64_t>(it->second.size()) >= (c.p0 + c.n) * w,
                    "forced decisions: shape");
    std::vector<int32_t> own(static_cast<size_t>(c.n * w));
    c.be.download(sel, own.data());
    const int32_t* forced = it->second.data() + c.p0 * w;
    for (int64_t t = 0; t < c.n; ++t) {
        std::vector<int32_t> a(own.begin() + t * w, own.begin() + (t + 1) * w);
        std::vector<int32_t> b(forced + t * w, forced + (t + 1) * w);
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        if (a != b) ++c.opts.forced->differs[name];
    }
    c.be.upload(sel, forced);
    return true;
}

// Row r of a weight (any float type) as floats, on the host (weights are memory-mapped).
void cpu_dequant_row(const tensor& w, int64_t r, float* out) {
    to_float_of(w.type)(w.row_ptr(r), out, w.ne[0]);
}

// ---------------------------------------------------------------------------------------------
// Engram (§3.9)
// ---------------------------------------------------------------------------------------------

// Writes the chunk's compressed ids into the history and hashes every position: returns the
// table rows layer-major [n_eng][n, C] (one contiguous block per Engram layer), in `rows`.
// idx / rows grow to the chunk; a chunk that fits allocates nothing.
const int32_t* engram_hashes(const hparams& hp, const std::vector<engram::layer_hash>& layers,
                             kv::cache41& cache, int64_t p0, int64_t n, const int32_t* tokens,
                             std::vector<int64_t>& idx, std::vector<int32_t>& rows) {
    const engram_hparams& eh = hp.v41.engram;
    const int64_t n_eng = static_cast<int64_t>(layers.size());
    if (n_eng == 0) return nullptr;
    // Reserved for n_ctx positions at cache creation (run() checks p0 + n <= n_ctx).
    std::vector<int64_t>& hist = cache.engram_history();
    MAGNETAR_ASSERT(static_cast<int64_t>(hist.size()) == p0, "engram history out of step");
    for (int64_t t = 0; t < n; ++t) {
        const int32_t id = tokens[t];
        if (id < 0 || static_cast<size_t>(id) >= eh.token_map.size()) {
            throw Error("token id " + std::to_string(id) + " outside the Engram token map (" +
                        std::to_string(eh.token_map.size()) + " entries)");
        }
        hist.push_back(eh.token_map[static_cast<size_t>(id)]);
    }
    const int64_t C = eh.n_col();
    const size_t need = static_cast<size_t>(n * n_eng * C);
    if (idx.size() < need) idx.resize(need);
    if (rows.size() < need) rows.resize(need);
    engram::hash_positions(layers, static_cast<int>(eh.max_ngram), static_cast<int>(eh.n_head),
                           eh.compressed_vocab, eh.pad_id, hist.data(), 0,
                           static_cast<int64_t>(hist.size()), p0, n, idx.data());
    // [n, n_eng, C] -> [n_eng][n, C]
    for (int64_t li = 0; li < n_eng; ++li) {
        for (int64_t t = 0; t < n; ++t) {
            const int64_t* src = idx.data() + (t * n_eng + li) * C;
            int32_t* dst = rows.data() + (li * n + t) * C;
            for (int64_t k = 0; k < C; ++k) dst[k] = static_cast<int32_t>(src[k]);
        }
    }
    return rows.data();
}

// rows: the chunk's table rows of every Engram layer ([n_eng][n, C]; null in a measuring pass),
// wq: this layer's gate weights [n_hc, D] (host).
void engram_block(const ctx41& c, const v41_block_weights& lw, const int32_t* rows,
                  const float* wq_host, const tensor& x) {
    const hparams& hp = c.hp;
    const engram_hparams& eh = hp.v41.engram;
    const int64_t C = eh.n_col();
    const int64_t li = lw.engram_index;
    // This layer's row ids [n, C].
    tensor idx = c.ar.alloc(ggml_type::I32, C, c.n);
    if (rows) c.be.upload(idx, rows + li * c.n * C);
    c.tap(idx, "engram_rows");
    tensor f = c.ar.alloc_f32(C * eh.head_dim, c.n);
    c.be.engram_gather(weight_tensor(lw.engram_embd), idx, f);
    const tensor kv = fp8_linear(c, lw.engram_kv, f);  // [n, (n_hc+1)*D]
    tensor wq = c.ar.alloc_f32(hp.n_embd, hp.n_hc);
    c.be.upload(wq, wq_host);
    backend::engram_params ep;
    ep.n_hc = hp.n_hc;
    ep.n_embd = hp.n_embd;
    ep.norm_eps = hp.rms_eps;
    c.be.engram_gate(ep, x, kv, wq, x);
    c.tap(x, "engram_out");
}

// ---------------------------------------------------------------------------------------------
// Attention (§3.3 - §3.7)
// ---------------------------------------------------------------------------------------------

tensor attention41(ctx41& c, const v41_block_weights& lw, const tensor& x) {
    const hparams& hp = c.hp;
    const uint32_t il = lw.il;
    const uint32_t ratio = lw.compress_ratio;
    const backend::rope41_params rope = rope41_for(hp, ratio);
    const int64_t dh = hp.n_head_dim;
    kv::layer41_state& st = c.cache.layer(il);

    // Query.
    tensor q_lat = fp8_linear(c, lw.attn_q_a, x);  // [n, Rq]
    rms_norm_bf16(c, q_lat, lw.attn_q_a_norm);
    c.tap(q_lat, "q_lora");
    tensor q = fp8_linear(c, lw.attn_q_b, q_lat);  // [n, H*Dh]
    c.be.rope41(q, hp.n_head_dim, rope, c.p0, 1, false);
    c.tap(q, "q");

    // This layer's window rows, QDQ'd and packed.
    tensor kv = fp8_linear(c, lw.attn_kv, x);  // [n, Dh]
    rms_norm_bf16(c, kv, lw.attn_kv_a_norm);
    c.be.rope41(kv, hp.n_head_dim, rope, c.p0, 1, false);
    tensor kv_packed = c.ar.alloc(ggml_type::I8, quant::window_row_bytes(dh), c.n);
    c.be.qdq_rows(kv, qdq_format::fp8_b32, kv_packed);
    c.tap(kv, "kv");

    tensor comp;  // the KV group's compressed rows
    tensor sel;   // this layer's entry list
    if (ratio != 0) {
        const int64_t r = ratio;
        const int32_t src = hp.kv_source(il);
        MAGNETAR_ASSERT(src >= 0, "ratio > 0 layer without a KV source");
        kv::layer41_state& group = c.cache.layer(static_cast<uint32_t>(src));
        const int64_t j0 = c.p0 / r;                  // first entry this call can complete
        const int64_t n_new = (c.p0 + c.n) / r - j0;  // entries completed in this call

        if (lw.mode == layer_mode::full) {
            // Compressor (§3.4): one latent z per completed group.
            tensor z = c.ar.alloc_f32(dh, n_new);
            if (r == 1) {
                z = bf16_linear(c, lw.comp_kv, x);
            } else {
                const tensor a = f32_linear(c, lw.comp_kv, x);
                const tensor b = f32_linear(c, lw.comp_gate, x);
                backend::compressor41_params cp;
                cp.ratio = ratio;
                cp.p0 = c.p0;
                c.be.compressor41(cp, a, b, st.state_a, st.state_b, z);
            }
            if (n_new > 0) {
                rms_norm_bf16(c, z, lw.comp_norm);
                c.tap(z, "comp_latent");
                // Index key from the pre-RoPE, pre-QDQ latent (§3.5), then the main row.
                tensor kk = bf16_linear(c, lw.idx_k, z);  // [n_new, DI]
                rms_norm_bf16(c, kk, lw.idx_k_norm);
                c.be.rope41(kk, hp.n_indexer_head_dim, rope, j0 * r, r, false);
                c.be.qdq_rows(kk, qdq_format::mxfp4_b32, view_rows(st.idx_rows, j0, n_new));
                tensor cr = c.ar.alloc_f32(dh, n_new);
                c.be.copy(z, cr);
                c.be.rope41(cr, hp.n_head_dim, rope, j0 * r, r, false);
                c.be.qdq_rows(cr, qdq_format::fp4_e4m3_b16, view_rows(st.comp_rows, j0, n_new));
                if (c.opts.official_index_k)
                    c.cache.runtime().published_index_k = static_cast<int32_t>(il);
            }
        }
        comp = group.comp_rows;

        if (lw.mode == layer_mode::full || lw.mode == layer_mode::reindex) {
            // Index query and head weights (§3.5).
            tensor qi = fp8_linear(c, lw.idx_q_b, q_lat);  // [n, HI*DI]
            c.be.rope41(qi, hp.n_indexer_head_dim, rope, c.p0, 1, false);
            // Blocks of 32 never straddle heads (DI % 32 == 0), so the row-wide QDQ is per head.
            c.be.qdq_rows(qi, qdq_format::mxfp4_b32, tensor{});
            tensor wts = bf16_linear(c, lw.idx_proj, x);  // [n, HI]
            const int32_t key_layer =
                c.opts.official_index_k && c.cache.runtime().published_index_k >= 0
                    ? c.cache.runtime().published_index_k
                    : src;
            backend::indexer41_params ip;
            ip.p0 = c.p0;
            ip.ratio = ratio;
            ip.n_head = hp.n_indexer_head;
            ip.head_dim = hp.n_indexer_head_dim;
            ip.top_k = hp.n_indexer_top_k;
            ip.weight_scale = static_cast<float>(
                1.0 / std::sqrt(static_cast<double>(hp.n_indexer_head_dim) * hp.n_indexer_head));
            ip.cand_blocks = hp.v41.candidate_topk_blocks;
            ip.cand_block_size = hp.v41.candidate_block_size;
            tensor cand_out;
            if (hp.is_candidate_src(il)) {
                cand_out = c.cand;
                c.have_cand = true;
            }
            MAGNETAR_ASSERT(!hp.uses_candidates(il) || c.have_cand,
                            "Reindex layer before its candidate source");
            const tensor cand_in = hp.uses_candidates(il) ? c.cand : tensor{};
            c.have_topk = true;
            c.be.indexer41(ip, qi, wts, c.cache.layer(static_cast<uint32_t>(key_layer)).idx_rows,
                           cand_in, cand_out, c.topk);
            if (cand_out) c.tap(cand_out, "candidates");
            force_rows(c, "topk", c.topk);
        }
        MAGNETAR_ASSERT(c.have_topk, "Reuse layer before its index source");
        sel = c.topk;
        c.tap(sel, "topk");
    }

    backend::attention41_params ap;
    ap.p0 = c.p0;
    ap.n_head = hp.n_head;
    ap.head_dim = hp.n_head_dim;
    ap.window = hp.n_swa;
    ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hp.n_head_dim)));
    ap.ring_slots = c.draft_ring_slots;
    tensor o = c.ar.alloc_f32(static_cast<int64_t>(hp.n_head) * dh, c.n);
    c.be.attention41(ap, q, kv, st.ring, comp, sel, weight_tensor(lw.attn_sinks), o);
    // The chunk's rows enter the ring only after every query of the chunk has attended (a
    // draft block's keys never do).
    if (c.draft_ring_slots < 0) c.be.kv_store(kv_packed, st.ring, c.p0);
    c.be.rope41(o, hp.n_head_dim, rope, c.p0, 1, true);
    c.tap(o, "attn_heads");

    // Grouped output: wo_a per group (BF16-linear), then wo_b (FP8-linear).
    const int64_t G = hp.n_o_group;
    const int64_t lora = hp.n_o_lora;
    const int64_t gin = hp.o_group_in();
    tensor u = c.ar.alloc_f32(G * lora, c.n);
    const tensor wo_a = weight_tensor(lw.attn_output_a);  // [gin, G*lora]
    for (int64_t g = 0; g < G; ++g) {
        c.be.matmul(view_rows(wo_a, g * lora, lora), view_cols(o, g * gin, gin),
                    view_cols(u, g * lora, lora));
    }
    c.be.round_bf16(u);
    return fp8_linear(c, lw.attn_output_b, u);
}

// ---------------------------------------------------------------------------------------------
// MoE (§3.8)
// ---------------------------------------------------------------------------------------------

tensor moe41(const ctx41& c, const v41_block_weights& lw, const tensor& x, uint32_t n_expert,
             uint32_t k) {
    const hparams& hp = c.hp;
    const int64_t D = hp.n_embd;
    const int64_t F = hp.n_ff_exp;
    tensor logits = f32_linear(c, lw.ffn_gate_inp, x);  // [n, E] (gate_temp checked = 1 at load)
    backend::router_params rp;
    rp.n_used = k;
    rp.scale = hp.expert_weights_scale;
    rp.normalize = hp.expert_weights_norm && k > 1;
    rp.v41_renorm = true;
    tensor sel = c.ar.alloc(ggml_type::I32, k, c.n);
    tensor wts = c.ar.alloc_f32(k, c.n);
    c.be.router(rp, logits, weight_tensor(lw.exp_probs_b), tensor{}, tensor{}, sel, wts);
    // (allocated whether or not decisions are forced, so the measuring pass sees them)
    tensor ids = c.ar.alloc(ggml_type::I32, c.n);
    tensor table = c.ar.alloc(ggml_type::I32, k, c.n);
    if (force_rows(c, "moe_sel", sel)) {
        // The given experts through the router's table path: weights from this engine's scores.
        std::vector<int32_t> rows(static_cast<size_t>(c.n));
        for (int64_t t = 0; t < c.n; ++t) rows[static_cast<size_t>(t)] = static_cast<int32_t>(t);
        c.be.upload(ids, rows.data());
        c.be.copy(sel, table);
        c.be.router(rp, logits, weight_tensor(lw.exp_probs_b), table, ids, sel, wts);
    }
    c.tap(sel, "moe_sel");

    tensor xq = c.ar.alloc_f32(D, c.n);
    c.be.copy(x, xq);
    c.be.qdq_rows(xq, qdq_format::fp8_b32, tensor{});
    const int64_t nk = c.n * k;
    backend::moe_workspace ws;
    ws.xg = c.ar.alloc_f32(D, nk);
    ws.g = c.ar.alloc_f32(F, nk);
    ws.u = c.ar.alloc_f32(F, nk);
    ws.contrib = c.ar.alloc_f32(D, nk);
    ws.slots = c.ar.alloc(ggml_type::I32, 2 * nk + n_expert + 1);
    tensor out = c.ar.alloc_f32(D, c.n);
    const float clamp = hp.swiglu_clamp.empty()
                            ? 0.0f
                            : hp.swiglu_clamp[std::min<size_t>(lw.il, hp.swiglu_clamp.size() - 1)];
    backend::moe_weights mw{weight_tensor(lw.ffn_gate_exps), weight_tensor(lw.ffn_up_exps),
                            weight_tensor(lw.ffn_down_exps)};
    c.be.moe41(xq, sel, wts, mw, clamp > 0.0f ? clamp : 3.0e38f, out, ws);

    // Shared expert: FP8-linears without a routing weight.
    const float clamp_sh = hp.v41.swiglu_clamp_shexp.empty()
                               ? clamp
                               : hp.v41.swiglu_clamp_shexp[std::min<size_t>(
                                     lw.il, hp.v41.swiglu_clamp_shexp.size() - 1)];
    const tensor a = fp8_linear(c, lw.ffn_gate_shexp, x);
    const tensor b = fp8_linear(c, lw.ffn_up_shexp, x);
    tensor y = c.ar.alloc_f32(F, c.n);
    c.be.swiglu(a, b, y, clamp_sh > 0.0f ? clamp_sh : 3.0e38f);
    c.be.round_bf16(y);
    const tensor sh = fp8_linear(c, lw.ffn_down_shexp, y);
    c.be.add(out, sh, out, 1);
    c.be.round_bf16(out);
    return out;
}

// ---------------------------------------------------------------------------------------------
// One block (§3.2): x [n, n_hc*D] updated in place; pi [n, n_hc] the carried pre mix.
// ---------------------------------------------------------------------------------------------

void block41(ctx41& c, const v41_block_weights& lw, const tensor& x, const tensor& t,
             const tensor& pi) {
    const hparams& hp = c.hp;
    const size_t mark = c.ar.mark();
    const backend::hc_params hcp = hc_for(hp);
    const int64_t nh = hp.n_hc;
    const int64_t D = hp.n_embd;
    tensor pre_a = c.ar.alloc_f32(nh, c.n);
    tensor post = c.ar.alloc_f32(nh, c.n);
    tensor comb = c.ar.alloc_f32(nh * nh, c.n);
    tensor mix = c.ar.alloc_f32(hp.n_hc_mix(), c.n);
    tensor y = c.ar.alloc_f32(D, c.n);

    c.tap(x, "hc_attn_in");
    c.be.hc41_pre(hcp, x, weight_tensor(lw.hc_attn_fn), weight_tensor(lw.hc_attn_scale),
                  weight_tensor(lw.hc_attn_base), pi, y, pre_a, post, comb, mix);
    rms_norm_bf16(c, y, lw.attn_norm);
    c.tap(y, "attn_norm");
    const tensor a = attention41(c, lw, y);
    if (c.steer_attn != 0.0f) c.be.project_out(a, c.steer_v, c.steer_attn);
    c.tap(a, "attn_out");
    c.be.hc_post(hcp, x, a, post, comb, t);
    c.be.round_bf16(t);
    c.tap(t, "hc_ffn_in");

    tensor y2 = c.ar.alloc_f32(D, c.n);
    c.be.hc41_pre(hcp, t, weight_tensor(lw.hc_ffn_fn), weight_tensor(lw.hc_ffn_scale),
                  weight_tensor(lw.hc_ffn_base), pre_a, y2, pi, post, comb, mix);
    rms_norm_bf16(c, y2, lw.ffn_norm);
    c.tap(y2, "ffn_norm");
    const uint32_t n_expert = lw.il >= hp.n_layer ? hp.dspark_n_expert() : hp.n_expert;
    const uint32_t k = lw.il >= hp.n_layer ? hp.dspark_n_expert_used() : hp.n_expert_used;
    const tensor f = moe41(c, lw, y2, n_expert, k);
    if (c.steer_ffn != 0.0f) c.be.project_out(f, c.steer_v, c.steer_ffn);
    c.tap(f, "ffn_out");
    c.be.hc_post(hcp, t, f, post, comb, x);
    c.be.round_bf16(x);
    c.tap(x, "out");
    c.ar.reset(mark);
}

// The DSpark stage rings (§3.10): main_x from the taps, then each stage's window row of it at
// every position of the chunk.
void dspark_context(ctx41& c, const v41_weights& vw, const tensor& taps) {
    const hparams& hp = c.hp;
    c.prefix = "dspark.";
    c.tap(taps, "taps");
    tensor main_x = fp8_linear(c, vw.dspark[0].dspark_main_proj, taps);
    rms_norm_bf16(c, main_x, vw.dspark[0].dspark_main_norm);
    c.tap(main_x, "main_x");
    const backend::rope41_params rope = rope41_for(hp, 0);
    for (const v41_block_weights& sw : vw.dspark) {
        tensor kv = fp8_linear(c, sw.attn_kv, main_x);
        rms_norm_bf16(c, kv, sw.attn_kv_a_norm);
        c.be.rope41(kv, hp.n_head_dim, rope, c.p0, 1, false);
        tensor packed = c.ar.alloc(ggml_type::I8, quant::window_row_bytes(hp.n_head_dim), c.n);
        c.be.qdq_rows(kv, qdq_format::fp8_b32, packed);
        c.prefix = "dspark." + std::to_string(sw.il - hp.n_layer) + ".";
        c.tap(kv, "kv");
        c.prefix = "dspark.";
        c.be.kv_store(packed, c.cache.layer(sw.il).ring, c.p0);
    }
    c.prefix.clear();
}

backend::limits limits41(const hparams& hp, int64_t n_ctx) {
    backend::limits l;
    const engram_hparams& eh = hp.v41.engram;
    l.max_row = std::max<int64_t>(
        {static_cast<int64_t>(hp.n_hc) * hp.n_embd, hp.n_embd, hp.n_q_lora, hp.o_group_in(),
         static_cast<int64_t>(hp.n_o_group) * hp.n_o_lora, hp.n_ff_exp, hp.n_expert,
         static_cast<int64_t>(hp.n_head_dim), static_cast<int64_t>(eh.n_col()) * eh.head_dim,
         static_cast<int64_t>(hp.v41.dspark.target_layers.size()) * hp.n_embd,
         // Rows the V4.1 ops hold whole in per-thread scratch (4 floats per max_row element on
         // the CPU): the index query's QDQ codes, and a block of 64 decoded keys [64, Dh].
         static_cast<int64_t>(hp.n_indexer_head) * hp.n_indexer_head_dim,
         16 * static_cast<int64_t>(hp.n_head_dim)});
    l.max_keys = hp.n_swa + hp.n_indexer_top_k;
    l.max_index_rows = n_ctx;
    return l;
}

}  // namespace

forward41::forward41(const model& m, backend::backend& be) : m_(m), be_(be) {
    const hparams& hp = m.hp();
    const model_weights& w = m.weights();
    if (!hp.is_v41() || !w.v41) return;  // run() refuses such a model
    const engram_hparams& eh = hp.v41.engram;
    if (eh.n_layers() == 0) return;
    engram_layers_ = engram::build_layers(
        eh.vocab_size, static_cast<int>(eh.n_layers()), static_cast<int>(eh.max_ngram),
        static_cast<int>(eh.n_head), eh.compressed_vocab, eh.multipliers, eh.num_embeddings, {});
    // wq_i = f32(bf16(q_weight_i)) * f32(bf16(k_weight_i)) (§3.9.4: R holds them in bf16),
    // from the mapped weights.
    const int64_t d = hp.n_embd;
    const int64_t wq_size = static_cast<int64_t>(hp.n_hc) * d;
    engram_wq_.assign(static_cast<size_t>(eh.n_layers() * wq_size), 0.0f);
    std::vector<float> kw(static_cast<size_t>(wq_size));
    for (const v41_block_weights& lw : w.v41->layers) {
        if (lw.engram_index < 0) continue;
        float* qw = engram_wq_.data() + lw.engram_index * wq_size;
        const tensor qt = weight_tensor(lw.engram_q_norm);
        const tensor kt = weight_tensor(lw.engram_k_norm);
        for (int64_t i = 0; i < static_cast<int64_t>(hp.n_hc); ++i) {
            cpu_dequant_row(qt, i, qw + i * d);
            cpu_dequant_row(kt, i, kw.data() + i * d);
        }
        for (int64_t i = 0; i < wq_size; ++i) {
            qw[i] = quant::round_bf16(qw[i]) * quant::round_bf16(kw[static_cast<size_t>(i)]);
        }
    }
}

chunk_result forward41::run(const chunk_request& req, kv::cache41& cache, arena& ar,
                            dump_sink* dump, const chunk41_options& opts) const {
    const hparams& hp = m_.hp();
    const model_weights& w = m_.weights();
    MAGNETAR_ASSERT(hp.is_v41() && w.v41, "forward41 needs a V4.1 model");
    MAGNETAR_ASSERT(!req.mtp && req.layer_begin == 0 && req.hc_in == nullptr,
                    "forward41: DSpark and pipeline stages are not supported");
    if (req.p0 + req.n > cache.n_ctx()) {
        throw Error("chunk ends at position " + std::to_string(req.p0 + req.n) +
                    " beyond the context of " + std::to_string(cache.n_ctx()));
    }
    ar.reset();
    const bool measuring = ar.is_measuring();
    ctx41 c(be_, hp, ar, cache, opts);
    c.p0 = req.p0;
    c.n = req.n;
    c.dump = dump;
    const int64_t nh = hp.n_hc;
    const int64_t D = hp.n_embd;

    const int32_t* engram_rows = measuring ? nullptr
                                           : engram_hashes(hp, engram_layers_, cache, req.p0, req.n,
                                                           req.tokens, engram_idx_, engram_rows_);
    const int64_t wq_size = static_cast<int64_t>(nh) * D;

    tensor ids = ar.alloc(ggml_type::I32, req.n);
    be_.upload(ids, req.tokens);
    tensor x = ar.alloc_f32(nh * D, req.n);  // [n, n_hc*D] the stream
    tensor t = ar.alloc_f32(nh * D, req.n);  // scratch stream
    tensor pi = ar.alloc_f32(nh, req.n);     // carried pre mix
    be_.get_rows(weight_tensor(w.token_embd), ids, x, static_cast<int>(nh));
    c.tap(view_cols(x, 0, D), "embd");
    // pi = one-hot on copy 0.
    be_.fill(pi, 0.0f);
    be_.fill(view_cols(pi, 0, 1), 1.0f);
    c.topk = ar.alloc(ggml_type::I32, hp.n_indexer_top_k, req.n);
    if (hp.v41.candidate_source >= 0) {
        c.cand = ar.alloc(ggml_type::I32, hp.v41.candidate_topk_blocks, req.n);
    }

    // DSpark taps (§3.10): the copy mean of the stream at the input of each target layer.
    const bool dspark = cache.n_blocks() > hp.n_layer && !w.v41->dspark.empty();
    const std::vector<uint32_t>& targets = hp.v41.dspark.target_layers;
    tensor taps, mean_w;
    if (dspark) {
        taps = ar.alloc_f32(static_cast<int64_t>(targets.size()) * D, req.n);
        mean_w = ar.alloc_f32(nh, req.n);
        // sum_i X_i / n == sum_i (X_i / n) exactly for a power-of-two n (hc.count is 4).
        MAGNETAR_ASSERT((nh & (nh - 1)) == 0,
                        "DSpark taps: hyper-connection count not a power of two");
        be_.fill(mean_w, 1.0f / static_cast<float>(nh));
    }

    chunk_result res;
    for (const v41_block_weights& lw : w.v41->layers) {
        if (req.cancel && *req.cancel && (*req.cancel)()) {
            res.cancelled = true;
            return res;
        }
        c.prefix = "blk." + std::to_string(lw.il) + ".";
        c.steer_attn = 0.0f;
        c.steer_ffn = 0.0f;
        if (req.steer && req.steer->active() && lw.il < req.steer->directions.size() &&
            req.steer->directions[lw.il]) {
            c.steer_v = req.steer->directions[lw.il];
            c.steer_attn = req.steer->attn;
            c.steer_ffn = req.steer->ffn;
        }
        if (lw.engram_index >= 0) {
            engram_block(c, lw, engram_rows, engram_wq_.data() + lw.engram_index * wq_size, x);
        }
        if (dspark) {
            const auto it = std::find(targets.begin(), targets.end(), lw.il);
            if (it != targets.end()) {
                const int64_t k = it - targets.begin();
                be_.hc41_collapse(hc_for(hp), x, mean_w, view_cols(taps, k * D, D));
            }
        }
        block41(c, lw, x, t, pi);
    }
    c.prefix.clear();
    c.steer_attn = 0.0f;
    c.steer_ffn = 0.0f;
    if (dspark) dspark_context(c, *w.v41, taps);

    // Head: collapse with the last FFN pre, RMSNorm, F32-linear.
    if (req.logits_all || req.logits_last) {
        const int64_t r0 = req.logits_all ? 0 : req.n - 1;
        const int64_t rows = req.n - r0;
        tensor h = ar.alloc_f32(D, rows);
        be_.hc41_collapse(hc_for(hp), view_rows(x, r0, rows), view_rows(pi, r0, rows), h);
        rms_norm_bf16(c, h, w.output_norm);
        c.tap(h, "result_norm");
        tensor logits = f32_linear(c, w.output, h);
        if (!measuring) be_.download(logits, req.logits);
    }
    return res;
}

draft41 forward41::draft(int64_t last_pos, int32_t token, kv::cache41& cache, arena& ar,
                         dump_sink* dump) const {
    const hparams& hp = m_.hp();
    const model_weights& w = m_.weights();
    MAGNETAR_ASSERT(hp.is_v41() && w.v41 && !w.v41->dspark.empty() &&
                        cache.n_blocks() == hp.n_layer + w.v41->dspark.size(),
                    "forward41::draft needs DSpark stages in the model and the cache");
    if (last_pos < 0 || last_pos + 1 != static_cast<int64_t>(cache.engram_history().size())) {
        throw Error("DSpark draft after position " + std::to_string(last_pos) +
                    ": the session holds " + std::to_string(cache.engram_history().size()) +
                    " positions");
    }
    if (token < 0 || static_cast<uint32_t>(token) >= hp.n_vocab) {
        throw Error("DSpark draft: token id " + std::to_string(token) + " outside the vocabulary");
    }
    const dspark_hparams& dp = hp.v41.dspark;
    const int64_t bd = dp.block_size;
    const int64_t nh = hp.n_hc;
    const int64_t D = hp.n_embd;
    const int64_t V = hp.n_vocab;
    ar.reset();
    const chunk41_options opts;
    ctx41 c(be_, hp, ar, cache, opts);
    c.p0 = last_pos + 1;
    c.n = bd;
    c.dump = dump;
    c.draft_ring_slots = std::min<int64_t>(hp.n_swa, last_pos + 1);

    std::vector<int32_t> ids(static_cast<size_t>(bd), static_cast<int32_t>(dp.noise_token_id));
    ids[0] = token;
    tensor idt = ar.alloc(ggml_type::I32, bd);
    be_.upload(idt, ids.data());
    tensor x = ar.alloc_f32(nh * D, bd);
    tensor t = ar.alloc_f32(nh * D, bd);
    tensor pi = ar.alloc_f32(nh, bd);
    be_.get_rows(weight_tensor(w.token_embd), idt, x, static_cast<int>(nh));
    be_.fill(pi, 0.0f);
    be_.fill(view_cols(pi, 0, 1), 1.0f);
    for (const v41_block_weights& sw : w.v41->dspark) {
        c.prefix = "dspark." + std::to_string(sw.il - hp.n_layer) + ".";
        block41(c, sw, x, t, pi);
    }
    c.prefix = "dspark.";
    const v41_block_weights& last = w.v41->dspark.back();
    tensor h = ar.alloc_f32(D, bd);
    be_.hc41_collapse(hc_for(hp), x, pi, h);
    c.tap(h, "h");
    tensor hn = ar.alloc_f32(D, bd);
    be_.copy(h, hn);
    rms_norm_bf16(c, hn, last.dspark_norm);
    const tensor base = f32_linear(c, w.output, hn);  // [B_d, V]

    // Markov chaining (§3.10 step 7) at temperature 0: argmax, ties to the lowest id.
    draft41 out;
    out.tokens.push_back(token);
    out.logits.assign(static_cast<size_t>(bd * V), 0.0f);
    out.confidence.assign(static_cast<size_t>(bd), 0.0f);
    const int64_t rm = dp.markov_rank;
    tensor prev_t = ar.alloc(ggml_type::I32, 1);
    tensor me = ar.alloc_f32(rm, 1);
    tensor bias = ar.alloc_f32(V, 1);
    tensor li = ar.alloc_f32(V, 1);
    tensor hc = ar.alloc_f32(D + rm, 1);
    tensor conf = ar.alloc_f32(1, 1);
    int32_t prev = token;
    for (int64_t i = 0; i < bd; ++i) {
        be_.upload(prev_t, &prev);
        be_.get_rows(weight_tensor(last.dspark_markov_embd), prev_t, me, 1);
        be_.matmul(weight_tensor(last.dspark_markov_head), me, bias);
        be_.add(view_rows(base, i, 1), bias, li, 1);
        be_.copy(view_rows(h, i, 1), view_cols(hc, 0, D));
        be_.copy(me, view_cols(hc, D, rm));
        be_.matmul(weight_tensor(last.dspark_conf), hc, conf);
        float* lrow = out.logits.data() + i * V;
        be_.download(li, lrow);
        be_.download(conf, out.confidence.data() + i);
        int32_t best = 0;
        for (int64_t v = 1; v < V; ++v) {
            if (lrow[v] > lrow[best]) best = static_cast<int32_t>(v);
        }
        out.tokens.push_back(best);
        prev = best;
    }
    return out;
}

size_t forward41_scratch_bytes(const model& m, int64_t n_ctx, int64_t n_chunk, bool logits_all,
                               bool dspark) {
    backend::null_backend nb;
    forward41 probe(m, nb);
    kv::cache41 cache(nb, m.hp(), std::max<int64_t>(n_ctx, n_chunk + 1), dspark);
    arena measuring = arena::measuring();
    chunk_request req;
    // An odd start: a ratio-2 compressor then completes the most groups (ceil(n / 2)).
    req.p0 = 1;
    req.n = n_chunk;
    req.logits_all = logits_all;
    req.logits_last = true;
    probe.run(req, cache, measuring, nullptr);
    size_t peak = measuring.peak();
    if (dspark) {
        arena d = arena::measuring();
        cache.engram_history().assign(1, 0);
        probe.draft(0, 0, cache, d, nullptr);
        peak = std::max(peak, d.peak());
    }
    return peak;
}

backend::limits forward41_limits(const hparams& hp, int64_t n_ctx) {
    return limits41(hp, n_ctx);
}

}  // namespace magnetar::graph
