// DeepSeek V4.1 (`deepseek41`) hyper-parameters, reading: the proposed keys of spec v41.md §2.4
// and their aliases.
//
// Owns: key resolution with aliases (below), the `deepseek41.config` JSON flattening, the lenient
// typed conversions (V4.1 files come from several converters), and read_hparams_v41, which also
// derives the Engram sizes a vcruz305 file leaves out and checks the primes / offsets a file
// carries against the recomputed ones. Does not own: the derived layer roles, the Engram prime
// search and validation C1-C8 (hparams_v41_validate.cpp), writing the keys back
// (hparams_v41_write.cpp).
//
// Key resolution, per concept: the proposed key `deepseek41.<suffix>`; else the ds4 HF-named
// key `deepseek41.<hf_key>`; else the field `<hf_key>` of the `deepseek41.config` JSON (the HF
// config, text keys taken from `text_config`, nested objects flattened with dots). A missing
// required concept is reported under its proposed key, listing the aliases looked for. Source
// lists are never derived from defaults.
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
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

// ---------------------------------------------------------------------------------------------
// Key lookup with aliases
// ---------------------------------------------------------------------------------------------

// A value found for a concept, and where it came from (for error messages).
struct found_value {
    const value* v = nullptr;
    std::string where;  // "metadata key 'deepseek41.x'" or "field 'x' of 'deepseek41.config'"
};

value json_to_value(const nlohmann::json& j, bool* ok) {
    *ok = true;
    if (j.is_boolean()) return value::make_bool(j.get<bool>());
    if (j.is_number_unsigned()) return value::make_u64(j.get<uint64_t>());
    if (j.is_number_integer()) return value::make_i64(j.get<int64_t>());
    if (j.is_number_float()) return value::make_f64(j.get<double>());
    if (j.is_string()) return value::make_string(j.get<std::string>());
    if (j.is_array()) {
        std::vector<value> items;
        bool any_float = false;
        bool any_signed = false;
        for (const auto& e : j) {
            if (!e.is_number()) {
                *ok = false;
                return {};
            }
            any_float = any_float || e.is_number_float();
            any_signed = any_signed || (e.is_number_integer() && !e.is_number_unsigned());
        }
        for (const auto& e : j) {
            if (any_float) {
                items.push_back(value::make_f64(e.get<double>()));
            } else if (any_signed) {
                items.push_back(value::make_i64(e.get<int64_t>()));
            } else {
                items.push_back(value::make_u64(e.get<uint64_t>()));
            }
        }
        const value_type et = any_float    ? value_type::f64
                              : any_signed ? value_type::i64
                                           : value_type::u64;
        return value::make_array(et, std::move(items));
    }
    *ok = false;
    return {};
}

void flatten_json(const nlohmann::json& obj, const std::string& prefix,
                  std::map<std::string, value>& out) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
        const std::string key = prefix + it.key();
        if (it->is_object()) {
            flatten_json(*it, key + ".", out);
            continue;
        }
        bool ok = false;
        value v = json_to_value(*it, &ok);
        if (ok && !out.count(key)) out.emplace(key, std::move(v));
    }
}

class key_lookup {
  public:
    explicit key_lookup(const gguf::reader& f) : f_(f), a_(kArchDeepseek41) {
        const std::string cfg_key = a_ + ".config";
        const value* cfg = f.find(cfg_key);
        if (!cfg) return;
        if (cfg->type != value_type::string)
            error_at("metadata key '" + cfg_key + "'", "expected a JSON string");
        nlohmann::json j = nlohmann::json::parse(cfg->s, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            error_at("metadata key '" + cfg_key + "'", "not a valid JSON object");
        }
        // Text keys live in text_config (HF); the top level adds the rest (image_token_id).
        if (j.contains("text_config") && j["text_config"].is_object())
            flatten_json(j["text_config"], "", json_);
        flatten_json(j, "", json_);
        has_json_ = true;
    }

    const gguf::reader& file() const { return f_; }
    std::string key(const std::string& suffix) const { return a_ + "." + suffix; }

