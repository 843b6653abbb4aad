// A loaded DeepSeek V4 model: hyper-parameters plus every weight bound by name to its bytes in
// the memory-mapped GGUF, validated once at load (name, shape, type class, byte range).
//
// After load() succeeds the forward pass never re-checks: every required weight is present with
// the catalogue's shape, gate/up experts of a layer share one type, matrix rows are whole
// blocks, and hash tables hold valid expert ids.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/catalogue.h"
#include "model/hparams.h"

namespace magnetar {

// One bound tensor. Empty (data == nullptr) for optional tensors that are absent.
struct weight {
    const gguf::tensor_info* info = nullptr;
    const uint8_t* data = nullptr;
    ggml_type type = ggml_type::F32;
    int64_t ne[gguf::kMaxDims] = {1, 1, 1, 1};

    explicit operator bool() const { return data != nullptr; }
    // Bytes of one row (ne[0] elements).
    size_t row_bytes() const { return magnetar::row_bytes(type, ne[0]); }
    uint64_t n_bytes() const { return info ? info->n_bytes : 0; }
};

struct layer_weights {
    uint32_t il = 0;
    uint32_t compress_ratio = 0;
    bool hash_routed = false;

    // attention half
    weight hc_attn_fn, hc_attn_base, hc_attn_scale;
    weight attn_norm;
    weight attn_q_a, attn_q_a_norm, attn_q_b;
    weight attn_kv, attn_kv_a_norm;
    weight attn_sinks;
    weight attn_output_a, attn_output_b;
    // main compressor (ratio != 0)
    weight comp_ape, comp_kv, comp_gate, comp_norm;
    // indexer (ratio 4)
    weight idx_q_b, idx_proj, idx_comp_ape, idx_comp_kv, idx_comp_gate, idx_comp_norm;
    // FFN half
    weight hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
    weight ffn_norm;
    weight ffn_gate_inp, ffn_gate_tid2eid, exp_probs_b;
    weight ffn_gate_exps, ffn_up_exps, ffn_down_exps;
    weight ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;
};

struct mtp_weights {
    weight hc_head_fn, hc_head_base, hc_head_scale;
    weight e_proj, h_proj;
    weight enorm, hnorm, norm;
    layer_weights block;
};

struct model_weights {
    weight token_embd;
    weight output_hc_fn, output_hc_base, output_hc_scale;
    weight output_norm;
    weight output;
    std::vector<layer_weights> layers;
    std::optional<mtp_weights> mtp;
};

struct load_options {
    // Separate MTP GGUF (as published); empty: use mtp.0.* tensors of the main file if present.
    std::string mtp_path;
    // Fail if no MTP block can be bound.
    bool require_mtp = false;
};

class model {
public:
    // Maps, validates and binds. Throws magnetar::Error naming the file and the culprit
    // tensor or key, with expected versus found.
    static std::unique_ptr<model> load(const std::string& path, const load_options& opts = {});

    const hparams& hp() const { return hp_; }
    const model_weights& weights() const { return w_; }
    const gguf::reader& file() const { return *file_; }
    const gguf::reader* mtp_file() const { return mtp_file_ ? mtp_file_.get() : file_.get(); }
    // Tensors of the file(s) that the catalogue does not know (reported by inspect, ignored).
    const std::vector<std::string>& unknown_tensors() const { return unknown_; }

private:
    hparams hp_;
    std::unique_ptr<gguf::reader> file_;
    std::unique_ptr<gguf::reader> mtp_file_;
    model_weights w_;
    std::vector<std::string> unknown_;
};

// Checks one tensor of `file` against its catalogue entry (shape, dtype class).
// Exposed for tests and tools that check a file against a catalogue without loading it all.
// Throws magnetar::Error for the first problem.
void check_tensor(const gguf::reader& file, const tensor_spec& spec, const gguf::tensor_info& t);

}  // namespace magnetar
