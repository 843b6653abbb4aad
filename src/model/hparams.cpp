#include "model/hparams.h"

#include <cmath>

#include "core/error.h"
#include "core/format.h"
#include "gguf/gguf.h"
#include "gguf/typed.h"

namespace magnetar {

namespace {

using gguf::value;
using gguf::value_type;

// llama.cpp's expert_gating_func value for sqrt(softplus) routing scores (written for its loader).
constexpr uint32_t kGatingSqrtSoftplus = 4;

std::string key_of(const std::string& arch, const char* suffix) {
    return arch + "." + suffix;
}

using gguf::get_bool;
using gguf::get_f32_array;
using gguf::get_float;
using gguf::get_u32;
using gguf::get_u32_array;
using gguf::get_u32_opt;
using gguf::get_u32_or_u64;
using gguf::key_error;

bool is_pow2(uint32_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

// The products that size tensors (catalogue shapes, int64 element counts), caches (n_ctx rows
// of a head-wide entry per layer, uint64 bytes) and scratch stay far inside 64 bits for any
// values within the bounds, so a file that passes check_bounds() cannot overflow them. A
// session's n_ctx is bounded by kMaxContext in Engine::create_session before any sizing.
namespace L = hparam_limits;
constexpr uint64_t kProductLimit = uint64_t{1} << 56;
static_assert(uint64_t{L::kMaxEmbd} * L::kMaxFeedForward * L::kMaxExperts * 4 < kProductLimit,
              "routed expert tensors [D, F, E] in F32 bytes");
static_assert(uint64_t{L::kMaxRank} * L::kMaxHeads * L::kMaxHeadDim * 4 < kProductLimit,
              "attn_q_b [q_lora, H * hd] and attn_output_a [hd * H / G, G * o_lora] in bytes");
static_assert(uint64_t{L::kMaxHc} * L::kMaxEmbd * (2 + L::kMaxHc) * L::kMaxHc * 4 < kProductLimit,
              "HC mixers [n_hc * D, (2 + n_hc) * n_hc] in bytes");
static_assert(uint64_t{L::kMaxEmbd} * L::kMaxVocab * 4 < kProductLimit,
              "token_embd / output in bytes");
static_assert(L::kMaxContext * (L::kMaxHeadDim + L::kMaxIndexerHeadDim) * 4 * L::kMaxLayers <
                  kProductLimit,
              "FP32 compressed KV + indexer rows of every layer for a whole context");
static_assert(uint64_t{L::kMaxSlidingWindow} * 2 * L::kMaxHeadDim * 4 *
                      (L::kMaxLayers + L::kMaxDSparkStages + 1) <
                  kProductLimit,
              "raw window rings of every block");
static_assert(uint64_t{L::kMaxEngramVocab} * L::kMaxEngramPrimes *
                      (L::kMaxEngramHeadDim + L::kMaxEngramHeadDim / 32) <
                  kProductLimit,
              "Engram table rows (the prime sums) x row bytes");
static_assert(uint64_t{L::kMaxCandidateBlocks} * L::kMaxCandidateBlockSize < (uint64_t{1} << 31),
              "candidate pool positions fit an int32 index");
static_assert(L::kMaxContext * 16 * 64 < kProductLimit,
              "per-thread indexer scratch for a whole context");

}  // namespace

uint32_t hparams::count_layers_with_ratio(uint32_t ratio) const {
    uint32_t n = 0;
    for (uint32_t il = 0; il < n_layer; ++il) n += compress_ratio(il) == ratio ? 1 : 0;
    return n;
}

void hparams::validate() const {
    validate_shared();
    if (is_v41()) {
        validate_v41();
    } else {
        validate_v4();
    }
}

void hparams::check_bounds() const {
    auto fail = [&](const char* field, const std::string& what) {
        throw Error(strfmt("hyper-parameter %s.%s: %s", arch.c_str(), field, what.c_str()));
    };
    auto at_most = [&](const char* field, uint64_t v, uint64_t max, const char* why) {
        if (v > max) {
            fail(field, strfmt("expected at most %llu (%s), got %llu",
                               static_cast<unsigned long long>(max), why,
                               static_cast<unsigned long long>(v)));
        }
    };
    auto entries_at_most = [&](const char* field, size_t n, uint64_t max, const char* why) {
        if (n > max) {
            fail(field, strfmt("expected at most %llu entries (%s), got %zu",
                               static_cast<unsigned long long>(max), why, n));
        }
    };
    at_most("block_count", n_layer, L::kMaxLayers, "the engine's bound on layers");
    at_most("context_length", n_ctx_train, L::kMaxContext, "the engine's bound on context tokens");
    at_most("embedding_length", n_embd, L::kMaxEmbd, "the engine's bound on the embedding width");
    at_most("vocab_size", n_vocab, L::kMaxVocab, "the engine's bound on the vocabulary");
    at_most("attention.head_count", n_head, L::kMaxHeads, "the backends' per-head buffers");
    at_most("attention.key_length", n_head_dim, L::kMaxHeadDim,
            "the engine's bound on the head width");
    at_most("attention.value_length", n_value_dim, L::kMaxHeadDim,
            "the engine's bound on the head width");
    at_most("rope.dimension_count", n_rot, L::kMaxRot, "the backends' RoPE tables");
    at_most("attention.q_lora_rank", n_q_lora, L::kMaxRank, "the engine's bound on ranks");
    at_most("attention.output_lora_rank", n_o_lora, L::kMaxRank, "the engine's bound on ranks");
    at_most("attention.output_group_count", n_o_group, L::kMaxHeads,
            "the backends' per-head buffers");
    at_most("expert_count", n_expert, L::kMaxExperts, "the engine's bound on experts");
    at_most("expert_used_count", n_expert_used, L::kMaxExpertsUsed,
            "the routers' selection buffer");
    at_most("expert_feed_forward_length", n_ff_exp, L::kMaxFeedForward,
            "the engine's bound on the expert width");
    at_most("hash_layer_count", n_hash_layer, L::kMaxLayers, "the engine's bound on layers");
    at_most("attention.sliding_window", n_swa, L::kMaxSlidingWindow,
            "the engine's bound on the window");
    at_most("attention.indexer.head_count", n_indexer_head, L::kMaxHeads,
            "the backends' per-head buffers");
    at_most("attention.indexer.key_length", n_indexer_head_dim, L::kMaxIndexerHeadDim,
            "the CPU indexer's key buffer");
    at_most("attention.indexer.top_k", n_indexer_top_k, L::kMaxIndexerTopK,
            "the engine's bound on top-k");
    at_most("hyper_connection.count", n_hc, L::kMaxHc, "the backends' HC buffers");
    at_most("hyper_connection.sinkhorn_iterations", n_sinkhorn_iter, L::kMaxSinkhornIterations,
            "the engine's bound on Sinkhorn iterations");
    at_most("rope.scaling.original_context_length", rope_orig_ctx, L::kMaxContext,
            "the engine's bound on context tokens");
    entries_at_most("attention.compress_ratios", compress_ratios.size(), L::kMaxBlockList,
                    "blocks + 1");
    entries_at_most("swiglu_clamp_exp", swiglu_clamp.size(), L::kMaxBlockList, "blocks + 1");
    if (!is_v41()) return;

    const v41_hparams& v = v41;
    at_most("nextn_predict_layers", v.n_dspark, L::kMaxDSparkStages,
            "the engine's bound on DSpark stages");
    entries_at_most("swiglu_clamp_shexp", v.swiglu_clamp_shexp.size(), L::kMaxBlockList,
                    "blocks + 1");
    entries_at_most("attention.kv_source_layer_ids", v.kv_sources.size(), L::kMaxLayers,
                    "one per layer");
    entries_at_most("attention.index_source_layer_ids", v.index_sources.size(), L::kMaxLayers,
                    "one per layer");
    at_most("attention.candidate_topk_blocks", v.candidate_topk_blocks, L::kMaxCandidateBlocks,
            "the engine's bound on candidate blocks");
    at_most("attention.candidate_block_size", v.candidate_block_size, L::kMaxCandidateBlockSize,
            "the engine's bound on the candidate block");
    const engram_hparams& e = v.engram;
    entries_at_most("engram.layer_ids", e.layer_ids.size(), L::kMaxLayers, "one per layer");
    at_most("engram.max_ngram_size", e.max_ngram, L::kMaxEngramNgram,
            "the engine's bound on n-gram sizes");
    at_most("engram.head_count", e.n_head, L::kMaxEngramHeads,
            "the engine's bound on Engram heads");
    at_most("engram.key_length", e.head_dim, L::kMaxEngramHeadDim,
            "the engine's bound on the Engram head width");
    at_most("engram.vocab_size", e.vocab_size, L::kMaxEngramVocab,
            "the engine's bound on the prime search start");
    at_most("engram.compressed_vocab_size", e.compressed_vocab, L::kMaxVocab,
            "the engine's bound on the vocabulary");
    const uint64_t n_primes = static_cast<uint64_t>(e.layer_ids.size()) *
                              (e.max_ngram > 1 ? e.max_ngram - 1 : 0) * e.n_head;
    if (n_primes > L::kMaxEngramPrimes) {
        fail("engram.head_count", strfmt("Engram layers x (max_ngram_size - 1) x head_count = %zu "
                                         "x %u x %u = %llu bucket primes: expected "
                                         "at most %llu (the primes are searched at load)",
                                         e.layer_ids.size(), e.max_ngram - 1, e.n_head,
                                         static_cast<unsigned long long>(n_primes),
                                         static_cast<unsigned long long>(L::kMaxEngramPrimes)));
    }
    const dspark_hparams& d = v.dspark;
    at_most("dspark.block_size", d.block_size, L::kMaxDSparkBlockSize,
            "the engine's bound on the draft block");
    at_most("dspark.markov_rank", d.markov_rank, L::kMaxRank, "the engine's bound on ranks");
    at_most("dspark.expert_count", d.n_expert, L::kMaxExperts, "the engine's bound on experts");
    at_most("dspark.expert_used_count", d.n_expert_used, L::kMaxExpertsUsed,
            "the routers' selection buffer");
    entries_at_most("dspark.target_layer_ids", d.target_layers.size(), L::kMaxLayers,
                    "one per layer");
}

// The checks both architectures share, before their own.
void hparams::validate_shared() const {
    check_bounds();
    auto fail = [&](const char* field, const std::string& what) {
        throw Error(strfmt("hyper-parameter %s.%s: %s", arch.c_str(), field, what.c_str()));
    };
    auto positive = [&](const char* field, uint64_t v) {
        if (v == 0) fail(field, "must be > 0, got 0");
    };
    positive("context_length", n_ctx_train);
    if (n_swa > n_ctx_train) {
        fail("attention.sliding_window",
             strfmt("expected at most context_length = %llu, got %u",
                    static_cast<unsigned long long>(n_ctx_train), n_swa));
    }
    positive("block_count", n_layer);
    positive("embedding_length", n_embd);
    positive("vocab_size", n_vocab);
    positive("attention.head_count", n_head);
    positive("attention.key_length", n_head_dim);
    positive("rope.dimension_count", n_rot);
    positive("attention.q_lora_rank", n_q_lora);
    positive("attention.output_lora_rank", n_o_lora);
    positive("attention.output_group_count", n_o_group);
    positive("expert_count", n_expert);
    positive("expert_used_count", n_expert_used);
    positive("expert_feed_forward_length", n_ff_exp);
    positive("attention.sliding_window", n_swa);
    positive("hyper_connection.count", n_hc);
    positive("hyper_connection.sinkhorn_iterations", n_sinkhorn_iter);
    if (n_head_kv != 1)
        fail("attention.head_count_kv",
             strfmt("expected 1 (one shared KV latent), got %u", n_head_kv));
    if (n_value_dim != n_head_dim) {
        fail(
            "attention.value_length",
            strfmt("expected %u (= attention.key_length: keys and values share one latent), got %u",
                   n_head_dim, n_value_dim));
    }
}

void hparams::validate_v4() const {
    auto fail = [&](const char* field, const std::string& what) {
        throw Error(strfmt("hyper-parameter %s.%s: %s", arch.c_str(), field, what.c_str()));
    };
    auto positive = [&](const char* field, uint64_t v) {
        if (v == 0) fail(field, "must be > 0, got 0");
    };
    if (n_rot % 2 != 0 || n_rot > n_head_dim) {
        fail("rope.dimension_count",
             strfmt("expected an even value <= key_length %u, got %u", n_head_dim, n_rot));
    }
    if (n_nope() % 64 != 0) {
        fail("attention.key_length", strfmt("key_length - rope.dimension_count must be a multiple "
                                            "of 64 (FP8 blocks), got %u - %u",
                                            n_head_dim, n_rot));
    }
    if (n_head % n_o_group != 0) {
        fail("attention.output_group_count",
             strfmt("must divide attention.head_count %u, got %u", n_head, n_o_group));
    }
    if (n_expert_used > n_expert) {
        fail("expert_used_count",
             strfmt("must be <= expert_count %u, got %u", n_expert, n_expert_used));
    }
    if (n_expert_shared != 1)
        fail("expert_shared_count", strfmt("expected 1, got %u", n_expert_shared));
    if (n_hash_layer > n_layer)
        fail("hash_layer_count",
             strfmt("must be <= block_count %u, got %u", n_layer, n_hash_layer));
    if (n_expert_group > 1 || n_expert_group_used > 1) {
        fail("expert_group_count",
             strfmt("grouped expert routing is not part of DeepSeek V4 (got %u / %u)",
                    n_expert_group, n_expert_group_used));
    }
    if (compress_ratios.size() < n_layer ||
        compress_ratios.size() > static_cast<size_t>(n_layer) + 1) {
        fail("attention.compress_ratios",
             strfmt("expected block_count = %u entries (+1 for the MTP block), got %zu", n_layer,
                    compress_ratios.size()));
    }
    bool any_r4 = false;
    for (uint32_t il = 0; il < n_layer; ++il) {
        uint32_t r = compress_ratios[il];
        if (r != 0 && r != 4 && r != 128) {
            fail("attention.compress_ratios",
                 strfmt("entry %u: expected 0, 4 or 128, got %u", il, r));
        }
        any_r4 = any_r4 || r == 4;
    }
    if (swiglu_clamp.size() < n_layer || swiglu_clamp.size() > static_cast<size_t>(n_layer) + 1) {
        fail("swiglu_clamp_exp",
             strfmt("expected block_count = %u entries (+1 for the MTP block), got %zu", n_layer,
                    swiglu_clamp.size()));
    }
    for (uint32_t il = 0; il < n_layer; ++il) {
        if (!(swiglu_clamp[il] > 0.0f) || !std::isfinite(swiglu_clamp[il])) {
            fail("swiglu_clamp_exp", strfmt("entry %u must be a positive finite value, got %g", il,
                                            static_cast<double>(swiglu_clamp[il])));
        }
    }
    if (any_r4) {
        positive("attention.indexer.head_count", n_indexer_head);
        positive("attention.indexer.top_k", n_indexer_top_k);
        // A ratio-4 layer holds context_length / 4 compressed rows: no more can be selected.
        if (n_indexer_top_k > n_ctx_train / 4) {
            fail("attention.indexer.top_k",
                 strfmt("expected at most context_length / 4 = %llu (the compressed rows a ratio-4 "
                        "layer holds), got %u",
                        static_cast<unsigned long long>(n_ctx_train / 4), n_indexer_top_k));
        }
        if (!is_pow2(n_indexer_head_dim) || n_indexer_head_dim % 32 != 0) {
            fail("attention.indexer.key_length",
                 strfmt("expected a power of two >= 32 (Hadamard, FP4 blocks of 32), got %u",
                        n_indexer_head_dim));
        }
        if (n_rot > n_indexer_head_dim) {
            fail("attention.indexer.key_length",
                 strfmt("must be >= rope.dimension_count %u, got %u", n_rot, n_indexer_head_dim));
        }
    }
    auto positive_f = [&](const char* field, float v) {
        if (!(v > 0.0f) || !std::isfinite(v))
            fail(field, strfmt("must be a positive finite value, got %g", static_cast<double>(v)));
    };
    // RoPE bases: the YaRN ramp divides by ln(base).
    auto greater_than_one = [&](const char* field, float v) {
        if (!(v > 1.0f) || !std::isfinite(v))
            fail(field, strfmt("must be a finite value > 1, got %g", static_cast<double>(v)));
    };
    greater_than_one("rope.freq_base", rope_freq_base);
    greater_than_one("attention.compress_rope_freq_base", compress_rope_freq_base);
    positive_f("rope.scaling.factor", rope_scaling_factor);
    positive_f("rope.scaling.yarn_beta_fast", yarn_beta_fast);
    positive_f("rope.scaling.yarn_beta_slow", yarn_beta_slow);
    positive_f("expert_weights_scale", expert_weights_scale);
    positive_f("attention.layer_norm_rms_epsilon", rms_eps);
    positive_f("hyper_connection.epsilon", hc_eps);
    if (rope_orig_ctx == 0) fail("rope.scaling.original_context_length", "must be > 0, got 0");
}

hparams read_hparams(const gguf::reader& f) {
    const value* archv = f.find("general.architecture");
    if (!archv) key_error(f, "general.architecture", "required key is missing");
    if (archv->type != value_type::string)
        key_error(f, "general.architecture", "expected a string");
    if (archv->s == kArchDeepseek41) return read_hparams_v41(f);
    if (archv->s != kArchDeepseek4) {
        key_error(f, "general.architecture",
                  strfmt("expected '%s', got '%s' (supported architectures: %s, %s)",
                         kArchDeepseek4, archv->s.c_str(), kArchDeepseek4, kArchDeepseek41));
    }
    hparams hp;
    const std::string a = archv->s;
    if (const value* n = f.find("general.name"); n && n->type == value_type::string) hp.name = n->s;
    hp.n_layer = get_u32(f, key_of(a, "block_count"));
    hp.n_ctx_train = get_u32_or_u64(f, key_of(a, "context_length"));
    hp.n_embd = get_u32(f, key_of(a, "embedding_length"));
    hp.n_vocab = get_u32(f, key_of(a, "vocab_size"));
    hp.n_head = get_u32(f, key_of(a, "attention.head_count"));
    hp.n_head_kv = get_u32(f, key_of(a, "attention.head_count_kv"));
    hp.n_head_dim = get_u32(f, key_of(a, "attention.key_length"));
    hp.n_value_dim = get_u32(f, key_of(a, "attention.value_length"));
    hp.n_rot = get_u32(f, key_of(a, "rope.dimension_count"));
    hp.n_q_lora = get_u32(f, key_of(a, "attention.q_lora_rank"));
    hp.n_o_lora = get_u32(f, key_of(a, "attention.output_lora_rank"));
    hp.n_o_group = get_u32(f, key_of(a, "attention.output_group_count"));
    hp.n_expert = get_u32(f, key_of(a, "expert_count"));
    hp.n_expert_used = get_u32(f, key_of(a, "expert_used_count"));
    hp.n_ff_exp = get_u32(f, key_of(a, "expert_feed_forward_length"));
    hp.n_expert_shared = get_u32(f, key_of(a, "expert_shared_count"));
    hp.n_hash_layer = get_u32(f, key_of(a, "hash_layer_count"));
    hp.n_expert_group = get_u32_opt(f, key_of(a, "expert_group_count"), 0);
    hp.n_expert_group_used = get_u32_opt(f, key_of(a, "expert_group_used_count"), 0);
    hp.n_swa = get_u32(f, key_of(a, "attention.sliding_window"));
    hp.n_indexer_head = get_u32(f, key_of(a, "attention.indexer.head_count"));
    hp.n_indexer_head_dim = get_u32(f, key_of(a, "attention.indexer.key_length"));
    hp.n_indexer_top_k = get_u32(f, key_of(a, "attention.indexer.top_k"));
    hp.n_hc = get_u32(f, key_of(a, "hyper_connection.count"));
    hp.n_sinkhorn_iter = get_u32(f, key_of(a, "hyper_connection.sinkhorn_iterations"));
    hp.compress_ratios = get_u32_array(f, key_of(a, "attention.compress_ratios"));
    hp.swiglu_clamp = get_f32_array(f, key_of(a, "swiglu_clamp_exp"));
    hp.rope_orig_ctx = get_u32_or_u64(f, key_of(a, "rope.scaling.original_context_length"));
    hp.rope_freq_base = get_float(f, key_of(a, "rope.freq_base"));
    hp.rope_scaling_factor = get_float(f, key_of(a, "rope.scaling.factor"));
    hp.yarn_beta_fast = get_float(f, key_of(a, "rope.scaling.yarn_beta_fast"));
    hp.yarn_beta_slow = get_float(f, key_of(a, "rope.scaling.yarn_beta_slow"));
    hp.compress_rope_freq_base = get_float(f, key_of(a, "attention.compress_rope_freq_base"));
    hp.expert_weights_scale = get_float(f, key_of(a, "expert_weights_scale"));
    hp.rms_eps = get_float(f, key_of(a, "attention.layer_norm_rms_epsilon"));
    hp.hc_eps = get_float(f, key_of(a, "hyper_connection.epsilon"));
    hp.expert_weights_norm = get_bool(f, key_of(a, "expert_weights_norm"));
    try {
        hp.validate();
    } catch (const Error& e) {
        throw Error(f.path() + ": " + e.what());
    }
    return hp;
}

void write_hparams(gguf::writer& w, const hparams& hp) {
    if (hp.is_v41()) {
        write_hparams_v41(w, hp);
        return;
    }
    const std::string& a = hp.arch;
    w.set("general.architecture", value::make_string(a));
    if (!hp.name.empty()) w.set("general.name", value::make_string(hp.name));
    auto u32 = [&](const char* k, uint32_t v) { w.set(key_of(a, k), value::make_u32(v)); };
    auto f32 = [&](const char* k, float v) { w.set(key_of(a, k), value::make_f32(v)); };
    u32("block_count", hp.n_layer);
    // u32 as in the published files (the reader takes u64 as well; llama.cpp only u32).
    w.set(key_of(a, "context_length"), hp.n_ctx_train <= UINT32_MAX
                                           ? value::make_u32(static_cast<uint32_t>(hp.n_ctx_train))
                                           : value::make_u64(hp.n_ctx_train));
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
    u32("expert_count", hp.n_expert);
    u32("expert_used_count", hp.n_expert_used);
    u32("expert_feed_forward_length", hp.n_ff_exp);
    u32("expert_shared_count", hp.n_expert_shared);
    u32("hash_layer_count", hp.n_hash_layer);
    u32("attention.sliding_window", hp.n_swa);
    u32("attention.indexer.head_count", hp.n_indexer_head);
    u32("attention.indexer.key_length", hp.n_indexer_head_dim);
    u32("attention.indexer.top_k", hp.n_indexer_top_k);
    u32("hyper_connection.count", hp.n_hc);
    u32("hyper_connection.sinkhorn_iterations", hp.n_sinkhorn_iter);
    std::vector<int32_t> ratios(hp.compress_ratios.begin(), hp.compress_ratios.end());
    w.set(key_of(a, "attention.compress_ratios"), value::make_i32_array(ratios));
    // One clamp per block, as published (the MTP block takes the last one; the reader also
    // takes a block_count + 1 entry list, which llama.cpp refuses).
    std::vector<float> clamp(
        hp.swiglu_clamp.begin(),
        hp.swiglu_clamp.begin() + std::min<size_t>(hp.swiglu_clamp.size(), hp.n_layer));
    w.set(key_of(a, "swiglu_clamp_exp"), value::make_f32_array(clamp));
    w.set(key_of(a, "rope.scaling.original_context_length"),
          value::make_u32(static_cast<uint32_t>(hp.rope_orig_ctx)));
    f32("rope.freq_base", hp.rope_freq_base);
    f32("rope.scaling.factor", hp.rope_scaling_factor);
    w.set(key_of(a, "rope.scaling.type"), value::make_string("yarn"));
    f32("rope.scaling.yarn_beta_fast", hp.yarn_beta_fast);
    f32("rope.scaling.yarn_beta_slow", hp.yarn_beta_slow);
    f32("attention.compress_rope_freq_base", hp.compress_rope_freq_base);
    f32("expert_weights_scale", hp.expert_weights_scale);
    f32("attention.layer_norm_rms_epsilon", hp.rms_eps);
    f32("hyper_connection.epsilon", hp.hc_eps);
    w.set(key_of(a, "expert_weights_norm"), value::make_bool(hp.expert_weights_norm));
    // Not read here (the router is always sqrt(softplus)); the published files and llama.cpp's
    // loader carry it: llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SQRTSOFTPLUS.
    u32("expert_gating_func", kGatingSqrtSoftplus);
}

}  // namespace magnetar
