// DeepSeek V4.1 (`deepseek41`) hyper-parameters, writing: the keys back to a GGUF (generator,
// quantizer).
//
// Owns: write_hparams_v41, which writes the proposed keys of spec v41.md §2.4 only (never the
// HF-named aliases or a `deepseek41.config` JSON) and refuses an Engram model without its real
// token map. Does not own: reading (hparams_v41.cpp) or validation (hparams_v41_validate.cpp).
#include <utility>

#include "core/error.h"
#include "core/format.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "model/hparams_v41_internal.h"

namespace magnetar {

namespace {

using detail::kEngramEncodingRow264;
using gguf::value;
using gguf::value_type;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writing (the proposed keys only)
// ---------------------------------------------------------------------------------------------

void write_hparams_v41(gguf::writer& w, const hparams& hp) {
    const std::string a = kArchDeepseek41;
    const engram_hparams& e = hp.v41.engram;
    if (!e.layer_ids.empty() && e.token_map.size() != hp.n_vocab) {
        throw Error(
            strfmt("%s: no Engram token map of %u entries (it needs the real tokenizer); "
                   "cannot write a deepseek41 file",
                   hp.name.c_str(), hp.n_vocab));
    }
    auto key = [&](const char* s) { return a + "." + s; };
    auto u32 = [&](const char* k, uint32_t v) { w.set(key(k), value::make_u32(v)); };
    auto f32 = [&](const char* k, float v) { w.set(key(k), value::make_f32(v)); };
    auto u32_array = [&](const char* k, const std::vector<uint32_t>& v) {
        std::vector<value> items;
        for (uint32_t x : v) items.push_back(value::make_u32(x));
        w.set(key(k), value::make_array(value_type::u32, std::move(items)));
    };
    auto u64_array = [&](const char* k, const std::vector<uint64_t>& v) {
        std::vector<value> items;
        for (uint64_t x : v) items.push_back(value::make_u64(x));
        w.set(key(k), value::make_array(value_type::u64, std::move(items)));
    };
    w.set("general.architecture", value::make_string(a));
    if (!hp.name.empty()) w.set("general.name", value::make_string(hp.name));
    u32("block_count", hp.n_layer);
    w.set(key("context_length"), value::make_u64(hp.n_ctx_train));
    u32("embedding_length", hp.n_embd);
    u32("vocab_size", hp.n_vocab);
    u32("attention.head_count", hp.n_head);
    u32("attention.head_count_kv", hp.n_head_kv);
    u32("attention.key_length", hp.n_head_dim);
    u32("attention.value_length", hp.n_value_dim);
    u32("rope.dimension_count", hp.n_rot);
    u32("attention.q_lora_rank", hp.n_q_lora);
    u32("attention.output_lora_rank", hp.n_o_lora);
    u32("attention.output_group_count", hp.n_o_group);
    u32("attention.sliding_window", hp.n_swa);
    u32("expert_count", hp.n_expert);
    u32("expert_used_count", hp.n_expert_used);
    u32("expert_feed_forward_length", hp.n_ff_exp);
    u32("expert_shared_count", hp.n_expert_shared);
    u32("hash_layer_count", hp.n_hash_layer);
    w.set(key("expert_scoring_func"), value::make_string(hp.v41.scoring_func));
    f32("expert_weights_scale", hp.expert_weights_scale);
    w.set(key("expert_weights_norm"), value::make_bool(hp.expert_weights_norm));
    f32("expert_gate_temp", hp.v41.gate_temp);
    u32("attention.indexer.head_count", hp.n_indexer_head);
    u32("attention.indexer.key_length", hp.n_indexer_head_dim);
    u32("attention.indexer.top_k", hp.n_indexer_top_k);
    u32("hyper_connection.count", hp.n_hc);
    u32("hyper_connection.sinkhorn_iterations", hp.n_sinkhorn_iter);
    f32("hyper_connection.epsilon", hp.hc_eps);
    u32("nextn_predict_layers", hp.v41.n_dspark);
    std::vector<int32_t> ratios(hp.compress_ratios.begin(), hp.compress_ratios.end());
    w.set(key("attention.compress_ratios"), value::make_i32_array(ratios));
    u32_array("attention.kv_source_layer_ids", hp.v41.kv_sources);
    u32_array("attention.index_source_layer_ids", hp.v41.index_sources);
    w.set(key("attention.candidate_source_layer_id"), value::make_i32(hp.v41.candidate_source));
    u32("attention.candidate_topk_blocks", hp.v41.candidate_topk_blocks);
    u32("attention.candidate_block_size", hp.v41.candidate_block_size);
    w.set(key("swiglu_clamp_exp"), value::make_f32_array(hp.swiglu_clamp));
    if (!hp.v41.swiglu_clamp_shexp.empty())
        w.set(key("swiglu_clamp_shexp"), value::make_f32_array(hp.v41.swiglu_clamp_shexp));
    w.set(key("rope.scaling.original_context_length"),
          value::make_u32(static_cast<uint32_t>(hp.rope_orig_ctx)));
    f32("rope.freq_base", hp.rope_freq_base);
    f32("rope.scaling.factor", hp.rope_scaling_factor);
    w.set(key("rope.scaling.type"), value::make_string("yarn"));
    f32("rope.scaling.yarn_beta_fast", hp.yarn_beta_fast);
    f32("rope.scaling.yarn_beta_slow", hp.yarn_beta_slow);
    f32("attention.compress_rope_freq_base", hp.compress_rope_freq_base);
    f32("attention.layer_norm_rms_epsilon", hp.rms_eps);

    u32_array("engram.layer_ids", e.layer_ids);
    if (!e.layer_ids.empty()) {
        u64_array("engram.num_embeddings", e.num_embeddings);
        u32("engram.vocab_size", e.vocab_size);
        u32("engram.max_ngram_size", e.max_ngram);
        u32("engram.head_count", e.n_head);
        u32("engram.key_length", e.head_dim);
        u32("engram.compressed_vocab_size", e.compressed_vocab);
        u32("engram.pad_id", e.pad_id);
        w.set(key("engram.token_map"), value::make_i32_array(e.token_map));
        u64_array("engram.multipliers", e.multipliers);
        u64_array("engram.primes", e.primes);
        u64_array("engram.offsets", e.offsets);
        w.set(key("engram.encoding"), value::make_string(kEngramEncodingRow264));
    }
    if (hp.v41.n_dspark > 0) {
        const dspark_hparams& d = hp.v41.dspark;
        u32("dspark.block_size", d.block_size);
        u32("dspark.noise_token_id", d.noise_token_id);
        u32_array("dspark.target_layer_ids", d.target_layers);
        u32("dspark.markov_rank", d.markov_rank);
        u32("dspark.expert_count", d.n_expert);
        u32("dspark.expert_used_count", d.n_expert_used);
    }
}

}  // namespace magnetar
