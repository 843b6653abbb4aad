#include "model/model.h"

#include <cstring>
#include <unordered_set>

#include "core/error.h"
#include "core/format.h"
#include "core/progress.h"

namespace magnetar {

namespace {

std::string shape_of(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// Suffix -> member of layer_weights.
struct layer_slot {
    const char* suffix;
    weight layer_weights::*member;
};

const layer_slot kLayerSlots[] = {
    {"hc_attn_fn.weight", &layer_weights::hc_attn_fn},
    {"hc_attn_base.weight", &layer_weights::hc_attn_base},
    {"hc_attn_scale.weight", &layer_weights::hc_attn_scale},
    {"attn_norm.weight", &layer_weights::attn_norm},
    {"attn_q_a.weight", &layer_weights::attn_q_a},
    {"attn_q_a_norm.weight", &layer_weights::attn_q_a_norm},
    {"attn_q_b.weight", &layer_weights::attn_q_b},
    {"attn_kv.weight", &layer_weights::attn_kv},
    {"attn_kv_a_norm.weight", &layer_weights::attn_kv_a_norm},
    {"attn_sinks.weight", &layer_weights::attn_sinks},
    {"attn_output_a.weight", &layer_weights::attn_output_a},
    {"attn_output_b.weight", &layer_weights::attn_output_b},
    {"attn_compressor_ape.weight", &layer_weights::comp_ape},
    {"attn_compressor_kv.weight", &layer_weights::comp_kv},
    {"attn_compressor_gate.weight", &layer_weights::comp_gate},
    {"attn_compressor_norm.weight", &layer_weights::comp_norm},
    {"indexer.attn_q_b.weight", &layer_weights::idx_q_b},
    {"indexer.proj.weight", &layer_weights::idx_proj},
    {"indexer_compressor_ape.weight", &layer_weights::idx_comp_ape},
    {"indexer_compressor_kv.weight", &layer_weights::idx_comp_kv},
    {"indexer_compressor_gate.weight", &layer_weights::idx_comp_gate},
    {"indexer_compressor_norm.weight", &layer_weights::idx_comp_norm},
    {"hc_ffn_fn.weight", &layer_weights::hc_ffn_fn},
    {"hc_ffn_base.weight", &layer_weights::hc_ffn_base},
    {"hc_ffn_scale.weight", &layer_weights::hc_ffn_scale},
    {"ffn_norm.weight", &layer_weights::ffn_norm},
    {"ffn_gate_inp.weight", &layer_weights::ffn_gate_inp},
    {"ffn_gate_tid2eid.weight", &layer_weights::ffn_gate_tid2eid},
    {"exp_probs_b.bias", &layer_weights::exp_probs_b},
    {"ffn_gate_exps.weight", &layer_weights::ffn_gate_exps},
    {"ffn_up_exps.weight", &layer_weights::ffn_up_exps},
    {"ffn_down_exps.weight", &layer_weights::ffn_down_exps},
    {"ffn_gate_shexp.weight", &layer_weights::ffn_gate_shexp},
    {"ffn_up_shexp.weight", &layer_weights::ffn_up_shexp},
    {"ffn_down_shexp.weight", &layer_weights::ffn_down_shexp},
};

struct mtp_slot {
    const char* suffix;
    weight mtp_weights::*member;
};

const mtp_slot kMtpSlots[] = {
    {"hc_head_fn.weight", &mtp_weights::hc_head_fn},
    {"hc_head_base.weight", &mtp_weights::hc_head_base},
    {"hc_head_scale.weight", &mtp_weights::hc_head_scale},
    {"e_proj.weight", &mtp_weights::e_proj},
    {"h_proj.weight", &mtp_weights::h_proj},
    {"enorm.weight", &mtp_weights::enorm},
    {"hnorm.weight", &mtp_weights::hnorm},
    {"norm.weight", &mtp_weights::norm},
};

// Suffix -> member of v41_block_weights.
struct v41_slot {
    const char* suffix;
    weight v41_block_weights::*member;
};

const v41_slot kV41Slots[] = {
    {"hc_attn_fn.weight", &v41_block_weights::hc_attn_fn},
    {"hc_attn_base.weight", &v41_block_weights::hc_attn_base},
    {"hc_attn_scale.weight", &v41_block_weights::hc_attn_scale},
    {"attn_norm.weight", &v41_block_weights::attn_norm},
    {"attn_q_a.weight", &v41_block_weights::attn_q_a},
    {"attn_q_a_norm.weight", &v41_block_weights::attn_q_a_norm},
    {"attn_q_b.weight", &v41_block_weights::attn_q_b},
    {"attn_kv.weight", &v41_block_weights::attn_kv},
    {"attn_kv_a_norm.weight", &v41_block_weights::attn_kv_a_norm},
    {"attn_sinks.weight", &v41_block_weights::attn_sinks},
    {"attn_output_a.weight", &v41_block_weights::attn_output_a},
    {"attn_output_b.weight", &v41_block_weights::attn_output_b},
    {"attn_compressor_kv.weight", &v41_block_weights::comp_kv},
    {"attn_compressor_gate.weight", &v41_block_weights::comp_gate},
    {"attn_compressor_norm.weight", &v41_block_weights::comp_norm},
    {"indexer.attn_k.weight", &v41_block_weights::idx_k},
    {"indexer.k_norm.weight", &v41_block_weights::idx_k_norm},
    {"indexer.attn_q_b.weight", &v41_block_weights::idx_q_b},
    {"indexer.proj.weight", &v41_block_weights::idx_proj},
    {"engram_embd.weight", &v41_block_weights::engram_embd},
    {"engram_kv.weight", &v41_block_weights::engram_kv},
    {"engram_q_norm.weight", &v41_block_weights::engram_q_norm},
    {"engram_k_norm.weight", &v41_block_weights::engram_k_norm},
    {"hc_ffn_fn.weight", &v41_block_weights::hc_ffn_fn},
    {"hc_ffn_base.weight", &v41_block_weights::hc_ffn_base},
    {"hc_ffn_scale.weight", &v41_block_weights::hc_ffn_scale},
    {"ffn_norm.weight", &v41_block_weights::ffn_norm},
    {"ffn_gate_inp.weight", &v41_block_weights::ffn_gate_inp},
    {"exp_probs_b.bias", &v41_block_weights::exp_probs_b},
    {"exp_probs_b_vl.bias", &v41_block_weights::exp_probs_b_vl},
    {"ffn_gate_exps.weight", &v41_block_weights::ffn_gate_exps},
    {"ffn_up_exps.weight", &v41_block_weights::ffn_up_exps},
    {"ffn_down_exps.weight", &v41_block_weights::ffn_down_exps},
    {"ffn_gate_shexp.weight", &v41_block_weights::ffn_gate_shexp},
    {"ffn_up_shexp.weight", &v41_block_weights::ffn_up_shexp},
    {"ffn_down_shexp.weight", &v41_block_weights::ffn_down_shexp},
    {"dspark_main_proj.weight", &v41_block_weights::dspark_main_proj},
    {"dspark_main_norm.weight", &v41_block_weights::dspark_main_norm},
    {"dspark_norm.weight", &v41_block_weights::dspark_norm},
    {"dspark_markov_embd.weight", &v41_block_weights::dspark_markov_embd},
    {"dspark_markov_head.weight", &v41_block_weights::dspark_markov_head},
    {"dspark_conf.weight", &v41_block_weights::dspark_conf},
};

struct global_slot {
    const char* name;
    weight model_weights::*member;
};

const global_slot kGlobalSlots[] = {
    {"token_embd.weight", &model_weights::token_embd},
    {"output_hc_fn.weight", &model_weights::output_hc_fn},
    {"output_hc_base.weight", &model_weights::output_hc_base},
    {"output_hc_scale.weight", &model_weights::output_hc_scale},
    {"output_norm.weight", &model_weights::output_norm},
    {"output.weight", &model_weights::output},
};

weight bind(const gguf::reader& file, const gguf::tensor_info& t) {
    weight w;
    w.info = &t;
    w.data = file.tensor_data(t);
    w.type = t.type;
    for (int d = 0; d < gguf::kMaxDims; ++d) w.ne[d] = t.ne[d];
    return w;
}

weight* find_slot(model_weights& mw, mtp_weights* mtp, const tensor_spec& spec) {
    if (spec.layer < 0) {
        for (const auto& s : kGlobalSlots) {
            if (spec.name == s.name) return &(mw.*s.member);
        }
        return nullptr;
    }
    layer_weights* lw = mtp && spec.layer == static_cast<int32_t>(mw.layers.size())
                            ? &mtp->block
                            : &mw.layers[static_cast<size_t>(spec.layer)];
    for (const auto& s : kLayerSlots) {
        if (spec.suffix == s.suffix) return &(lw->*s.member);
    }
    if (mtp) {
        for (const auto& s : kMtpSlots) {
            if (spec.suffix == s.suffix) return &(mtp->*s.member);
        }
    }
    return nullptr;
}

void check_hash_table(const gguf::reader& file, const hparams& hp, const weight& w) {
    const auto* ids = reinterpret_cast<const uint8_t*>(w.data);
    const uint64_t n = static_cast<uint64_t>(w.ne[0]) * static_cast<uint64_t>(w.ne[1]);
    for (uint64_t i = 0; i < n; ++i) {
        int32_t e;
        std::memcpy(&e, ids + 4 * i, 4);
        if (e < 0 || static_cast<uint32_t>(e) >= hp.n_expert) {
            throw Error(strfmt("%s: tensor '%s': token %llu routes to expert %d, expected 0..%u",
                               file.path().c_str(), w.info->name.c_str(),
                               static_cast<unsigned long long>(i / static_cast<uint64_t>(w.ne[0])),
                               e, hp.n_expert - 1));
        }
    }
}

// ---- naming the hyper-parameters behind a tensor, for load errors ----
// A file whose tensors do not follow from its metadata (one key edited, or tensors of another
// shape) is refused naming the keys, with their values, that the expected shape or the
// expectation of the tensor follows from.

// "deepseek4.key = value" for the keys of one dimension vocabulary.
std::string key_value(const hparams& hp, const tensor_spec& spec, const std::string& key) {
    const std::string k = hp.arch + "." + key;
    const auto il = static_cast<uint32_t>(spec.layer < 0 ? 0 : spec.layer);
    auto num = [&](uint64_t v) {
        return strfmt("%s = %llu", k.c_str(), static_cast<unsigned long long>(v));
    };
    const engram_hparams& e = hp.v41.engram;
    if (key == "embedding_length") return num(hp.n_embd);
    if (key == "vocab_size") return num(hp.n_vocab);
    if (key == "attention.head_count") return num(hp.n_head);
    if (key == "attention.key_length") return num(hp.n_head_dim);
    if (key == "attention.q_lora_rank") return num(hp.n_q_lora);
    if (key == "attention.output_lora_rank") return num(hp.n_o_lora);
    if (key == "attention.output_group_count") return num(hp.n_o_group);
    if (key == "expert_used_count") return num(hp.n_expert_used);
    if (key == "expert_feed_forward_length") return num(hp.n_ff_exp);
    if (key == "attention.indexer.head_count") return num(hp.n_indexer_head);
    if (key == "attention.indexer.key_length") return num(hp.n_indexer_head_dim);
    if (key == "hyper_connection.count") return num(hp.n_hc);
    if (key == "engram.key_length") return num(e.head_dim);
    if (key == "engram.max_ngram_size") return num(e.max_ngram);
    if (key == "engram.head_count") return num(e.n_head);
    if (key == "dspark.markov_rank") return num(hp.v41.dspark.markov_rank);
    if (key == "expert_count") {
        if (hp.is_v41() && hp.is_dspark(il) && hp.v41.dspark.n_expert != 0) {
            return strfmt("%s.dspark.expert_count = %u", hp.arch.c_str(), hp.v41.dspark.n_expert);
        }
        return num(hp.n_expert);
    }
    if (key == "attention.compress_ratios")
        return strfmt("%s[%u] = %u", k.c_str(), il, hp.compress_ratio(il));
    if (key == "engram.num_embeddings") {
        const int32_t ei = hp.engram_index(il);
        if (ei < 0) return k;
        return strfmt("%s[%d] = %llu for engram.layer_ids[%d] = %u", k.c_str(), ei,
                      static_cast<unsigned long long>(e.num_embeddings[static_cast<size_t>(ei)]),
                      ei, il);
    }
    if (key == "dspark.target_layer_ids")
        return strfmt("%s (%zu entries)", k.c_str(), hp.v41.dspark.target_layers.size());
    return k;
}

// The keys a tensor's shape follows from, by suffix (the dimensions of catalogue.cpp and
// catalogue_v41.cpp).
std::vector<const char*> shape_keys(const std::string& suffix) {
    struct entry {
        std::initializer_list<const char*> suffixes;
        std::initializer_list<const char*> keys;
    };
    static const entry table[] = {
        {{"token_embd.weight", "output.weight"}, {"embedding_length", "vocab_size"}},
        {{"output_norm.weight", "attn_norm.weight", "ffn_norm.weight", "e_proj.weight",
          "h_proj.weight", "enorm.weight", "hnorm.weight", "norm.weight", "dspark_main_norm.weight",
          "dspark_norm.weight"},
         {"embedding_length"}},
        {{"output_hc_fn.weight", "hc_attn_fn.weight", "hc_ffn_fn.weight", "hc_head_fn.weight"},
         {"hyper_connection.count", "embedding_length"}},
        {{"output_hc_base.weight", "hc_attn_base.weight", "hc_ffn_base.weight",
          "hc_head_base.weight"},
         {"hyper_connection.count"}},
        {{"attn_q_a.weight"}, {"embedding_length", "attention.q_lora_rank"}},
        {{"attn_q_a_norm.weight"}, {"attention.q_lora_rank"}},
        {{"attn_q_b.weight"},
         {"attention.q_lora_rank", "attention.head_count", "attention.key_length"}},
        {{"attn_kv.weight"}, {"embedding_length", "attention.key_length"}},
        {{"attn_kv_a_norm.weight", "attn_compressor_norm.weight"}, {"attention.key_length"}},
        {{"attn_sinks.weight"}, {"attention.head_count"}},
        {{"attn_output_a.weight"},
         {"attention.key_length", "attention.head_count", "attention.output_group_count",
          "attention.output_lora_rank"}},
        {{"attn_output_b.weight"},
         {"attention.output_group_count", "attention.output_lora_rank", "embedding_length"}},
        {{"attn_compressor_ape.weight"}, {"attention.key_length", "attention.compress_ratios"}},
        {{"attn_compressor_kv.weight", "attn_compressor_gate.weight"},
         {"embedding_length", "attention.key_length", "attention.compress_ratios"}},
        {{"indexer.attn_q_b.weight"},
         {"attention.q_lora_rank", "attention.indexer.head_count", "attention.indexer.key_length"}},
        {{"indexer.proj.weight"}, {"embedding_length", "attention.indexer.head_count"}},
        {{"indexer_compressor_ape.weight", "indexer_compressor_norm.weight",
          "indexer.k_norm.weight"},
         {"attention.indexer.key_length"}},
        {{"indexer_compressor_kv.weight", "indexer_compressor_gate.weight"},
         {"embedding_length", "attention.indexer.key_length"}},
        {{"indexer.attn_k.weight"}, {"attention.key_length", "attention.indexer.key_length"}},
        {{"ffn_gate_inp.weight"}, {"embedding_length", "expert_count"}},
        {{"ffn_gate_tid2eid.weight"}, {"expert_used_count", "vocab_size"}},
        {{"exp_probs_b.bias", "exp_probs_b_vl.bias"}, {"expert_count"}},
        {{"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"},
         {"embedding_length", "expert_feed_forward_length", "expert_count"}},
        {{"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"},
         {"embedding_length", "expert_feed_forward_length"}},
        {{"engram_embd.weight"}, {"engram.key_length", "engram.num_embeddings"}},
        {{"engram_kv.weight"},
         {"engram.max_ngram_size", "engram.head_count", "engram.key_length",
          "hyper_connection.count", "embedding_length"}},
        {{"engram_q_norm.weight", "engram_k_norm.weight"},
         {"embedding_length", "hyper_connection.count"}},
        {{"dspark_main_proj.weight"}, {"dspark.target_layer_ids", "embedding_length"}},
        {{"dspark_markov_embd.weight", "dspark_markov_head.weight"},
         {"dspark.markov_rank", "vocab_size"}},
        {{"dspark_conf.weight"}, {"embedding_length", "dspark.markov_rank"}},
    };
    const std::string& sfx = suffix;
    for (const entry& e : table) {
        for (const char* x : e.suffixes) {
            if (sfx == x) return std::vector<const char*>(e.keys.begin(), e.keys.end());
        }
    }
    return {};
}

std::string join_keys(const hparams& hp, const tensor_spec& spec,
                      const std::vector<std::string>& keys) {
    std::string s;
    for (const std::string& k : keys) s += (s.empty() ? "" : ", ") + key_value(hp, spec, k);
    return s;
}

// " (shape from deepseek4.embedding_length = 256, ...)" or "".
std::string shape_note(const hparams& hp, const tensor_spec& spec) {
    const std::string sfx = spec.suffix.empty() ? spec.name : spec.suffix;
    std::vector<std::string> keys;
    for (const char* k : shape_keys(sfx)) keys.emplace_back(k);
    if (keys.empty()) return "";
    return " (shape from " + join_keys(hp, spec, keys) + ")";
}

// Why a missing tensor is expected: " (block 6 of deepseek4.block_count = 7, ...)" or "".
std::string missing_note(const hparams& hp, const tensor_spec& spec) {
    if (spec.layer < 0) return "";
    const auto il = static_cast<uint32_t>(spec.layer);
    const std::string& a = hp.arch;
    const std::string& sfx = spec.suffix;
    auto starts = [&](const char* p) { return sfx.rfind(p, 0) == 0; };
    std::string why;
    if (il < hp.n_layer) {
        why = strfmt("block %u of %s.block_count = %u", il, a.c_str(), hp.n_layer);
    } else if (hp.is_v41()) {
        why = strfmt("DSpark stage %u of %s.nextn_predict_layers = %u", il - hp.n_layer, a.c_str(),
                     hp.n_dspark());
    } else {
        why = "the MTP block";
    }
    if (il < hp.n_layer) {
        if (!hp.is_v41()) {
            if (starts("attn_compressor_") || starts("indexer")) {
                why += ", " + key_value(hp, spec, "attention.compress_ratios");
            } else if (sfx == "ffn_gate_tid2eid.weight") {
                why += strfmt(", below %s.hash_layer_count = %u", a.c_str(), hp.n_hash_layer);
            }
        } else if (starts("attn_compressor_") || sfx == "indexer.attn_k.weight" ||
                   sfx == "indexer.k_norm.weight") {
            why += strfmt(", in %s.attention.kv_source_layer_ids", a.c_str());
            if (sfx == "attn_compressor_gate.weight")
                why += ", " + key_value(hp, spec, "attention.compress_ratios");
        } else if (starts("indexer.")) {
            why += strfmt(", in %s.attention.index_source_layer_ids", a.c_str());
        } else if (starts("engram_")) {
            why += strfmt(", in %s.engram.layer_ids", a.c_str());
        }
    }
    return " (" + why + ")";
}

void check_tensor_impl(const gguf::reader& file, const tensor_spec& spec,
                       const gguf::tensor_info& t, const hparams* hp) {
    std::vector<int64_t> got(t.ne, t.ne + t.n_dims);
    const std::vector<int64_t> want = expected_shape(spec, t.type);
    if (got != want) {
        throw Error(strfmt("%s: tensor '%s': wrong shape: expected %s, got %s%s",
                           file.path().c_str(), spec.name.c_str(), shape_of(want).c_str(),
                           shape_of(got).c_str(), hp ? shape_note(*hp, spec).c_str() : ""));
    }
    if (!dtype_class_accepts(spec.dtype, t.type)) {
        throw Error(strfmt("%s: tensor '%s': type %s not allowed here (expected %s)",
                           file.path().c_str(), spec.name.c_str(),
                           std::string(type_name(static_cast<uint32_t>(t.type))).c_str(),
                           dtype_class_name(spec.dtype)));
    }
    // Whole blocks per row (ne[0] a multiple of the block) are guaranteed by the GGUF reader.
}

// Opens one file of the model as load_options asks, with a progress bar for each phase of
// reading or locking its bytes.
std::unique_ptr<gguf::reader> open_file(const std::string& path, const load_options& opts,
                                        std::string* lock_warning) {
    gguf::open_options o;
    o.mmap = opts.mmap;
    o.mlock = opts.mlock;
    std::unique_ptr<Progress> bar;
    std::string phase;
    o.on_progress = [&](const char* what, uint64_t done, uint64_t total) {
        if (!bar || phase != what) {
            phase = what;
            bar = std::make_unique<Progress>(phase + " " + path, total, Progress::Unit::bytes,
                                             opts.quiet);
        }
        bar->update(done);
    };
    auto r = gguf::reader::open(path, o);
    bar.reset();
    if (lock_warning->empty() && !r->lock_warning().empty())
        *lock_warning = path + ": " + r->lock_warning();
    return r;
}

}  // namespace

void check_tensor(const gguf::reader& file, const tensor_spec& spec, const gguf::tensor_info& t) {
    check_tensor_impl(file, spec, t, nullptr);
}

std::unique_ptr<model> model::load(const std::string& path, const load_options& opts) {
    auto m = std::unique_ptr<model>(new model());
    m->file_ = open_file(path, opts, &m->lock_warning_);
    const gguf::reader& f = *m->file_;
    m->hp_ = read_hparams(f);
    const hparams& hp = m->hp_;

    // Tokenizer vocabulary size must agree with the model's (when a vocabulary is present).
    if (const gguf::value* toks = f.find("tokenizer.ggml.tokens")) {
        if (toks->type != gguf::value_type::array || toks->arr.size() != hp.n_vocab) {
            throw Error(
                strfmt("%s: metadata key 'tokenizer.ggml.tokens': expected %u tokens "
                       "(%s.vocab_size), got %zu",
                       path.c_str(), hp.n_vocab, hp.arch.c_str(), toks->arr.size()));
        }
    }
    if (hp.is_v41()) {
        m->bind_v41(opts);
        return m;
    }

    if (!opts.mtp_path.empty()) m->mtp_file_ = open_file(opts.mtp_path, opts, &m->lock_warning_);
    const bool mtp_in_main = f.find_tensor("mtp.0.e_proj.weight") != nullptr;
    const bool want_mtp = m->mtp_file_ || mtp_in_main;
    if (opts.require_mtp && !want_mtp) {
        throw Error(
            strfmt("%s: no MTP block (tensor 'mtp.0.e_proj.weight' missing and no MTP file given)",
                   path.c_str()));
    }

    model_weights& mw = m->w_;
    mw.layers.resize(hp.n_layer);
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        mw.layers[il].il = il;
        mw.layers[il].compress_ratio = hp.compress_ratio(il);
        mw.layers[il].hash_routed = hp.is_hash_layer(il);
    }
    mtp_weights mtp;
    mtp.block.il = hp.n_layer;

