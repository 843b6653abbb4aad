// DeepSeek V4 hyper-parameters: the typed form of the `deepseek4.*` GGUF metadata.
//
// Owns: the key names, reading them with the project's type rules (spec model.md §3.2 and
// §12.7), internal-consistency validation, writing them back (generator, quantizer), and the
// named presets (Flash, Pro and the small synthetic shapes used by tests and benchmarks).
// Does not own: tensor names and shapes (catalogue.h) or tokenizer keys.
//
// No shape is hard-coded: any internally consistent shape loads through the same code, so the
// small synthetic models exercise exactly the code that loads the real files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace magnetar::gguf {
class reader;
class writer;
}  // namespace magnetar::gguf

namespace magnetar {

constexpr const char* kArchDeepseek4 = "deepseek4";

struct hparams {
    std::string arch = kArchDeepseek4;
    std::string name;  // general.name (informational)

    uint32_t n_layer = 0;            // block_count (main stack, MTP excluded)
    uint64_t n_ctx_train = 0;        // context_length (informational)
    uint32_t n_embd = 0;             // embedding_length (D)
    uint32_t n_vocab = 0;            // vocab_size
    uint32_t n_head = 0;             // attention.head_count (H)
    uint32_t n_head_kv = 1;          // attention.head_count_kv (single shared latent)
    uint32_t n_head_dim = 0;         // attention.key_length (hd)
    uint32_t n_value_dim = 0;        // attention.value_length (== hd)
    uint32_t n_rot = 0;              // rope.dimension_count (rd, RoPE'd tail of each head)
    uint32_t n_q_lora = 0;           // attention.q_lora_rank
    uint32_t n_o_lora = 0;           // attention.output_lora_rank (per group)
    uint32_t n_o_group = 0;          // attention.output_group_count (G)
    uint32_t n_expert = 0;           // expert_count (E)
    uint32_t n_expert_used = 0;      // expert_used_count (k)
    uint32_t n_ff_exp = 0;           // expert_feed_forward_length (F)
    uint32_t n_expert_shared = 0;    // expert_shared_count
    uint32_t n_hash_layer = 0;       // hash_layer_count (first layers use tid2eid routing)
    uint32_t n_expert_group = 0;     // expert_group_count (optional, 0 = none)
    uint32_t n_expert_group_used = 0;// expert_group_used_count (optional)
    uint32_t n_swa = 0;              // attention.sliding_window (W, raw rows incl. current)
    uint32_t n_indexer_head = 0;     // attention.indexer.head_count (IH)
    uint32_t n_indexer_head_dim = 0; // attention.indexer.key_length (Id)
    uint32_t n_indexer_top_k = 0;    // attention.indexer.top_k (K_idx)
    uint32_t n_hc = 0;               // hyper_connection.count (NHC)
    uint32_t n_sinkhorn_iter = 0;    // hyper_connection.sinkhorn_iterations

    // attention.compress_ratios: at least n_layer entries; entry n_layer (if present) is the
    // MTP block, which is always treated as ratio 0 (spec §12.6).
    std::vector<uint32_t> compress_ratios;
    // swiglu_clamp_exp: at least n_layer entries.
    std::vector<float> swiglu_clamp;

    uint64_t rope_orig_ctx = 0;       // rope.scaling.original_context_length
    float rope_freq_base = 0;         // rope.freq_base (ratio-0 layers)
    float rope_scaling_factor = 0;    // rope.scaling.factor (YaRN s)
    float yarn_beta_fast = 0;         // rope.scaling.yarn_beta_fast
    float yarn_beta_slow = 0;         // rope.scaling.yarn_beta_slow
    float compress_rope_freq_base = 0;// attention.compress_rope_freq_base (ratio != 0 layers)
    float expert_weights_scale = 0;   // expert_weights_scale (route scale)
    float rms_eps = 0;                // attention.layer_norm_rms_epsilon
    float hc_eps = 0;                 // hyper_connection.epsilon
    bool expert_weights_norm = true;  // expert_weights_norm

    // ---- derived helpers ----
    uint32_t compress_ratio(uint32_t il) const { return il < n_layer ? compress_ratios[il] : 0; }
    bool is_hash_layer(uint32_t il) const { return il < n_hash_layer; }
    uint32_t n_nope() const { return n_head_dim - n_rot; }
    uint32_t heads_per_group() const { return n_head / n_o_group; }
    // Width of one output group's input: hd * H / G.
    uint32_t o_group_in() const { return n_head_dim * heads_per_group(); }
    // Compressor overlap factor: 2 for ratio 4 (two lanes), else 1.
    static uint32_t coff(uint32_t ratio) { return ratio == 4 ? 2 : 1; }
    uint32_t n_hc_mix() const { return (2 + n_hc) * n_hc; }  // HC mixer outputs (24)
    uint32_t count_layers_with_ratio(uint32_t ratio) const;

    // Throws magnetar::Error naming the first inconsistent field (expected vs got).
    void validate() const;
};

// Reads and validates the deepseek4.* keys. Throws magnetar::Error naming the key, with the
// expected and found type or value, for any missing or bad key.
hparams read_hparams(const gguf::reader& file);

// Writes general.architecture, general.name and every deepseek4.* key.
void write_hparams(gguf::writer& w, const hparams& hp);

// ---- presets ----
hparams preset_flash();  // DeepSeek V4 Flash (spec §2.1)
hparams preset_pro();    // DeepSeek V4 Pro (spec §2.1)
// Small model with the real 0/0/4/128/4/128 schedule: a few hundred tokens cross every
// compression and window boundary. Tensor widths are multiples of 256 so that every weight
// type (IQ2_XXS, Q2_K, Q4_K) fits.
hparams preset_tiny();
// N layers at the exact Flash width. The layers follow Flash's schedule from layer 2 on
// (ratios 4, 128, 4, ...) with learned routing, i.e. the layer kinds that make up 41 of the
// 43 Flash layers, so per-layer timings project honestly to the full model.
hparams preset_flash_layers(uint32_t n);

// Looks up a preset by name: flash, pro, tiny, tiny-mtp, flash-layers:N. *with_mtp tells
// whether the preset includes the MTP block. Throws magnetar::Error for unknown names.
hparams preset_by_name(const std::string& name, bool* with_mtp);

// Names accepted by preset_by_name, for --help texts.
const char* preset_names_help();

}  // namespace magnetar