    std::optional<found_value> find(const std::string& proposed,
                                    std::initializer_list<const char*> hf) const {
        if (const value* v = f_.find(key(proposed)))
            return found_value{v, "metadata key '" + key(proposed) + "'"};
        for (const char* h : hf) {
            if (const value* v = f_.find(key(h)))
                return found_value{v, "metadata key '" + key(h) + "'"};
        }
        if (has_json_) {
            for (const char* h : hf) {
                auto it = json_.find(h);
                if (it != json_.end()) {
                    return found_value{&it->second,
                                       strfmt("field '%s' of '%s'", h, key("config").c_str())};
                }
            }
        }
        return std::nullopt;
    }

    found_value require(const std::string& proposed, std::initializer_list<const char*> hf) const {
        if (auto fv = find(proposed, hf)) return *fv;
        std::string also;
        for (const char* h : hf) also += strfmt("%s'%s'", also.empty() ? "" : ", ", key(h).c_str());
        if (hf.size() != 0) {
            also = " (also looked for " + also;
            also += has_json_ ? strfmt(" and the same HF fields of '%s')", key("config").c_str())
                              : strfmt("; no '%s' JSON)", key("config").c_str());
        }
        error_at("metadata key '" + key(proposed) + "'", "required key is missing" + also);
    }

    [[noreturn]] void error_at(const std::string& where, const std::string& what) const {
        throw Error(strfmt("%s: %s: %s", f_.path().c_str(), where.c_str(), what.c_str()));
    }

  private:
    const gguf::reader& f_;
    std::string a_;
    std::map<std::string, value> json_;
    bool has_json_ = false;
};

// ---- typed conversions: V4.1 files come from several converters, so any integer type is
// accepted where the value fits; floats accept integers ----

bool is_int_type(value_type t) {
    switch (t) {
        case value_type::u8:
        case value_type::u16:
        case value_type::u32:
        case value_type::u64:
        case value_type::i8:
        case value_type::i16:
        case value_type::i32:
        case value_type::i64:
            return true;
        default:
            return false;
    }
}

bool is_signed_type(value_type t) {
    return t == value_type::i8 || t == value_type::i16 || t == value_type::i32 ||
           t == value_type::i64;
}

// Integer value as a signed 128-bit-safe pair: returns false for non-integers.
bool as_int(const value& v, int64_t* i, uint64_t* u, bool* neg) {
    if (!is_int_type(v.type)) return false;
    if (is_signed_type(v.type)) {
        *neg = v.i < 0;
        *i = v.i;
        *u = v.i < 0 ? 0 : static_cast<uint64_t>(v.i);
    } else {
        *neg = false;
        *u = v.u;
        *i = v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? -1
                 : static_cast<int64_t>(v.u);
    }
    return true;
}

const char* type_word(const value& v) {
    return gguf::value_type_name(v.type);
}

uint64_t to_u64(const key_lookup& k, const found_value& fv,
                uint64_t max = std::numeric_limits<uint64_t>::max()) {
    int64_t i = 0;
    uint64_t u = 0;
    bool neg = false;
    if (!as_int(*fv.v, &i, &u, &neg))
        k.error_at(fv.where, strfmt("expected an integer, got %s", type_word(*fv.v)));
    if (neg)
        k.error_at(fv.where,
                   strfmt("expected a non-negative integer, got %lld", static_cast<long long>(i)));
    if (u > max)
        k.error_at(fv.where, strfmt("value %llu is out of range (max %llu)",
                                    static_cast<unsigned long long>(u),
                                    static_cast<unsigned long long>(max)));
    return u;
}

uint32_t to_u32(const key_lookup& k, const found_value& fv) {
    return static_cast<uint32_t>(to_u64(k, fv, std::numeric_limits<uint32_t>::max()));
}

int32_t to_i32(const key_lookup& k, const found_value& fv) {
    int64_t i = 0;
    uint64_t u = 0;
    bool neg = false;
    if (!as_int(*fv.v, &i, &u, &neg))
        k.error_at(fv.where, strfmt("expected an integer, got %s", type_word(*fv.v)));
    if (!neg && u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
        k.error_at(fv.where, strfmt("value %llu is out of range for i32",
                                    static_cast<unsigned long long>(u)));
    }
    if (neg && i < std::numeric_limits<int32_t>::min()) {
        k.error_at(fv.where,
                   strfmt("value %lld is out of range for i32", static_cast<long long>(i)));
    }
    return static_cast<int32_t>(neg ? i : static_cast<int64_t>(u));
}