    std::unordered_set<std::string> known;
    auto bind_all = [&](const gguf::reader& src, const std::vector<tensor_spec>& specs,
                        bool with_mtp) {
        for (const tensor_spec& spec : specs) {
            const gguf::tensor_info* t = src.find_tensor(spec.name);
            if (!t) {
                if (!spec.required) continue;
                throw Error(strfmt("%s: tensor '%s' is missing (expected shape %s, type %s)%s",
                                   src.path().c_str(), spec.name.c_str(), shape_of(spec.ne).c_str(),
                                   dtype_class_name(spec.dtype), missing_note(hp, spec).c_str()));
            }
            check_tensor_impl(src, spec, *t, &hp);
            weight* slot = find_slot(mw, with_mtp ? &mtp : nullptr, spec);
            MAGNETAR_ASSERT(slot != nullptr, "catalogue entry without a binding slot");
            *slot = bind(src, *t);
            known.insert(spec.name);
        }
    };
    bind_all(f, tensor_catalogue(hp, false), false);
    if (want_mtp) {
        const gguf::reader& src = m->mtp_file_ ? *m->mtp_file_ : f;
        bind_all(src, mtp_catalogue(hp), true);
        m->w_.mtp = mtp;
    }

    // Per-layer cross-tensor rules.
    auto check_layer = [&](const gguf::reader& src, const layer_weights& lw) {
        if (lw.ffn_gate_exps.type != lw.ffn_up_exps.type) {
            throw Error(
                strfmt("%s: layer %u: ffn_gate_exps (%s) and ffn_up_exps (%s) must share one type",
                       src.path().c_str(), lw.il,
                       std::string(type_name(static_cast<uint32_t>(lw.ffn_gate_exps.type))).c_str(),
                       std::string(type_name(static_cast<uint32_t>(lw.ffn_up_exps.type))).c_str()));
        }
        if (lw.ffn_gate_tid2eid) check_hash_table(src, hp, lw.ffn_gate_tid2eid);
    };
    for (const auto& lw : mw.layers) check_layer(f, lw);
    if (mw.mtp) check_layer(m->mtp_file_ ? *m->mtp_file_ : f, mw.mtp->block);

