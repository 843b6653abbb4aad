// The DeepSeek V4.1 tensor catalogue (spec v41.md §2.3): names, GGUF shapes, accepted types and
// aliases per layer role.
//
// Per layer: the V4 attention / HC / MoE tensors; the compressor (kv, norm; gate only for
// ratio > 1) and the index-key projection (indexer.attn_k, k_norm) at KV sources; the index
// query (indexer.attn_q_b, indexer.proj) at index sources; the Engram tensors at Engram layers;
// the router bias for text and image tokens. DSpark stages are blk.{n_layer + i}.* window-only
// blocks with the DSpark expert count, plus the stage-0 tap projection and the last stage's
// heads. There are no hc_head / output_hc_* tensors in V4.1.
#include "core/format.h"
#include "model/catalogue.h"

namespace magnetar {

namespace {

struct builder_v41 {
    const hparams& hp;
    std::vector<tensor_spec>& out;

    void add(int32_t layer, const std::string& prefix, const std::string& suffix,
             std::vector<int64_t> ne, dtype_class dt, tensor_role role, bool required = true,
             std::vector<std::string> aliases = {}) {
        out.push_back({prefix + suffix, suffix, std::move(ne), dt, role, layer, required,
                       std::move(aliases)});
    }

    // Backbone layer il < n_layer, or DSpark stage il - n_layer.
    void block(uint32_t il) {
        const std::string p = layer_prefix(hp, il);
        const auto l = static_cast<int32_t>(il);
        const int64_t D = hp.n_embd;
        const int64_t Dh = hp.n_head_dim;
        const int64_t H = hp.n_head;
        const int64_t Rq = hp.n_q_lora;
        const int64_t hc_dim = static_cast<int64_t>(hp.n_hc) * D;
        const int64_t mix = hp.n_hc_mix();
        const bool stage = hp.is_dspark(il);
        const uint32_t ratio = hp.compress_ratio(il);

        add(l, p, "hc_attn_fn.weight", {hc_dim, mix}, dtype_class::float_any, tensor_role::hc);
        add(l, p, "hc_attn_base.weight", {mix}, dtype_class::f32, tensor_role::hc);
        add(l, p, "hc_attn_scale.weight", {3}, dtype_class::f32, tensor_role::hc);
        add(l, p, "attn_norm.weight", {D}, dtype_class::norm_f32_bf16, tensor_role::norm);
        add(l, p, "attn_q_a.weight", {D, Rq}, dtype_class::dense, tensor_role::attention);
        add(l, p, "attn_q_a_norm.weight", {Rq}, dtype_class::norm_f32_bf16, tensor_role::norm);
        add(l, p, "attn_q_b.weight", {Rq, H * Dh}, dtype_class::dense, tensor_role::attention);
        add(l, p, "attn_kv.weight", {D, Dh}, dtype_class::dense, tensor_role::attention);
        add(l, p, "attn_kv_a_norm.weight", {Dh}, dtype_class::norm_f32_bf16, tensor_role::norm);
        add(l, p, "attn_sinks.weight", {H}, dtype_class::f32, tensor_role::attention);
        add(l, p, "attn_output_a.weight",
            {hp.o_group_in(), static_cast<int64_t>(hp.n_o_group) * hp.n_o_lora}, dtype_class::dense,
            tensor_role::attention);
        add(l, p, "attn_output_b.weight", {static_cast<int64_t>(hp.n_o_group) * hp.n_o_lora, D},
            dtype_class::dense, tensor_role::attention);

        if (!stage && hp.is_kv_source(il)) {
            add(l, p, "attn_compressor_kv.weight", {D, Dh}, dtype_class::float_any,
                tensor_role::compressor);
            if (ratio > 1) {
                add(l, p, "attn_compressor_gate.weight", {D, Dh}, dtype_class::float_any,
                    tensor_role::compressor);
            }
            add(l, p, "attn_compressor_norm.weight", {Dh}, dtype_class::norm_f32_bf16,
                tensor_role::norm);
            add(l, p, "indexer.attn_k.weight", {Dh, hp.n_indexer_head_dim}, dtype_class::float_any,
                tensor_role::indexer);
            add(l, p, "indexer.k_norm.weight", {hp.n_indexer_head_dim}, dtype_class::norm_f32_bf16,
                tensor_role::norm);
        }
        if (!stage && hp.is_index_source(il)) {
            const int64_t IH = hp.n_indexer_head;
            add(l, p, "indexer.attn_q_b.weight", {Rq, IH * hp.n_indexer_head_dim},
                dtype_class::dense, tensor_role::indexer);
            add(l, p, "indexer.proj.weight", {D, IH}, dtype_class::float_any, tensor_role::indexer);
        }
        if (!stage && hp.engram_index(il) >= 0) {
            const engram_hparams& e = hp.v41.engram;
            const auto rows =
                static_cast<int64_t>(e.num_embeddings[static_cast<size_t>(hp.engram_index(il))]);
            const int64_t C = e.n_col();
            const int64_t n = hp.n_hc;
            add(l, p, "engram_embd.weight", {e.row_bytes(), rows}, dtype_class::engram_table,
                tensor_role::engram);
            add(l, p, "engram_kv.weight", {C * e.head_dim, (n + 1) * D}, dtype_class::dense,
                tensor_role::engram, true, {p + "engram_wkv.weight"});
            add(l, p, "engram_q_norm.weight", {D, n}, dtype_class::norm_f32_bf16,
                tensor_role::engram, true, {p + "engram_q.weight"});
            add(l, p, "engram_k_norm.weight", {D, n}, dtype_class::norm_f32_bf16,
                tensor_role::engram, true, {p + "engram_k.weight"});
        }

        const int64_t E = stage ? hp.dspark_n_expert() : hp.n_expert;
        const int64_t F = hp.n_ff_exp;
        add(l, p, "hc_ffn_fn.weight", {hc_dim, mix}, dtype_class::float_any, tensor_role::hc);
        add(l, p, "hc_ffn_base.weight", {mix}, dtype_class::f32, tensor_role::hc);
        add(l, p, "hc_ffn_scale.weight", {3}, dtype_class::f32, tensor_role::hc);
        add(l, p, "ffn_norm.weight", {D}, dtype_class::norm_f32_bf16, tensor_role::norm);
        add(l, p, "ffn_gate_inp.weight", {D, E}, dtype_class::float_any, tensor_role::router);
        add(l, p, "exp_probs_b.bias", {E}, dtype_class::f32, tensor_role::router);
        // Image tokens only: optional for a text-only engine.
        add(l, p, "exp_probs_b_vl.bias", {E}, dtype_class::f32, tensor_role::router, false);
        add(l, p, "ffn_gate_exps.weight", {D, F, E}, dtype_class::routed_expert_v41,
            tensor_role::routed_expert);
        add(l, p, "ffn_up_exps.weight", {D, F, E}, dtype_class::routed_expert_v41,
            tensor_role::routed_expert);
        add(l, p, "ffn_down_exps.weight", {F, D, E}, dtype_class::routed_expert_v41,
            tensor_role::routed_expert);
        add(l, p, "ffn_gate_shexp.weight", {D, F}, dtype_class::dense, tensor_role::shared_expert);
        add(l, p, "ffn_up_shexp.weight", {D, F}, dtype_class::dense, tensor_role::shared_expert);
        add(l, p, "ffn_down_shexp.weight", {F, D}, dtype_class::dense, tensor_role::shared_expert);

        if (stage) dspark_extra(il);
    }

