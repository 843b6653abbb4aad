// Named hyper-parameter presets: the real Flash and Pro shapes (spec model.md §2) and the small
// synthetic shapes used by tests and benchmarks.
#include <cstdlib>

#include "core/error.h"
#include "core/format.h"
#include "model/hparams.h"

namespace magnetar {

namespace {

// Settings shared by every DeepSeek V4 shape.
hparams common() {
    hparams hp;
    hp.n_ctx_train = 1048576;
    hp.n_vocab = 129280;
    hp.n_head_kv = 1;
    hp.n_head_dim = 512;
    hp.n_value_dim = 512;
    hp.n_rot = 64;
    hp.n_o_lora = 1024;
    hp.n_expert_used = 6;
    hp.n_expert_shared = 1;
    hp.n_hash_layer = 3;
    hp.n_swa = 128;
    hp.n_indexer_head = 64;
    hp.n_indexer_head_dim = 128;
    hp.n_hc = 4;
    hp.n_sinkhorn_iter = 20;
    hp.rope_orig_ctx = 65536;
    hp.rope_freq_base = 10000.0f;
    hp.rope_scaling_factor = 16.0f;
    hp.yarn_beta_fast = 32.0f;
    hp.yarn_beta_slow = 1.0f;
    hp.compress_rope_freq_base = 160000.0f;
    hp.rms_eps = 1e-6f;
    hp.hc_eps = 1e-6f;
    hp.expert_weights_norm = true;
    return hp;
}

// Ratio schedule plus the MTP entry (always 0), clamp list of the same length.
void set_schedule(hparams& hp, std::vector<uint32_t> ratios) {
    hp.n_layer = static_cast<uint32_t>(ratios.size());
    ratios.push_back(0);  // MTP block
    hp.compress_ratios = std::move(ratios);
    hp.swiglu_clamp.assign(hp.compress_ratios.size(), 10.0f);
}

}  // namespace

hparams preset_flash() {
    hparams hp = common();
    hp.name = "DeepSeek-V4-Flash";
    hp.n_embd = 4096;
    hp.n_head = 64;
    hp.n_q_lora = 1024;
    hp.n_o_group = 8;
    hp.n_expert = 256;
    hp.n_ff_exp = 2048;
    hp.n_indexer_top_k = 512;
    hp.expert_weights_scale = 1.5f;
    std::vector<uint32_t> r;
    for (uint32_t l = 0; l < 43; ++l) r.push_back(l < 2 ? 0 : (l % 2 == 0 ? 4 : 128));
    set_schedule(hp, r);
    return hp;
}

hparams preset_pro() {
    hparams hp = common();
    hp.name = "DeepSeek-V4-Pro";
    hp.n_embd = 7168;
    hp.n_head = 128;
    hp.n_q_lora = 1536;
    hp.n_o_group = 16;
    hp.n_expert = 384;
    hp.n_ff_exp = 3072;
    hp.n_indexer_top_k = 1024;
    hp.expert_weights_scale = 2.5f;
    std::vector<uint32_t> r;
    for (uint32_t l = 0; l < 61; ++l) r.push_back(l < 2 ? 128 : (l % 2 == 0 ? 4 : 128));
    set_schedule(hp, r);
    return hp;
}

hparams preset_tiny() {
    hparams hp = common();
    hp.name = "magnetar-tiny";
    hp.n_ctx_train = 4096;
    hp.n_embd = 256;
    hp.n_head = 4;
    hp.n_head_dim = 128;  // 64 FP8-rounded nope dims + 64 RoPE dims
    hp.n_value_dim = 128;
    hp.n_rot = 64;
    hp.n_q_lora = 128;
    hp.n_o_lora = 64;
    hp.n_o_group = 2;
    hp.n_expert = 8;
    hp.n_expert_used = 2;
    hp.n_ff_exp = 256;
    hp.n_hash_layer = 2;
    hp.n_swa = 16;
    hp.n_indexer_head = 4;
    hp.n_indexer_head_dim = 64;
    hp.n_indexer_top_k = 16;
    hp.expert_weights_scale = 1.5f;
    set_schedule(hp, {0, 0, 4, 128, 4, 128});
    return hp;
}

hparams preset_flash_layers(uint32_t n) {
    if (n == 0 || n > 43) throw Error(strfmt("flash-layers:N needs 1 <= N <= 43, got %u", n));
    hparams hp = preset_flash();
    hp.name = strfmt("DeepSeek-V4-Flash-layers-%u", n);
    std::vector<uint32_t> r;
    for (uint32_t l = 0; l < n; ++l) r.push_back(l % 2 == 0 ? 4 : 128);
    set_schedule(hp, r);
    hp.n_hash_layer = 0;
    return hp;
}

hparams preset_by_name(const std::string& name, bool* with_mtp) {
    bool mtp = false;
    hparams hp;
    if (name == "flash") {
        hp = preset_flash();
    } else if (name == "pro") {
        hp = preset_pro();
    } else if (name == "tiny") {
        hp = preset_tiny();
    } else if (name == "tiny-mtp") {
        hp = preset_tiny();
        hp.name = "magnetar-tiny-mtp";
        mtp = true;
    } else if (name.rfind("flash-layers:", 0) == 0) {
        const std::string num = name.substr(13);
        char* end = nullptr;
        unsigned long n = std::strtoul(num.c_str(), &end, 10);
        if (num.empty() || *end != '\0' || n > 43) {
            throw Error(strfmt("preset '%s': expected flash-layers:N with 1 <= N <= 43", name.c_str()));
        }
        hp = preset_flash_layers(static_cast<uint32_t>(n));
    } else {
        throw Error(strfmt("unknown preset '%s' (known: %s)", name.c_str(), preset_names_help()));
    }
    if (with_mtp) *with_mtp = mtp;
    hp.validate();
    return hp;
}

const char* preset_names_help() { return "tiny, tiny-mtp, flash-layers:N, flash, pro"; }

}  // namespace magnetar