float to_float(const key_lookup& k, const found_value& fv) {
    const value& v = *fv.v;
    if (v.type == value_type::f32 || v.type == value_type::f64) return static_cast<float>(v.f);
    int64_t i = 0;
    uint64_t u = 0;
    bool neg = false;
    if (as_int(v, &i, &u, &neg)) return neg ? static_cast<float>(i) : static_cast<float>(u);
    k.error_at(fv.where, strfmt("expected a number, got %s", type_word(v)));
}

bool to_bool(const key_lookup& k, const found_value& fv) {
    if (fv.v->type != value_type::boolean)
        k.error_at(fv.where, strfmt("expected type bool, got %s", type_word(*fv.v)));
    return fv.v->u != 0;
}

std::string to_string(const key_lookup& k, const found_value& fv) {
    if (fv.v->type != value_type::string)
        k.error_at(fv.where, strfmt("expected a string, got %s", type_word(*fv.v)));
    return fv.v->s;
}

const std::vector<value>& int_items(const key_lookup& k, const found_value& fv) {
    if (fv.v->type != value_type::array || (!is_int_type(fv.v->elem_type) && !fv.v->arr.empty())) {
        k.error_at(fv.where, "expected an array of integers");
    }
    return fv.v->arr;
}

std::vector<uint64_t> to_u64_array(const key_lookup& k, const found_value& fv,
                                   uint64_t max = std::numeric_limits<uint64_t>::max()) {
    std::vector<uint64_t> out;
    const auto& items = int_items(k, fv);
    out.reserve(items.size());
    for (size_t n = 0; n < items.size(); ++n) {
        int64_t i = 0;
        uint64_t u = 0;
        bool neg = false;
        as_int(items[n], &i, &u, &neg);
        if (neg)
            k.error_at(fv.where,
                       strfmt("entry %zu is negative (%lld)", n, static_cast<long long>(i)));
        if (u > max)
            k.error_at(fv.where, strfmt("entry %zu (%llu) is out of range", n,
                                        static_cast<unsigned long long>(u)));
        out.push_back(u);
    }
    return out;
}

std::vector<uint32_t> to_u32_array(const key_lookup& k, const found_value& fv) {
    std::vector<uint32_t> out;
    for (uint64_t x : to_u64_array(k, fv, std::numeric_limits<uint32_t>::max()))
        out.push_back(static_cast<uint32_t>(x));
    return out;
}

std::vector<int32_t> to_i32_array(const key_lookup& k, const found_value& fv) {
    std::vector<int32_t> out;
    for (uint64_t x :
         to_u64_array(k, fv, static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))) {
        out.push_back(static_cast<int32_t>(x));
    }
    return out;
}