    void dspark_extra(uint32_t il) {
        const std::string p = layer_prefix(hp, il);
        const auto l = static_cast<int32_t>(il);
        const int64_t D = hp.n_embd;
        const uint32_t s = il - hp.n_layer;
        const dspark_hparams& d = hp.v41.dspark;
        if (s == 0) {
            const auto T = static_cast<int64_t>(d.target_layers.size());
            add(l, p, "dspark_main_proj.weight", {T * D, D}, dtype_class::dense,
                tensor_role::dspark, true, {"fc.weight"});
            add(l, p, "dspark_main_norm.weight", {D}, dtype_class::norm_f32_bf16,
                tensor_role::dspark, true, {"enc.output_norm.weight"});
        }
        if (s + 1 == hp.n_dspark()) {
            const int64_t Rm = d.markov_rank;
            const int64_t V = hp.n_vocab;
            add(l, p, "dspark_norm.weight", {D}, dtype_class::norm_f32_bf16, tensor_role::dspark);
            add(l, p, "dspark_markov_embd.weight", {Rm, V}, dtype_class::float_any,
                tensor_role::dspark);
            add(l, p, "dspark_markov_head.weight", {Rm, V}, dtype_class::float_any,
                tensor_role::dspark);
            add(l, p, "dspark_conf.weight", {D + Rm, 1}, dtype_class::float_any,
                tensor_role::dspark);
        }
    }
};

}  // namespace

std::vector<tensor_spec> tensor_catalogue_v41(const hparams& hp, bool with_dspark,
                                              bool dspark_only) {
    std::vector<tensor_spec> out;
    builder_v41 b{hp, out};
    const int64_t D = hp.n_embd;
    if (!dspark_only) {
        b.add(-1, "", "token_embd.weight", {D, hp.n_vocab}, dtype_class::dense,
              tensor_role::embedding);
        for (uint32_t il = 0; il < hp.n_layer; ++il) b.block(il);
        b.add(-1, "", "output_norm.weight", {D}, dtype_class::norm_f32_bf16, tensor_role::norm);
        b.add(-1, "", "output.weight", {D, hp.n_vocab}, dtype_class::dense,
              tensor_role::output_head);
    }
    if (with_dspark) {
        for (uint32_t s = 0; s < hp.n_dspark(); ++s) b.block(hp.n_layer + s);
    }
    return out;
}

}  // namespace magnetar
