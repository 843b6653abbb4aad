#include "model/catalogue.h"

#include "core/format.h"

namespace magnetar {

const char* tensor_role_name(tensor_role r) {
    switch (r) {
        case tensor_role::embedding:
            return "embedding";
        case tensor_role::output_head:
            return "output head";
        case tensor_role::hc:
            return "hyper-connections";
        case tensor_role::norm:
            return "norms";
        case tensor_role::attention:
            return "attention";
        case tensor_role::compressor:
            return "compressor";
        case tensor_role::indexer:
            return "indexer";
        case tensor_role::router:
            return "router";
        case tensor_role::shared_expert:
            return "shared expert";
        case tensor_role::routed_expert:
            return "routed experts";
        case tensor_role::hash_table:
            return "hash tables";
        case tensor_role::mtp:
            return "mtp";
        case tensor_role::engram:
            return "engram";
        case tensor_role::dspark:
            return "dspark";
    }
    return "?";
}

const char* dtype_class_name(dtype_class c) {
    switch (c) {
        case dtype_class::f32:
            return "f32";
        case dtype_class::float_any:
            return "f32/f16/bf16";
        case dtype_class::matrix:
            return "f32/f16/bf16/q8_0/q4_K/q2_K/iq2_xxs";
        case dtype_class::routed_expert:
            return "iq2_xxs/q2_K/q4_K/q8_0/f32/f16/bf16";
        case dtype_class::i32:
            return "i32";
        case dtype_class::norm_f32_bf16:
            return "f32/bf16";
        case dtype_class::dense:
            return "bf16/f32/f16/q8_0";
        case dtype_class::routed_expert_v41:
            return "mxfp4/iq2_xxs/q2_K/q4_K/q8_0/f32/f16/bf16";
        case dtype_class::engram_table:
            return "i8 (row264) or q8_0";
    }
    return "?";
}

bool dtype_class_accepts(dtype_class c, ggml_type t) {
    const type_traits* tr = find_type_traits(static_cast<uint32_t>(t));
    const bool is_float = tr != nullptr && tr->is_float;
    const bool is_weight_quant = t == ggml_type::Q8_0 || t == ggml_type::Q4_K ||
                                 t == ggml_type::Q2_K || t == ggml_type::IQ2_XXS;
    switch (c) {
        case dtype_class::f32:
            return t == ggml_type::F32;
        case dtype_class::float_any:
            return is_float;
        case dtype_class::matrix:
        case dtype_class::routed_expert:
            return is_float || is_weight_quant;
        case dtype_class::i32:
            return t == ggml_type::I32;
        case dtype_class::norm_f32_bf16:
            return t == ggml_type::F32 || t == ggml_type::BF16;
        case dtype_class::dense:
            return is_float || t == ggml_type::Q8_0;
        case dtype_class::routed_expert_v41:
            return is_float || is_weight_quant || t == ggml_type::MXFP4;
        case dtype_class::engram_table:
            return t == ggml_type::I8 || t == ggml_type::Q8_0;
    }
    return false;
}

std::vector<int64_t> expected_shape(const tensor_spec& spec, ggml_type t) {
    if (spec.dtype == dtype_class::engram_table && t == ggml_type::Q8_0 && !spec.ne.empty()) {
        std::vector<int64_t> ne = spec.ne;
        ne[0] = spec.ne[0] / 33 * 32;  // ED + ED/32 bytes -> ED values
        return ne;
    }
    return spec.ne;
}

std::string layer_prefix(const hparams& hp, uint32_t il) {
    if (hp.is_v41()) return strfmt("blk.%u.", il);
    return il < hp.n_layer ? strfmt("blk.%u.", il) : std::string("mtp.0.");
}

namespace {

struct builder {
    const hparams& hp;
    std::vector<tensor_spec>& out;

    void add(int32_t layer, const std::string& prefix, const std::string& suffix,
             std::vector<int64_t> ne, dtype_class dt, tensor_role role, bool required = true) {
        out.push_back({prefix + suffix, suffix, std::move(ne), dt, role, layer, required});
    }