// Float array, or a scalar replicated n times (HF's swiglu_limit is one number).
std::vector<float> to_float_list(const key_lookup& k, const found_value& fv, size_t n_scalar) {
    const value& v = *fv.v;
    if (v.type != value_type::array) return std::vector<float>(n_scalar, to_float(k, fv));
    std::vector<float> out;
    for (size_t i = 0; i < v.arr.size(); ++i) {
        const value& e = v.arr[i];
        if (e.type == value_type::f32 || e.type == value_type::f64) {
            out.push_back(static_cast<float>(e.f));
        } else if (is_int_type(e.type)) {
            out.push_back(is_signed_type(e.type) ? static_cast<float>(e.i)
                                                 : static_cast<float>(e.u));
        } else {
            k.error_at(fv.where, strfmt("entry %zu: expected a number", i));
        }
    }
    return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

hparams read_hparams_v41(const gguf::reader& f) {
    const key_lookup k(f);
    hparams hp;
    hp.arch = kArchDeepseek41;
    if (const value* n = f.find("general.name"); n && n->type == value_type::string) hp.name = n->s;

    auto u32 = [&](const char* p, std::initializer_list<const char*> hf) {
        return to_u32(k, k.require(p, hf));
    };
    auto u32_opt = [&](const char* p, std::initializer_list<const char*> hf, uint32_t def) {
        auto fv = k.find(p, hf);
        return fv ? to_u32(k, *fv) : def;
    };
    auto flt = [&](const char* p, std::initializer_list<const char*> hf) {
        return to_float(k, k.require(p, hf));
    };

    hp.n_layer = u32("block_count", {"num_hidden_layers"});
    hp.n_ctx_train = to_u64(k, k.require("context_length", {"max_position_embeddings"}));
    hp.n_embd = u32("embedding_length", {"hidden_size"});
    hp.n_vocab = u32("vocab_size", {"vocab_size"});
    hp.n_head = u32("attention.head_count", {"num_attention_heads"});
    hp.n_head_kv = u32_opt("attention.head_count_kv", {"num_key_value_heads"}, 1);
    hp.n_head_dim = u32("attention.key_length", {"head_dim"});
    hp.n_value_dim = u32_opt("attention.value_length", {"head_dim"}, hp.n_head_dim);
    hp.n_rot = u32("rope.dimension_count", {"qk_rope_head_dim"});
    hp.n_q_lora = u32("attention.q_lora_rank", {"q_lora_rank"});
    hp.n_o_lora = u32("attention.output_lora_rank", {"o_lora_rank"});
    hp.n_o_group = u32("attention.output_group_count", {"o_groups"});
    hp.n_swa = u32("attention.sliding_window", {"sliding_window"});
    hp.n_expert = u32("expert_count", {"n_routed_experts"});
    hp.n_expert_used = u32("expert_used_count", {"num_experts_per_tok"});
    hp.n_ff_exp = u32("expert_feed_forward_length", {"moe_intermediate_size"});
    hp.n_expert_shared = u32("expert_shared_count", {"n_shared_experts"});
    hp.n_hash_layer = u32_opt("hash_layer_count", {}, 0);
    hp.n_expert_group = u32_opt("expert_group_count", {}, 0);
    hp.n_expert_group_used = u32_opt("expert_group_used_count", {}, 0);
    hp.n_indexer_head = u32("attention.indexer.head_count", {"index_n_heads"});
    hp.n_indexer_head_dim = u32("attention.indexer.key_length", {"index_head_dim"});
    hp.n_indexer_top_k = u32("attention.indexer.top_k", {"index_topk"});
    hp.n_hc = u32("hyper_connection.count", {"hc_mult"});
    hp.n_sinkhorn_iter = u32("hyper_connection.sinkhorn_iterations", {"hc_sinkhorn_iters"});
    hp.v41.n_dspark = u32_opt("nextn_predict_layers", {"num_nextn_predict_layers"}, 0);
    // The counts read so far size what follows (a scalar clamp replicated per block, the
    // Engram prime search): bounded before use.
    auto bounds = [&] {
        try {
            hp.check_bounds();
        } catch (const Error& ex) {
            throw Error(f.path() + ": " + ex.what());
        }
    };
    bounds();
    hp.compress_ratios =
        to_u32_array(k, k.require("attention.compress_ratios", {"compress_ratios"}));

    hp.rope_orig_ctx = to_u64(k, k.require("rope.scaling.original_context_length",
                                           {"rope_scaling.original_max_position_embeddings"}));
    hp.rope_freq_base = flt("rope.freq_base", {"rope_theta"});
    hp.rope_scaling_factor = flt("rope.scaling.factor", {"rope_scaling.factor"});
    hp.yarn_beta_fast = flt("rope.scaling.yarn_beta_fast", {"rope_scaling.beta_fast"});
    hp.yarn_beta_slow = flt("rope.scaling.yarn_beta_slow", {"rope_scaling.beta_slow"});
    if (auto fv = k.find("rope.scaling.type", {"rope_scaling.rope_type", "rope_scaling.type"})) {
        const std::string t = to_string(k, *fv);
        if (t != "yarn") k.error_at(fv->where, strfmt("expected 'yarn', got '%s'", t.c_str()));
    }
    hp.compress_rope_freq_base = flt("attention.compress_rope_freq_base", {"compress_rope_theta"});
    hp.expert_weights_scale = flt("expert_weights_scale", {"routed_scaling_factor"});
    hp.rms_eps = flt("attention.layer_norm_rms_epsilon", {"rms_norm_eps"});
    hp.hc_eps = flt("hyper_connection.epsilon", {"hc_eps"});
    if (auto fv = k.find("expert_weights_norm", {"norm_topk_prob"}))
        hp.expert_weights_norm = to_bool(k, *fv);
    const size_t n_blocks = static_cast<size_t>(hp.n_layer) + hp.v41.n_dspark;
    hp.swiglu_clamp = to_float_list(k, k.require("swiglu_clamp_exp", {"swiglu_limit"}), n_blocks);
    if (auto fv = k.find("swiglu_clamp_shexp", {}))
        hp.v41.swiglu_clamp_shexp = to_float_list(k, *fv, n_blocks);

    // CSA2 sources and candidates: never derived from defaults (spec v41.md §2.4).
    hp.v41.kv_sources =
        to_u32_array(k, k.require("attention.kv_source_layer_ids", {"kv_source_layer_ids"}));
    hp.v41.index_sources =
        to_u32_array(k, k.require("attention.index_source_layer_ids", {"index_source_layer_ids"}));
    hp.v41.candidate_source =
        to_i32(k, k.require("attention.candidate_source_layer_id", {"candidate_source_layer_id"}));
    if (hp.v41.candidate_source >= 0) {
        hp.v41.candidate_topk_blocks =
            u32("attention.candidate_topk_blocks", {"candidate_topk_blocks"});
        hp.v41.candidate_block_size =
            u32("attention.candidate_block_size", {"candidate_block_size"});
    } else {
        hp.v41.candidate_topk_blocks =
            u32_opt("attention.candidate_topk_blocks", {"candidate_topk_blocks"}, 0);
        hp.v41.candidate_block_size =
            u32_opt("attention.candidate_block_size", {"candidate_block_size"}, 0);
    }
    hp.v41.scoring_func = to_string(k, k.require("expert_scoring_func", {"scoring_func"}));
    if (auto fv = k.find("expert_gate_temp", {"gate_temp"})) hp.v41.gate_temp = to_float(k, *fv);

    // Engram.
    engram_hparams& e = hp.v41.engram;
    e.layer_ids = to_u32_array(k, k.require("engram.layer_ids", {"engram_layer_ids"}));
    if (!e.layer_ids.empty()) {
        e.max_ngram = u32("engram.max_ngram_size", {"engram_max_ngram_size"});
        e.n_head = u32("engram.head_count", {"engram_n_heads"});
        e.head_dim = u32("engram.key_length", {"engram_head_dim"});
        bounds();
        // The token map and the multipliers need the tokenizer and NumPy's PCG64: file only.
        const found_value tm = k.require("engram.token_map", {});
        e.token_map = to_i32_array(k, tm);
        if (e.token_map.size() != hp.n_vocab) {
            k.error_at(tm.where, strfmt("expected exactly vocab_size = %u entries, got %zu (§9.11)",
                                        hp.n_vocab, e.token_map.size()));
        }
        // vcruz305 files carry the primes instead of engram.vocab_size, num_embeddings and
        // compressed_vocab_size. Those follow from what is there: the search started just
        // below the first prime finds the same primes, the rows are the per-layer prime sums
        // and the compressed vocabulary is the number of distinct ids in the token map.
        std::vector<uint64_t> file_primes;
        const auto primes_fv = k.find("engram.primes", {});
        if (primes_fv) file_primes = to_u64_array(k, *primes_fv);
        const size_t n_col = e.n_col();
        const bool primes_cover = n_col > 0 && file_primes.size() == e.layer_ids.size() * n_col;
        if (auto fv = k.find("engram.vocab_size", {"engram_vocab_size"})) {
            e.vocab_size = to_u32(k, *fv);
        } else if (primes_cover && file_primes[0] <= std::numeric_limits<uint32_t>::max()) {
            e.vocab_size = static_cast<uint32_t>(file_primes[0]);
        } else {
            k.require("engram.vocab_size", {"engram_vocab_size"});
        }
        if (auto fv = k.find("engram.num_embeddings", {"engram.rows", "engram_num_embeddings"})) {
            e.num_embeddings = to_u64_array(k, *fv);
        } else if (primes_cover) {
            for (size_t l = 0; l < e.layer_ids.size(); ++l) {
                uint64_t sum = 0;
                for (size_t c = 0; c < n_col; ++c) sum += file_primes[l * n_col + c];
                e.num_embeddings.push_back(sum);
            }
        } else {
            k.require("engram.num_embeddings", {"engram.rows", "engram_num_embeddings"});
        }
        if (auto fv = k.find("engram.compressed_vocab_size", {"engram_compressed_vocab_size"})) {
            e.compressed_vocab = to_u32(k, *fv);
        } else {
            std::set<int32_t> ids(e.token_map.begin(), e.token_map.end());
            e.compressed_vocab = static_cast<uint32_t>(ids.size());
        }
        e.multipliers = to_u64_array(k, k.require("engram.multipliers", {}));
        // The proposed key holds the compressed pad id; HF configs hold the raw token id.
        if (auto fv = k.find("engram.pad_id", {})) {
            e.pad_id = to_u32(k, *fv);
        } else if (auto raw =
                       k.find("engram.pad_token_id", {"engram_pad_token_id", "engram_pad_id"})) {
            const uint32_t t = to_u32(k, *raw);
            if (t >= e.token_map.size())
                k.error_at(raw->where, strfmt("raw pad token %u is outside the vocabulary (%zu)", t,
                                              e.token_map.size()));
            e.pad_id = static_cast<uint32_t>(e.token_map[t]);
        } else {
            k.require("engram.pad_id", {"engram_pad_token_id", "engram_pad_id"});
        }
        if (auto fv = k.find("engram.encoding", {})) {
            const std::string enc = to_string(k, *fv);
            if (enc != kEngramEncodingRow264) {
                k.error_at(fv->where, strfmt("unknown Engram table encoding '%s' (expected '%s')",
                                             enc.c_str(), kEngramEncodingRow264));
            }
        }
        // Primes and offsets are recomputed; a file that carries them must agree.
        bounds();
        e.primes = engram_primes(e.vocab_size, e.max_ngram, e.n_head, e.layer_ids.size());
        e.offsets = engram_offsets(e.primes, e.n_col());
        // What the primes are recomputed from, for the messages.
        const std::string from = strfmt(
            "recomputed from engram.vocab_size = %u, engram.max_ngram_size = %u, "
            "engram.head_count = %u for %zu engram.layer_ids",
            e.vocab_size, e.max_ngram, e.n_head, e.layer_ids.size());
        if (primes_fv) {
            const auto& fp = file_primes;
            const auto* fv = &*primes_fv;
            if (fp != e.primes) {
                size_t i = 0;
                while (i < fp.size() && i < e.primes.size() && fp[i] == e.primes[i]) ++i;
                k.error_at(
                    fv->where,
                    i < fp.size() && i < e.primes.size()
                        ? strfmt("entry %zu is %llu, the recomputed prime is %llu (%s; §3.9.2)", i,
                                 static_cast<unsigned long long>(fp[i]),
                                 static_cast<unsigned long long>(e.primes[i]), from.c_str())
                        : strfmt("expected %zu primes, got %zu (%s; §3.9.2)", e.primes.size(),
                                 fp.size(), from.c_str()));
            }
        }
        if (auto fv = k.find("engram.offsets", {})) {
            const auto fo = to_u64_array(k, *fv);
            if (fo != e.offsets)
                k.error_at(fv->where, "do not equal the prefix sums of the recomputed primes (" +
                                          from + "; §3.9.2)");
        }
    }

    // DSpark.
    if (hp.v41.n_dspark > 0) {
        dspark_hparams& d = hp.v41.dspark;
        d.block_size = u32("dspark.block_size", {"dspark_block_size"});
        d.noise_token_id = u32("dspark.noise_token_id", {"dspark_noise_token_id"});
        d.target_layers =
            to_u32_array(k, k.require("dspark.target_layer_ids", {"dspark_target_layer_ids"}));
        d.markov_rank = u32("dspark.markov_rank", {"dspark_markov_rank"});
        d.n_expert = u32_opt("dspark.expert_count", {"dspark_n_routed_experts"}, 0);
        d.n_expert_used = u32_opt("dspark.expert_used_count",
                                  {"dspark_num_experts_per_tok", "dspark_n_activated_experts"}, 0);
    }

    try {
        hp.validate();
    } catch (const Error& ex) {
        throw Error(f.path() + ": " + ex.what());
    }
    return hp;
}

}  // namespace magnetar
