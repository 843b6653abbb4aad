// Named hyper-parameter presets: the real Flash and Pro shapes (spec model.md §2), the released
// V4.1 Flash shape (spec v41.md §1.1) and the small synthetic shapes used by tests and
// benchmarks (v41-tiny: spec v41.md §6).
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

namespace {

// Settings shared by the V4.1 shapes (spec v41.md §1.1 / §6.1).
hparams v41_common() {
    hparams hp;
    hp.arch = kArchDeepseek41;
    hp.n_head_kv = 1;
    hp.n_hc = 4;
    hp.n_sinkhorn_iter = 20;
    hp.hc_eps = 1e-6f;
    hp.rms_eps = 1e-20f;
    hp.rope_freq_base = 10000.0f;
    hp.compress_rope_freq_base = 160000.0f;
    hp.yarn_beta_fast = 32.0f;
    hp.yarn_beta_slow = 1.0f;
    hp.n_expert_shared = 1;
    hp.n_hash_layer = 0;
    hp.expert_weights_scale = 1.5f;
    hp.expert_weights_norm = true;
    hp.v41.scoring_func = "sqrtsoftplus";
    hp.v41.gate_temp = 1.0f;
    return hp;
}

// Recomputes the Engram primes and offsets (spec v41.md §3.9.2).
void set_engram_primes(hparams& hp) {
    engram_hparams& e = hp.v41.engram;
    e.primes = engram_primes(e.vocab_size, e.max_ngram, e.n_head, e.layer_ids.size());
    e.offsets = engram_offsets(e.primes, e.n_col());
}

}  // namespace

hparams preset_v41_flash() {
    hparams hp = v41_common();
    hp.name = "DeepSeek-V4.1-Flash";
    hp.n_layer = 40;
    hp.v41.n_dspark = 3;
    hp.n_ctx_train = 1048576;
    hp.n_embd = 5120;
    hp.n_vocab = 129280;
    hp.n_head = 64;
    hp.n_head_dim = 512;
    hp.n_value_dim = 512;
    hp.n_rot = 64;
    hp.n_q_lora = 1280;
    hp.n_o_group = 8;
    hp.n_o_lora = 1024;
    hp.n_swa = 128;
    hp.compress_ratios = {0, 0};
    hp.compress_ratios.insert(hp.compress_ratios.end(), 18, 2);
    hp.compress_ratios.insert(hp.compress_ratios.end(), 20, 1);
    hp.compress_ratios.insert(hp.compress_ratios.end(), 3, 0);
    hp.v41.kv_sources = {2, 8, 14, 20};
    hp.v41.index_sources = {2, 8, 14, 20, 24, 28, 32, 36};
    hp.v41.candidate_source = 20;
    hp.v41.candidate_topk_blocks = 2048;
    hp.v41.candidate_block_size = 8;
    hp.n_indexer_head = 32;
    hp.n_indexer_head_dim = 128;
    hp.n_indexer_top_k = 512;
    hp.rope_orig_ctx = 65536;
    hp.rope_scaling_factor = 16.0f;
    hp.n_expert = 384;
    hp.n_expert_used = 6;
    hp.n_ff_exp = 2304;
    hp.swiglu_clamp.assign(hp.compress_ratios.size(), 10.0f);
    engram_hparams& e = hp.v41.engram;
    e.layer_ids = {1, 14};
    e.num_embeddings = {384006168, 384016682};
    e.vocab_size = 16000000;
    e.max_ngram = 4;
    e.n_head = 8;
    e.head_dim = 256;
    e.compressed_vocab = 99092;
    // token_map[2] of the real tokenizer, probably 2 (spec v41.md §3.9.1, uncertain); files
    // carry the real value.
    e.pad_id = 2;
    e.multipliers = {76632096046245, 4839876093313,  35959672319349, 73987337458391,
                     67716810739261, 51510806800915, 30921347202721, 82619226485591};
    set_engram_primes(hp);
    dspark_hparams& d = hp.v41.dspark;
    d.block_size = 5;
    d.noise_token_id = 128799;
    d.target_layers = {37, 38, 39};
    d.markov_rank = 256;
    d.n_expert = 128;
    d.n_expert_used = 3;
    return hp;
}

hparams preset_v41_tiny() {
    hparams hp = v41_common();
    hp.name = "magnetar-v41-tiny";
    hp.n_layer = 8;
    hp.v41.n_dspark = 2;
    hp.n_ctx_train = 256;
    hp.n_embd = 256;
    hp.n_vocab = 512;
    hp.n_head = 4;
    hp.n_head_dim = 64;
    hp.n_value_dim = 64;
    hp.n_rot = 16;
    hp.n_q_lora = 64;
    hp.n_o_group = 2;
    hp.n_o_lora = 64;
    hp.n_swa = 8;
    hp.compress_ratios = {0, 2, 2, 2, 1, 1, 1, 1, 0, 0};
    hp.v41.kv_sources = {1, 3, 4};
    hp.v41.index_sources = {1, 3, 4, 6};
    hp.v41.candidate_source = 4;
    hp.v41.candidate_topk_blocks = 2;
    hp.v41.candidate_block_size = 4;
    hp.n_indexer_head = 4;
    hp.n_indexer_head_dim = 64;
    hp.n_indexer_top_k = 4;
    hp.rope_orig_ctx = 32;
    hp.rope_scaling_factor = 4.0f;
    hp.n_expert = 8;
    hp.n_expert_used = 3;
    hp.n_ff_exp = 128;
    hp.swiglu_clamp.assign(hp.compress_ratios.size(), 10.0f);
    engram_hparams& e = hp.v41.engram;
    e.layer_ids = {0, 1};
    e.num_embeddings = {660, 864};
    e.vocab_size = 100;
    e.max_ngram = 4;
    e.n_head = 2;
    e.head_dim = 32;
    e.compressed_vocab = 256;
    // Stub token map (tt-metal's StubTokenizer): tokens 2k and 2k+1 normalise alike.
    e.token_map.resize(hp.n_vocab);
    for (uint32_t t = 0; t < hp.n_vocab; ++t) e.token_map[t] = static_cast<int32_t>(t / 2);
    e.pad_id = static_cast<uint32_t>(e.token_map[2]);  // raw pad token 2
    e.multipliers = {22948963341361471ull, 9720090748611819ull,  1476226777048821ull,
                     595470825660793ull,   29662608052400909ull, 1873410163432121ull,
                     13919202536988139ull, 28638879857136817ull};
    set_engram_primes(hp);
    dspark_hparams& d = hp.v41.dspark;
    d.block_size = 3;
    d.noise_token_id = 511;
    d.target_layers = {5, 6, 7};
    d.markov_rank = 32;
    d.n_expert = 4;
    d.n_expert_used = 2;
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
            throw Error(
                strfmt("preset '%s': expected flash-layers:N with 1 <= N <= 43", name.c_str()));
        }
        hp = preset_flash_layers(static_cast<uint32_t>(n));
    } else if (name == "v41-tiny") {
        hp = preset_v41_tiny();
        mtp = true;
    } else if (name == "v41-flash") {
        hp = preset_v41_flash();
        mtp = true;
    } else {
        throw Error(strfmt("unknown preset '%s' (known: %s)", name.c_str(), preset_names_help()));
    }
    if (with_mtp) *with_mtp = mtp;
    hp.validate();
    return hp;
}

const char* preset_names_help() {
    return "tiny, tiny-mtp, flash-layers:N, flash, pro, v41-tiny, v41-flash";
}

}  // namespace magnetar
