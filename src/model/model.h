// A loaded DeepSeek V4 or V4.1 model: hyper-parameters plus every weight bound by name to its
// bytes in the memory-mapped GGUF, validated once at load (name, shape, type class, byte range).
// V4 files bind into model_weights::layers / mtp; V4.1 files into model_weights::v41 (the V4
// per-layer vectors stay empty), with the globals token_embd / output_norm / output shared.
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

// One V4.1 block: a backbone layer (il < n_layer) or a DSpark stage (il >= n_layer). Which
// optional groups are bound follows the layer's role (spec v41.md §1.2, §2.3).
struct v41_block_weights {
    uint32_t il = 0;
    uint32_t compress_ratio = 0;
    layer_mode mode = layer_mode::swa_only;
    int32_t engram_index = -1;  // position in engram.layer_ids, -1: no Engram

    // attention half (every block)
    weight hc_attn_fn, hc_attn_base, hc_attn_scale;
    weight attn_norm;
    weight attn_q_a, attn_q_a_norm, attn_q_b;
    weight attn_kv, attn_kv_a_norm;
    weight attn_sinks;
    weight attn_output_a, attn_output_b;
    // compressor and index keys (KV sources; comp_gate only for ratio > 1)
    weight comp_kv, comp_gate, comp_norm;
    weight idx_k, idx_k_norm;
    // index query (index sources)
    weight idx_q_b, idx_proj;
    // Engram (Engram layers): table (I8 row264 or Q8_0), projection, gate weights [D, n_hc]
    weight engram_embd, engram_kv, engram_q_norm, engram_k_norm;
    // FFN half (every block; DSpark stages with the DSpark expert count)
    weight hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
    weight ffn_norm;
    weight ffn_gate_inp, exp_probs_b, exp_probs_b_vl;
    weight ffn_gate_exps, ffn_up_exps, ffn_down_exps;
    weight ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;
    // DSpark: tap projection and its norm (stage 0); heads (last stage)
    weight dspark_main_proj, dspark_main_norm;
    weight dspark_norm, dspark_markov_embd, dspark_markov_head, dspark_conf;
};

struct v41_weights {
    std::vector<v41_block_weights> layers;  // backbone, n_layer entries
    std::vector<v41_block_weights> dspark;  // DSpark stages (empty when the file has none)
};

struct model_weights {
    weight token_embd;
    weight output_hc_fn, output_hc_base, output_hc_scale;  // V4 only
    weight output_norm;
    weight output;
    std::vector<layer_weights> layers;  // V4
    std::optional<mtp_weights> mtp;     // V4
    std::optional<v41_weights> v41;     // V4.1
};

struct load_options {
    // Separate MTP GGUF (as published); empty: use mtp.0.* tensors of the main file if present.
    // Not supported for V4.1 (its DSpark stages are read from the main file).
    std::string mtp_path;
    // Fail if no MTP block (V4.1: no DSpark stages) can be bound.
    bool require_mtp = false;
    // How the files' bytes are held (gguf::open_options): mapped (the default) or read into
    // private memory, and locked in RAM or not.
    bool mmap = true;
    bool mlock = false;
    bool quiet = false;  // no progress bar while a file is read or locked
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
    // Whether a draft block is bound: the V4 MTP block or the V4.1 DSpark stages.
    bool has_draft() const { return w_.mtp.has_value() || (w_.v41 && !w_.v41->dspark.empty()); }
    // Why a lock asked for by load_options::mlock was not granted (the first file refused);
    // empty when every file is locked or none was asked to be.
    const std::string& lock_warning() const { return lock_warning_; }
    // Tensors of the file(s) that the catalogue does not know (reported by inspect, ignored).
    const std::vector<std::string>& unknown_tensors() const { return unknown_; }

  private:
    void bind_v41(const load_options& opts);

    hparams hp_;
    std::unique_ptr<gguf::reader> file_;
    std::unique_ptr<gguf::reader> mtp_file_;
    model_weights w_;
    std::vector<std::string> unknown_;
    std::string lock_warning_;
};

// Checks one tensor of `file` against its catalogue entry (shape for its type, dtype class).
// Exposed for tests and tools that check a file against a catalogue without loading it all.
// Throws magnetar::Error for the first problem.
void check_tensor(const gguf::reader& file, const tensor_spec& spec, const gguf::tensor_info& t);

}  // namespace magnetar