    for (const auto& t : f.tensors()) {
        if (!known.count(t.name)) m->unknown_.push_back(t.name);
    }
    return m;
}

void model::bind_v41(const load_options& opts) {
    const gguf::reader& f = *file_;
    const hparams& hp = hp_;
    if (!opts.mtp_path.empty()) {
        throw Error(
            strfmt("%s: a separate MTP / DSpark file is not supported for %s (the DSpark stages "
                   "are read from the model file as blk.%u..)",
                   f.path().c_str(), kArchDeepseek41, hp.n_layer));
    }
    // The DSpark stages are bound when the file carries them (a main file may ship without).
    const std::string probe = layer_prefix(hp, hp.n_layer) + "attn_q_a.weight";
    const bool with_dspark = hp.n_dspark() > 0 && f.find_tensor(probe) != nullptr;
    if (opts.require_mtp && !with_dspark) {
        throw Error(strfmt("%s: no DSpark stages (nextn_predict_layers %u, tensor '%s' %s)",
                           f.path().c_str(), hp.n_dspark(), probe.c_str(),
                           hp.n_dspark() ? "missing" : "not expected"));
    }

    v41_weights vw;
    vw.layers.resize(hp.n_layer);
    vw.dspark.resize(with_dspark ? hp.n_dspark() : 0);
    auto block_of = [&](uint32_t il) -> v41_block_weights& {
        return il < hp.n_layer ? vw.layers[il] : vw.dspark[il - hp.n_layer];
    };
    for (uint32_t il = 0; il < hp.n_layer + static_cast<uint32_t>(vw.dspark.size()); ++il) {
        v41_block_weights& b = block_of(il);
        b.il = il;
        b.compress_ratio = hp.compress_ratio(il);
        b.mode = hp.mode(il);
        b.engram_index = il < hp.n_layer ? hp.engram_index(il) : -1;
    }

    std::unordered_set<std::string> known;
    for (const tensor_spec& spec : tensor_catalogue_v41(hp, with_dspark)) {
        const gguf::tensor_info* t = f.find_tensor(spec.name);
        for (size_t a = 0; !t && a < spec.aliases.size(); ++a) t = f.find_tensor(spec.aliases[a]);
        if (!t) {
            if (!spec.required) continue;
            std::string also;
            for (const auto& a : spec.aliases)
                also += (also.empty() ? " (nor its alias '" : ", '") + a + "'";
            if (!also.empty()) also += ")";
            throw Error(strfmt("%s: tensor '%s' is missing%s (expected shape %s, type %s)%s",
                               f.path().c_str(), spec.name.c_str(), also.c_str(),
                               shape_of(spec.ne).c_str(), dtype_class_name(spec.dtype),
                               missing_note(hp, spec).c_str()));
        }
        if (t->name == spec.name) {
            check_tensor_impl(f, spec, *t, &hp);
        } else {
            tensor_spec as_named = spec;  // report the name found in the file
            as_named.name = t->name;
            check_tensor_impl(f, as_named, *t, &hp);
        }
        weight* slot = nullptr;
        if (spec.layer < 0) {
            for (const auto& s : kGlobalSlots) {
                if (spec.name == s.name) slot = &(w_.*s.member);
            }
        } else {
            v41_block_weights& b = block_of(static_cast<uint32_t>(spec.layer));
            for (const auto& s : kV41Slots) {
                if (spec.suffix == s.suffix) slot = &(b.*s.member);
            }
        }
        MAGNETAR_ASSERT(slot != nullptr, "V4.1 catalogue entry without a binding slot");
        *slot = bind(f, *t);
        known.insert(t->name);
    }

    auto check_block = [&](const v41_block_weights& b) {
        if (b.ffn_gate_exps.type != b.ffn_up_exps.type) {
            throw Error(
                strfmt("%s: layer %u: ffn_gate_exps (%s) and ffn_up_exps (%s) must share one type",
                       f.path().c_str(), b.il,
                       std::string(type_name(static_cast<uint32_t>(b.ffn_gate_exps.type))).c_str(),
                       std::string(type_name(static_cast<uint32_t>(b.ffn_up_exps.type))).c_str()));
        }
    };
    for (const auto& b : vw.layers) check_block(b);
    for (const auto& b : vw.dspark) check_block(b);
    // Engram tables (about 100 GB each when released) are read a few rows per token: no
    // read-around, so a lookup pages in only the rows it reads.
    for (const auto& b : vw.layers) {
        if (b.engram_embd) gguf::advise_random_access(b.engram_embd.data, b.engram_embd.n_bytes());
    }
    w_.v41 = std::move(vw);

    for (const auto& t : f.tensors()) {
        if (!known.count(t.name)) unknown_.push_back(t.name);
    }
}

}  // namespace magnetar
