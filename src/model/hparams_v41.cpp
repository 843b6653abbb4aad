// DeepSeek V4.1 (`deepseek41`) hyper-parameters: reading the proposed keys of spec v41.md §2.4
// and their aliases, the derived layer roles of §1.3, validation C1-C8 (+ the Engram checks of
// §3.9.2-§3.9.3 and §9.11), the Engram primes and offsets, and writing the keys back.
//
// Key resolution, per concept: the proposed key `deepseek41.<suffix>`; else the ds4 HF-named
// key `deepseek41.<hf_key>`; else the field `<hf_key>` of the `deepseek41.config` JSON (the HF
// config, text keys taken from `text_config`, nested objects flattened with dots). A missing
// required concept is reported under its proposed key, listing the aliases looked for. Source
// lists are never derived from defaults.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/format.h"
#include "gguf/gguf.h"
#include "model/engram_hash.h"
#include "model/hparams.h"

namespace magnetar {

namespace {

using gguf::value;
using gguf::value_type;

constexpr const char* kEngramEncodingRow264 = "e4m3_e8m0_32_row264";

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