    // One transformer block (main layer il < n_layer, or the MTP block il == n_layer).
    void block(uint32_t il) {
        const std::string p = layer_prefix(hp, il);
        const auto l = static_cast<int32_t>(il);
        const int64_t D = hp.n_embd;
        const int64_t hd = hp.n_head_dim;
        const int64_t H = hp.n_head;
        const int64_t hc_dim = static_cast<int64_t>(hp.n_hc) * D;
        const int64_t mix = hp.n_hc_mix();
        const bool mtp = il == hp.n_layer;
        const uint32_t ratio = mtp ? 0 : hp.compress_ratio(il);

        add(l, p, "hc_attn_fn.weight", {hc_dim, mix}, dtype_class::float_any, tensor_role::hc);
        add(l, p, "hc_attn_base.weight", {mix}, dtype_class::f32, tensor_role::hc);
        add(l, p, "hc_attn_scale.weight", {3}, dtype_class::f32, tensor_role::hc);
        add(l, p, "attn_norm.weight", {D}, dtype_class::f32, tensor_role::norm);
        add(l, p, "attn_q_a.weight", {D, hp.n_q_lora}, dtype_class::matrix, tensor_role::attention);
        add(l, p, "attn_q_a_norm.weight", {hp.n_q_lora}, dtype_class::f32, tensor_role::norm);
        add(l, p, "attn_q_b.weight", {hp.n_q_lora, H * hd}, dtype_class::matrix,
            tensor_role::attention);
        add(l, p, "attn_kv.weight", {D, hd}, dtype_class::matrix, tensor_role::attention);
        add(l, p, "attn_kv_a_norm.weight", {hd}, dtype_class::f32, tensor_role::norm);
        add(l, p, "attn_sinks.weight", {H}, dtype_class::f32, tensor_role::attention);
        add(l, p, "attn_output_a.weight",
            {hp.o_group_in(), static_cast<int64_t>(hp.n_o_group) * hp.n_o_lora},
            dtype_class::matrix, tensor_role::attention);
        add(l, p, "attn_output_b.weight", {static_cast<int64_t>(hp.n_o_group) * hp.n_o_lora, D},
            dtype_class::matrix, tensor_role::attention);

        if (ratio != 0) {
            const int64_t c = hparams::coff(ratio);
            add(l, p, "attn_compressor_ape.weight", {c * hd, ratio}, dtype_class::float_any,
                tensor_role::compressor);
            add(l, p, "attn_compressor_kv.weight", {D, c * hd}, dtype_class::float_any,
                tensor_role::compressor);
            add(l, p, "attn_compressor_gate.weight", {D, c * hd}, dtype_class::float_any,
                tensor_role::compressor);
            add(l, p, "attn_compressor_norm.weight", {hd}, dtype_class::f32, tensor_role::norm);
        }
        if (ratio == 4) {
            const int64_t Id = hp.n_indexer_head_dim;
            const int64_t IH = hp.n_indexer_head;
            add(l, p, "indexer.attn_q_b.weight", {hp.n_q_lora, IH * Id}, dtype_class::float_any,
                tensor_role::indexer);
            add(l, p, "indexer.proj.weight", {D, IH}, dtype_class::float_any, tensor_role::indexer);
            add(l, p, "indexer_compressor_ape.weight", {2 * Id, 4}, dtype_class::float_any,
                tensor_role::indexer);
            add(l, p, "indexer_compressor_kv.weight", {D, 2 * Id}, dtype_class::float_any,
                tensor_role::indexer);
            add(l, p, "indexer_compressor_gate.weight", {D, 2 * Id}, dtype_class::float_any,
                tensor_role::indexer);
            add(l, p, "indexer_compressor_norm.weight", {Id}, dtype_class::f32, tensor_role::norm);
        }

        add(l, p, "hc_ffn_fn.weight", {hc_dim, mix}, dtype_class::float_any, tensor_role::hc);
        add(l, p, "hc_ffn_base.weight", {mix}, dtype_class::f32, tensor_role::hc);
        add(l, p, "hc_ffn_scale.weight", {3}, dtype_class::f32, tensor_role::hc);
        add(l, p, "ffn_norm.weight", {D}, dtype_class::f32, tensor_role::norm);
        add(l, p, "ffn_gate_inp.weight", {D, hp.n_expert}, dtype_class::float_any,
            tensor_role::router);
        if (!mtp && hp.is_hash_layer(il)) {
            add(l, p, "ffn_gate_tid2eid.weight", {hp.n_expert_used, hp.n_vocab}, dtype_class::i32,
                tensor_role::hash_table);
        } else {
            // Optional for main layers (ds4 treats it so; published files have it), required
            // for the MTP block (spec §3.5).
            add(l, p, "exp_probs_b.bias", {hp.n_expert}, dtype_class::f32, tensor_role::router,
                mtp);
        }
        const int64_t F = hp.n_ff_exp;
        const int64_t E = hp.n_expert;
        add(l, p, "ffn_gate_exps.weight", {D, F, E}, dtype_class::routed_expert,
            tensor_role::routed_expert);
        add(l, p, "ffn_up_exps.weight", {D, F, E}, dtype_class::routed_expert,
            tensor_role::routed_expert);
        add(l, p, "ffn_down_exps.weight", {F, D, E}, dtype_class::routed_expert,
            tensor_role::routed_expert);
        add(l, p, "ffn_gate_shexp.weight", {D, F}, dtype_class::matrix, tensor_role::shared_expert);
        add(l, p, "ffn_up_shexp.weight", {D, F}, dtype_class::matrix, tensor_role::shared_expert);
        add(l, p, "ffn_down_shexp.weight", {F, D}, dtype_class::matrix, tensor_role::shared_expert);
    }

