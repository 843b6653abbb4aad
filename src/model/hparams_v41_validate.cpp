// DeepSeek V4.1 (`deepseek41`) hyper-parameters, meaning: the derived layer roles of spec
// v41.md §1.3, the Engram primes and offsets (§3.9.2) and validation C1-C8 (+ the Engram checks
// of §3.9.2-§3.9.3 and §9.11).
//
// Owns: layer_mode_name, the hparams role queries (KV / index / candidate sources, layer mode,
// Engram layer index), the Engram multiplier bound, engram_primes / engram_offsets and
// hparams::validate_v41. Does not own: reading the keys and their aliases (hparams_v41.cpp),
// writing them (hparams_v41_write.cpp), check_bounds and the V4 checks (hparams.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/format.h"
#include "model/engram_hash.h"
#include "model/hparams.h"

namespace magnetar {

namespace {

bool is_pow2(uint32_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

std::string list_str(const std::vector<uint32_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Roles
// ---------------------------------------------------------------------------------------------

const char* layer_mode_name(layer_mode m) {
    switch (m) {
        case layer_mode::swa_only:
            return "swa";
        case layer_mode::full:
            return "full";
        case layer_mode::reindex:
            return "reindex";
        case layer_mode::reuse:
            return "reuse";
        case layer_mode::dspark:
            return "dspark";
    }
    return "?";
}

bool hparams::is_kv_source(uint32_t il) const {
    return il < n_layer &&
           std::find(v41.kv_sources.begin(), v41.kv_sources.end(), il) != v41.kv_sources.end();
}

bool hparams::is_index_source(uint32_t il) const {
    return il < n_layer && std::find(v41.index_sources.begin(), v41.index_sources.end(), il) !=
                               v41.index_sources.end();
}

bool hparams::is_candidate_src(uint32_t il) const {
    return is_index_source(il) && static_cast<int64_t>(il) == v41.candidate_source;
}

bool hparams::uses_candidates(uint32_t il) const {
    return is_index_source(il) && v41.candidate_source >= 0 &&
           v41.candidate_source < static_cast<int64_t>(il);
}

int32_t hparams::kv_source(uint32_t il) const {
    if (il >= n_layer || compress_ratio(il) == 0) return -1;
    int32_t best = -1;
    for (uint32_t s : v41.kv_sources) {
        if (s <= il && static_cast<int32_t>(s) > best) best = static_cast<int32_t>(s);
    }
    return best;
}

int32_t hparams::index_source(uint32_t il) const {
    if (il >= n_layer || compress_ratio(il) == 0) return -1;
    int32_t best = -1;
    for (uint32_t s : v41.index_sources) {
        if (s <= il && static_cast<int32_t>(s) > best) best = static_cast<int32_t>(s);
    }
    return best;
}

layer_mode hparams::mode(uint32_t il) const {
    if (il >= n_layer) return layer_mode::dspark;
    if (compress_ratio(il) == 0) return layer_mode::swa_only;
    if (is_kv_source(il)) return layer_mode::full;
    if (is_index_source(il)) return layer_mode::reindex;
    return layer_mode::reuse;
}

uint32_t hparams::count_mode(layer_mode m) const {
    if (m == layer_mode::dspark) return v41.n_dspark;
    uint32_t n = 0;
    for (uint32_t il = 0; il < n_layer; ++il) n += mode(il) == m ? 1 : 0;
    return n;
}

int32_t hparams::engram_index(uint32_t il) const {
    const auto& ids = v41.engram.layer_ids;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == il) return static_cast<int32_t>(i);
    }
    return -1;
}

uint64_t engram_hparams::multiplier_bound() const {
    if (compressed_vocab == 0) return 1;
    const uint64_t b =
        (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / compressed_vocab) / 2;
    return std::max<uint64_t>(b, 1);
}

std::vector<uint64_t> engram_primes(uint64_t vocab_size, uint32_t max_ngram, uint32_t n_head,
                                    size_t n_layers) {
    std::vector<uint64_t> out;
    if (max_ngram < 2 || vocab_size == 0 || n_head == 0) return out;
    // The search itself is engram::bucket_primes (model/engram_hash.h), flattened.
    for (const auto& layer :
         engram::bucket_primes(static_cast<int64_t>(vocab_size), static_cast<int>(n_layers),
                               static_cast<int>(max_ngram), static_cast<int>(n_head))) {
        out.insert(out.end(), layer.begin(), layer.end());
    }
    return out;
}

std::vector<uint64_t> engram_offsets(const std::vector<uint64_t>& primes, uint32_t n_col) {
    std::vector<uint64_t> out(primes.size(), 0);
    if (n_col == 0) return out;
    for (size_t i = 0; i < primes.size(); ++i) {
        out[i] = i % n_col == 0 ? 0 : out[i - 1] + primes[i - 1];
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Validation (C1-C8 of spec v41.md §1.3)
// ---------------------------------------------------------------------------------------------

void hparams::validate_v41() const {
    auto fail = [&](const char* field, const std::string& what) {
        throw Error(strfmt("hyper-parameter %s.%s: %s", arch.c_str(), field, what.c_str()));
    };
    auto positive = [&](const char* field, uint64_t v) {
        if (v == 0) fail(field, "must be > 0, got 0");
    };
    auto positive_f = [&](const char* field, float v) {
        if (!(v > 0.0f) || !std::isfinite(v))
            fail(field, strfmt("must be a positive finite value, got %g", static_cast<double>(v)));
    };
    auto mult32 = [&](const char* field, const char* what, uint64_t v) {
        if (v % 32 != 0)
            fail(field, strfmt("%s = %llu must be a multiple of 32 (FP8/FP4 blocks of 32, C6)",
                               what, static_cast<unsigned long long>(v)));
    };
    if (n_head % n_o_group != 0)
        fail("attention.output_group_count",
             strfmt("must divide attention.head_count %u, got %u (C6)", n_head, n_o_group));
    if (n_expert_used > n_expert)
        fail("expert_used_count",
             strfmt("must be <= expert_count %u, got %u", n_expert, n_expert_used));
    if (n_expert_shared != 1)
        fail("expert_shared_count", strfmt("expected 1, got %u", n_expert_shared));
    if (n_hash_layer != 0)
        fail("hash_layer_count",
             strfmt("DeepSeek V4.1 has no hash-routed layers: expected 0, got %u", n_hash_layer));
    if (n_expert_group > 1 || n_expert_group_used > 1) {
        fail("expert_group_count",
             strfmt("grouped expert routing is not part of DeepSeek V4.1 (got %u / %u)",
                    n_expert_group, n_expert_group_used));
    }
    if (v41.scoring_func != "sqrtsoftplus" && v41.scoring_func != "softmax" &&
        v41.scoring_func != "sigmoid") {
        fail("expert_scoring_func", strfmt("expected sqrtsoftplus, softmax or sigmoid, got '%s'",
                                           v41.scoring_func.c_str()));
    }
    positive_f("expert_gate_temp", v41.gate_temp);

    // C1: ratio list covers the backbone and the DSpark stages; 0/1/2 only; stages 0.
    const uint32_t n_blocks = n_layer + v41.n_dspark;
    if (compress_ratios.size() < n_blocks ||
        compress_ratios.size() > static_cast<size_t>(n_blocks) + 1) {
        fail(
            "attention.compress_ratios",
            strfmt(
                "expected block_count + nextn_predict_layers = %u entries (+1 spare), got %zu (C1)",
                n_blocks, compress_ratios.size()));
    }
    for (uint32_t il = 0; il < n_blocks; ++il) {
        const uint32_t r = compress_ratios[il];
        if (r > 2)
            fail("attention.compress_ratios",
                 strfmt("entry %u: expected 0, 1 or 2, got %u (C1)", il, r));
        if (il >= n_layer && r != 0) {
            fail("attention.compress_ratios",
                 strfmt("entry %u is DSpark stage %u and must be 0, got %u (C1)", il, il - n_layer,
                        r));
        }
    }
    if (swiglu_clamp.size() < n_layer || swiglu_clamp.size() > static_cast<size_t>(n_blocks) + 1) {
        fail("swiglu_clamp_exp", strfmt("expected block_count = %u to block_count + "
                                        "nextn_predict_layers + 1 = %u entries, got %zu",
                                        n_layer, n_blocks + 1, swiglu_clamp.size()));
    }
    if (v41.swiglu_clamp_shexp.size() > static_cast<size_t>(n_blocks) + 1) {
        fail("swiglu_clamp_shexp",
             strfmt("expected at most block_count + nextn_predict_layers + 1 = %u entries, got %zu",
                    n_blocks + 1, v41.swiglu_clamp_shexp.size()));
    }
    for (size_t i = 0; i < swiglu_clamp.size(); ++i) {
        if (!(swiglu_clamp[i] > 0.0f) || !std::isfinite(swiglu_clamp[i])) {
            fail("swiglu_clamp_exp", strfmt("entry %zu must be a positive finite value, got %g", i,
                                            static_cast<double>(swiglu_clamp[i])));
        }
    }

    // C2: strictly increasing backbone layers with r > 0; kv_sources within index_sources.
    auto check_sources = [&](const char* field, const std::vector<uint32_t>& src) {
        for (size_t i = 0; i < src.size(); ++i) {
            if (i > 0 && src[i] <= src[i - 1])
                fail(field,
                     strfmt("must be strictly increasing, got %s (C2)", list_str(src).c_str()));
            if (src[i] >= n_layer)
                fail(field, strfmt("layer %u is not a backbone layer (block_count %u) (C2)", src[i],
                                   n_layer));
            if (compress_ratios[src[i]] == 0)
                fail(field, strfmt("layer %u has attention.compress_ratios[%u] = 0; sources need "
                                   "ratio > 0 (C2)",
                                   src[i], src[i]));
        }
    };
    check_sources("attention.kv_source_layer_ids", v41.kv_sources);
    check_sources("attention.index_source_layer_ids", v41.index_sources);
    for (uint32_t s : v41.kv_sources) {
        if (!is_index_source(s)) {
            fail("attention.kv_source_layer_ids",
                 strfmt("KV source %u is not an index source: kv sources %s must be a subset of "
                        "attention.index_source_layer_ids %s (C2)",
                        s, list_str(v41.kv_sources).c_str(), list_str(v41.index_sources).c_str()));
        }
    }
    // C3: one coordinate space per compressed layer.
    for (uint32_t il = 0; il < n_layer; ++il) {
        const uint32_t r = compress_ratios[il];
        if (r == 0) continue;
        const int32_t ks = kv_source(il);
        const int32_t is = index_source(il);
        if (ks < 0)
            fail("attention.kv_source_layer_ids",
                 strfmt("layer %u (ratio %u) has no KV source at or before it (C3)", il, r));
        if (is < 0)
            fail("attention.index_source_layer_ids",
                 strfmt("layer %u (ratio %u) has no index source at or before it (C3)", il, r));
        if (compress_ratios[static_cast<uint32_t>(ks)] != r) {
            fail("attention.kv_source_layer_ids",
                 strfmt("layer %u has ratio %u but its KV source %d has ratio %u (C3)", il, r, ks,
                        compress_ratios[static_cast<uint32_t>(ks)]));
        }
        if (kv_source(static_cast<uint32_t>(is)) != ks) {
            fail("attention.index_source_layer_ids",
                 strfmt("layer %u: its index source %d reads KV source %d, but the layer reads KV "
                        "source %d (C3)",
                        il, is, kv_source(static_cast<uint32_t>(is)), ks));
        }
    }
    // C4: candidate source.
    if (v41.candidate_source < -1)
        fail("attention.candidate_source_layer_id",
             strfmt("expected -1 (off) or a layer, got %d (C4)", v41.candidate_source));
    if (v41.candidate_source >= 0) {
        const auto cs = static_cast<uint32_t>(v41.candidate_source);
        if (!is_index_source(cs))
            fail("attention.candidate_source_layer_id",
                 strfmt("layer %u is not an index source (C4)", cs));
        for (uint32_t s : v41.index_sources) {
            if (s > cs && kv_source(s) != kv_source(cs)) {
                fail("attention.candidate_source_layer_id",
                     strfmt("index source %u reads KV source %d but the candidate source %u reads "
                            "%d: the candidate mask would have another width (C4)",
                            s, kv_source(s), cs, kv_source(cs)));
            }
        }
        // C5: non-degenerate candidate pool.
        positive("attention.candidate_topk_blocks", v41.candidate_topk_blocks);
        positive("attention.candidate_block_size", v41.candidate_block_size);
        const uint64_t pool =
            static_cast<uint64_t>(v41.candidate_topk_blocks - 1) * v41.candidate_block_size + 1;
        if (pool < n_indexer_top_k) {
            fail("attention.candidate_topk_blocks",
                 strfmt("(attention.candidate_topk_blocks - 1) * attention.candidate_block_size + "
                        "1 = %llu must be >= attention.indexer.top_k %u (C5)",
                        static_cast<unsigned long long>(pool), n_indexer_top_k));
        }
        const uint64_t span =
            static_cast<uint64_t>(v41.candidate_topk_blocks) * v41.candidate_block_size;
        if (span > n_ctx_train) {
            fail(
                "attention.candidate_topk_blocks",
                strfmt("attention.candidate_topk_blocks * attention.candidate_block_size = %u * %u "
                       "= %llu: expected at most context_length = %llu (the rows a context holds)",
                       v41.candidate_topk_blocks, v41.candidate_block_size,
                       static_cast<unsigned long long>(span),
                       static_cast<unsigned long long>(n_ctx_train)));
        }
    }
    // C6: quantizer blocks.
    if (n_head_dim % 32 != 0)
        fail("attention.key_length",
             strfmt("must be a multiple of 32 (FP8 window QDQ, FP4 main KV; C6), got %u",
                    n_head_dim));
    if (n_rot % 2 != 0 || n_rot > n_head_dim)
        fail("rope.dimension_count",
             strfmt("expected an even value <= key_length %u (C6), got %u", n_head_dim, n_rot));
    if (!v41.index_sources.empty()) {
        positive("attention.indexer.head_count", n_indexer_head);
        positive("attention.indexer.top_k", n_indexer_top_k);
        positive("attention.indexer.key_length", n_indexer_head_dim);
        if (n_indexer_head_dim % 32 != 0)
            fail("attention.indexer.key_length",
                 strfmt("must be a multiple of 32 (C6), got %u", n_indexer_head_dim));
        if (n_rot > n_indexer_head_dim)
            fail("rope.dimension_count", strfmt("must be <= indexer.key_length %u (C6), got %u",
                                                n_indexer_head_dim, n_rot));
        // An index source of ratio r holds context_length / r keys: no more can be selected.
        uint32_t r_min = 0;
        for (uint32_t s : v41.index_sources)
            r_min = r_min == 0 ? compress_ratios[s] : std::min(r_min, compress_ratios[s]);
        const uint64_t rows = n_ctx_train / std::max<uint32_t>(r_min, 1);
        if (n_indexer_top_k > rows) {
            fail("attention.indexer.top_k",
                 strfmt("expected at most context_length / %u = %llu (the keys an index source "
                        "holds), got %u",
                        std::max<uint32_t>(r_min, 1), static_cast<unsigned long long>(rows),
                        n_indexer_top_k));
        }
    }
    mult32("embedding_length", "D", n_embd);
    mult32("attention.q_lora_rank", "Rq", n_q_lora);
    mult32("attention.output_lora_rank",
           "attention.output_group_count * attention.output_lora_rank",
           static_cast<uint64_t>(n_o_group) * n_o_lora);
    mult32("expert_feed_forward_length", "F", n_ff_exp);

    // RoPE bases: the YaRN ramp divides by ln(base) (rope41 refuses base <= 1).
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

    // Engram (C6 widths, C7 table rows, §3.9.2 primes / offsets, §3.9.3 multipliers, §9.11).
    const engram_hparams& e = v41.engram;
    if (!e.layer_ids.empty()) {
        for (size_t i = 0; i < e.layer_ids.size(); ++i) {
            if (e.layer_ids[i] >= n_layer)
                fail("engram.layer_ids", strfmt("layer %u is not a backbone layer (block_count %u)",
                                                e.layer_ids[i], n_layer));
            for (size_t j = 0; j < i; ++j) {
                if (e.layer_ids[j] == e.layer_ids[i])
                    fail("engram.layer_ids", strfmt("layer %u is listed twice", e.layer_ids[i]));
            }
        }
        positive("engram.vocab_size", e.vocab_size);
        positive("engram.head_count", e.n_head);
        positive("engram.key_length", e.head_dim);
        positive("engram.compressed_vocab_size", e.compressed_vocab);
        if (e.compressed_vocab > n_vocab) {
            fail("engram.compressed_vocab_size",
                 strfmt("expected at most vocab_size = %u (ids of the token map), got %u", n_vocab,
                        e.compressed_vocab));
        }
        if (e.max_ngram < 2)
            fail("engram.max_ngram_size", strfmt("must be >= 2, got %u", e.max_ngram));
        if (e.head_dim % 32 != 0)
            fail("engram.key_length",
                 strfmt("must be a multiple of 32 (one UE8M0 scale per 32; C6), got %u",
                        e.head_dim));
        mult32("engram.key_length", "(max_ngram_size - 1) * head_count * key_length",
               static_cast<uint64_t>(e.n_col()) * e.head_dim);
        const size_t nl = e.layer_ids.size();
        if (e.num_embeddings.size() != nl) {
            fail("engram.num_embeddings",
                 strfmt("expected %zu entries (one per Engram layer), got %zu", nl,
                        e.num_embeddings.size()));
        }
        const std::vector<uint64_t> primes = engram_primes(e.vocab_size, e.max_ngram, e.n_head, nl);
        const std::vector<uint64_t> offsets = engram_offsets(primes, e.n_col());
        if (e.primes != primes)
            fail("engram.primes",
                 "do not equal the primes recomputed from engram.vocab_size, engram.max_ngram_size "
                 "and engram.head_count (§3.9.2)");
        if (e.offsets != offsets)
            fail("engram.offsets",
                 "do not equal the prefix sums of the recomputed primes (§3.9.2)");
        for (size_t l = 0; l < nl; ++l) {
            uint64_t sum = 0;
            for (uint32_t c = 0; c < e.n_col(); ++c) sum += primes[l * e.n_col() + c];
            if (e.num_embeddings[l] != sum) {
                fail("engram.num_embeddings",
                     strfmt("entry %zu (layer %u): expected %llu rows (the sum of the layer's "
                            "bucket primes), got %llu (C7)",
                            l, e.layer_ids[l], static_cast<unsigned long long>(sum),
                            static_cast<unsigned long long>(e.num_embeddings[l])));
            }
        }
        if (e.multipliers.size() != nl * e.max_ngram) {
            fail("engram.multipliers",
                 strfmt("expected %zu entries (Engram layers x max_ngram_size), got %zu",
                        nl * e.max_ngram, e.multipliers.size()));
        }
        const uint64_t bound = e.multiplier_bound();
        for (size_t i = 0; i < e.multipliers.size(); ++i) {
            const uint64_t m = e.multipliers[i];
            if (m % 2 == 0 || (m >> 1) >= bound) {
                fail(
                    "engram.multipliers",
                    strfmt("entry %zu = %llu: expected an odd value 2 v + 1 with v < %llu (§3.9.3)",
                           i, static_cast<unsigned long long>(m),
                           static_cast<unsigned long long>(bound)));
            }
        }
        if (e.pad_id >= e.compressed_vocab)
            fail("engram.pad_id",
                 strfmt("compressed pad id %u must be < engram.compressed_vocab_size %u", e.pad_id,
                        e.compressed_vocab));
        if (!e.token_map.empty()) {
            if (e.token_map.size() != n_vocab) {
                fail("engram.token_map",
                     strfmt("expected exactly vocab_size = %u entries, got %zu (§9.11)", n_vocab,
                            e.token_map.size()));
            }
            std::vector<uint8_t> used(e.compressed_vocab, 0);
            uint32_t distinct = 0;
            for (size_t t = 0; t < e.token_map.size(); ++t) {
                const int32_t c = e.token_map[t];
                if (c < 0 || static_cast<uint32_t>(c) >= e.compressed_vocab) {
                    fail("engram.token_map", strfmt("token %zu maps to %d, outside 0..%u", t, c,
                                                    e.compressed_vocab - 1));
                }
                if (!used[static_cast<size_t>(c)]) {
                    used[static_cast<size_t>(c)] = 1;
                    ++distinct;
                }
            }
            if (distinct != e.compressed_vocab) {
                fail("engram.token_map", strfmt("uses %u distinct compressed ids, expected "
                                                "engram.compressed_vocab_size = %u",
                                                distinct, e.compressed_vocab));
            }
        }
    }

    // DSpark (C6 tap width, C8 targets).
    if (v41.n_dspark > 0) {
        const dspark_hparams& d = v41.dspark;
        positive("dspark.block_size", d.block_size);
        positive("dspark.markov_rank", d.markov_rank);
        if (d.noise_token_id >= n_vocab)
            fail("dspark.noise_token_id",
                 strfmt("must be < vocab_size %u, got %u", n_vocab, d.noise_token_id));
        if (d.target_layers.empty())
            fail("dspark.target_layer_ids", "must list at least one layer (C8)");
        for (size_t i = 0; i < d.target_layers.size(); ++i) {
            if (d.target_layers[i] >= n_layer)
                fail("dspark.target_layer_ids",
                     strfmt("layer %u is not a backbone layer (block_count %u) (C8)",
                            d.target_layers[i], n_layer));
            for (size_t j = 0; j < i; ++j) {
                if (d.target_layers[j] == d.target_layers[i])
                    fail("dspark.target_layer_ids",
                         strfmt("layer %u is listed twice (C8)", d.target_layers[i]));
            }
        }
        mult32("dspark.target_layer_ids", "len(target_layer_ids) * D",
               static_cast<uint64_t>(d.target_layers.size()) * n_embd);
        // The taps average the HC copies: exact only for a power-of-two count (forward41).
        if (!is_pow2(n_hc))
            fail("hyper_connection.count", strfmt("must be a power of two with DSpark stages (the "
                                                  "taps average the copies exactly), got %u",
                                                  n_hc));
        if (dspark_n_expert_used() > dspark_n_expert()) {
            fail("dspark.expert_used_count", strfmt("must be <= dspark.expert_count %u, got %u",
                                                    dspark_n_expert(), dspark_n_expert_used()));
        }
    }
}

}  // namespace magnetar