    void mtp_extra() {
        const std::string p = layer_prefix(hp, hp.n_layer);
        const auto l = static_cast<int32_t>(hp.n_layer);
        const int64_t D = hp.n_embd;
        add(l, p, "hc_head_fn.weight", {static_cast<int64_t>(hp.n_hc) * D, hp.n_hc},
            dtype_class::float_any, tensor_role::mtp);
        add(l, p, "hc_head_base.weight", {hp.n_hc}, dtype_class::f32, tensor_role::mtp);
        add(l, p, "hc_head_scale.weight", {1}, dtype_class::f32, tensor_role::mtp);
        add(l, p, "e_proj.weight", {D, D}, dtype_class::matrix, tensor_role::mtp);
        add(l, p, "h_proj.weight", {D, D}, dtype_class::matrix, tensor_role::mtp);
        add(l, p, "enorm.weight", {D}, dtype_class::f32, tensor_role::mtp);
        add(l, p, "hnorm.weight", {D}, dtype_class::f32, tensor_role::mtp);
        add(l, p, "norm.weight", {D}, dtype_class::f32, tensor_role::mtp);
    }
};

}  // namespace

std::vector<tensor_spec> tensor_catalogue(const hparams& hp, bool with_mtp) {
    if (hp.is_v41()) return tensor_catalogue_v41(hp, with_mtp);
    std::vector<tensor_spec> out;
    builder b{hp, out};
    const int64_t D = hp.n_embd;
    b.add(-1, "", "token_embd.weight", {D, hp.n_vocab}, dtype_class::matrix,
          tensor_role::embedding);
    for (uint32_t il = 0; il < hp.n_layer; ++il) b.block(il);
    b.add(-1, "", "output_hc_fn.weight", {static_cast<int64_t>(hp.n_hc) * D, hp.n_hc},
          dtype_class::float_any, tensor_role::hc);
    b.add(-1, "", "output_hc_base.weight", {hp.n_hc}, dtype_class::f32, tensor_role::hc);
    b.add(-1, "", "output_hc_scale.weight", {1}, dtype_class::f32, tensor_role::hc);
    b.add(-1, "", "output_norm.weight", {D}, dtype_class::f32, tensor_role::norm);
    b.add(-1, "", "output.weight", {D, hp.n_vocab}, dtype_class::matrix, tensor_role::output_head);
    if (with_mtp) {
        b.mtp_extra();
        b.block(hp.n_layer);
    }
    return out;
}

std::vector<tensor_spec> mtp_catalogue(const hparams& hp) {
    if (hp.is_v41()) return tensor_catalogue_v41(hp, true, true);
    std::vector<tensor_spec> out;
    builder b{hp, out};
    b.mtp_extra();
    b.block(hp.n_layer);
    return out;
}

}  // namespace magnetar
