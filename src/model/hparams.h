// DeepSeek V4 and V4.1 hyper-parameters: the typed form of the `deepseek4.*` and
// `deepseek41.*` GGUF metadata.
//
// Owns: the key names, reading them with the project's type rules (spec model.md §3.2 and
// §12.7; for V4.1 spec v41.md §2.4 with its key aliases, read in hparams_v41.cpp),
// internal-consistency validation (for V4.1 the C1-C8 rules of v41.md §1.3), the derived V4.1
// layer roles (attention mode, KV / index sources), the Engram bucket primes and offsets
// (v41.md §3.9.2), writing the keys back (generator, quantizer), and the named presets (Flash,
// Pro, V4.1 Flash and the small synthetic shapes used by tests and benchmarks).
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
constexpr const char* kArchDeepseek41 = "deepseek41";

// Upper bounds of the hyper-parameters, checked at load (hparams::check_bounds, called first
// by validate() and by the V4.1 reader before a value sizes any work) so that a corrupt or
// hostile file is refused naming the key instead of turning into an allocation of terabytes,
// an abort or a loop of 2^31 iterations. Each bound is far above every shape the engine knows
// (V4 Flash / Pro, V4.1 Flash, the gen-model presets; the largest value is in the comment) and
// low enough that every product of bounded values that sizes a tensor, a cache or a scratch
// buffer fits in 64 bits with a wide margin (static_asserts in hparams.cpp). Where a backend
// has a fixed limit (stack arrays sized for it) the bound is that limit. Docs: docs/models.md,
// "Bounds".
namespace hparam_limits {
// block_count, hash_layer_count: Pro has 61 layers; per-layer state is allocated per session.
constexpr uint32_t kMaxLayers = 1024;
// context_length, rope.scaling.original_context_length and a session's n_ctx: 16x the 1M
// tokens of V4 / V4.1 (2^24 keeps n_ctx x the widest cache row far inside 64 bits).
constexpr uint64_t kMaxContext = uint64_t{1} << 24;
// embedding_length: Pro 7168.
constexpr uint32_t kMaxEmbd = 65536;
// vocab_size: 129280 (the GGUF reader holds at most 2^22 metadata values anyway).
constexpr uint32_t kMaxVocab = uint32_t{1} << 22;
// attention.head_count, attention.indexer.head_count, attention.output_group_count: Pro 128
// heads; 1024 is the CPU backend's per-head stack statistics (v41_ops kMaxHeads).
constexpr uint32_t kMaxHeads = 1024;
// attention.key_length: 512.
constexpr uint32_t kMaxHeadDim = 4096;
// rope.dimension_count: 64 everywhere; 256 is every backend's RoPE table (kMaxRot).
constexpr uint32_t kMaxRot = 256;
// attention.indexer.key_length: 128; 1024 is the CPU indexer's decoded key on the stack.
constexpr uint32_t kMaxIndexerHeadDim = 1024;
// attention.q_lora_rank, attention.output_lora_rank, dspark.markov_rank: 1536 / 1024 / 256.
constexpr uint32_t kMaxRank = 65536;
// expert_count, dspark.expert_count: Pro / V4.1 Flash 384.
constexpr uint32_t kMaxExperts = 4096;
// expert_used_count, dspark.expert_used_count: 6; 64 is the routers' selection buffer
// (cpu moe kMaxUsed, v41_ops kMaxUsed41).
constexpr uint32_t kMaxExpertsUsed = 64;
// expert_feed_forward_length: Pro 3072.
constexpr uint32_t kMaxFeedForward = 65536;
// attention.sliding_window (also <= context_length): 128. The V4.1 window ring holds this
// many rows per block whatever the session's context.
constexpr uint32_t kMaxSlidingWindow = 65536;
// attention.indexer.top_k (also <= the compressed rows of context_length): Pro 1024.
constexpr uint32_t kMaxIndexerTopK = 65536;
// hyper_connection.count: 4; 8 is every backend's HC stack arrays (kMaxHc).
constexpr uint32_t kMaxHc = 8;
// hyper_connection.sinkhorn_iterations: 20. Run per token and layer, twice: 1000 is 50x the
// released count and still a bounded cost.
constexpr uint32_t kMaxSinkhornIterations = 1000;
// nextn_predict_layers (V4.1 DSpark stages): 3.
constexpr uint32_t kMaxDSparkStages = 16;
// dspark.block_size: 5.
constexpr uint32_t kMaxDSparkBlockSize = 256;
// attention.candidate_topk_blocks / candidate_block_size: 2048 / 8 (their product is also
// bounded by context_length).
constexpr uint32_t kMaxCandidateBlocks = 65536;
constexpr uint32_t kMaxCandidateBlockSize = 4096;
// Engram (V4.1 Flash: N = 4, 8 heads of 256, search start 16M, 2 layers x 24 = 48 primes).
// The primes are searched by trial division at load, twice: the start and the prime count
// bound that work (about 20 ms at the bounds).
constexpr uint32_t kMaxEngramNgram = 8;                  // engram.max_ngram_size
constexpr uint32_t kMaxEngramHeads = 64;                 // engram.head_count
constexpr uint32_t kMaxEngramHeadDim = 4096;             // engram.key_length
constexpr uint32_t kMaxEngramVocab = uint32_t{1} << 28;  // engram.vocab_size (search start)
constexpr uint64_t kMaxEngramPrimes = 512;               // Engram layers x (N - 1) x heads
// Entries of the per-block lists (attention.compress_ratios, swiglu_clamp_exp,
// swiglu_clamp_shexp): every block and one spare entry (V4's MTP block, spec §12.6); validate()
// also holds them to the model's own block count + 1.
constexpr uint64_t kMaxBlockList = uint64_t{kMaxLayers} + kMaxDSparkStages + 1;
}  // namespace hparam_limits

// Attention mode of a V4.1 layer (spec v41.md §1.2-§1.3). DSpark stages (il >= n_layer) are
// window-only blocks with their own MoE size.
enum class layer_mode : uint8_t {
    swa_only,  // ratio 0 backbone layer: sliding window only
    full,      // KV source: own compressor and index keys (and index query); maybe candidate source
    reindex,   // index source that is not a KV source: own index query over the source's keys
    reuse,     // reads KV and top-k of earlier layers; own q and window KV only
    dspark,    // DSpark draft stage
};
const char* layer_mode_name(layer_mode m);

// Engram (spec v41.md §3.9). Per-Engram-layer arrays are in layer_ids order.
struct engram_hparams {
    std::vector<uint32_t> layer_ids;       // engram.layer_ids (backbone layers)
    std::vector<uint64_t> num_embeddings;  // engram.num_embeddings: table rows per layer
    uint32_t vocab_size = 0;               // engram.vocab_size: prime search start
    uint32_t max_ngram = 0;                // engram.max_ngram_size (N)
    uint32_t n_head = 0;                   // engram.head_count (EH)
    uint32_t head_dim = 0;                 // engram.key_length (ED)
    uint32_t compressed_vocab = 0;         // engram.compressed_vocab_size
    uint32_t pad_id = 0;                   // engram.pad_id: the COMPRESSED pad id
    std::vector<int32_t> token_map;        // engram.token_map: [n_vocab] compressed ids
    std::vector<uint64_t> multipliers;     // engram.multipliers: [layer][N] (from the file)
    std::vector<uint64_t> primes;          // [layer][N-1][EH], recomputed (§3.9.2)
    std::vector<uint64_t> offsets;         // [layer][(N-1)*EH], recomputed

    uint32_t n_layers() const { return static_cast<uint32_t>(layer_ids.size()); }
    uint32_t n_col() const { return max_ngram > 0 ? (max_ngram - 1) * n_head : 0; }  // C
    // Multipliers are 2 v + 1 with v < bound = floor(floor((2^63 - 1) / compressed_vocab) / 2),
    // at least 1 (§3.9.3).
    uint64_t multiplier_bound() const;
    // Bytes of one lossless table row (row264 for ED = 256): ED E4M3 bytes + ED/32 UE8M0 bytes.
    uint32_t row_bytes() const { return head_dim + head_dim / 32; }
};

// DSpark draft stages (spec v41.md §3.10).
struct dspark_hparams {
    uint32_t block_size = 0;              // dspark.block_size (B_d)
    uint32_t noise_token_id = 0;          // dspark.noise_token_id
    std::vector<uint32_t> target_layers;  // dspark.target_layer_ids (taps: inputs of these)
    uint32_t markov_rank = 0;             // dspark.markov_rank (Rm)
    uint32_t n_expert = 0;                // dspark.expert_count (0: backbone's)
    uint32_t n_expert_used = 0;           // dspark.expert_used_count (0: backbone's)
};

// The V4.1 additions to the V4 hyper-parameters.
struct v41_hparams {
    uint32_t n_dspark = 0;                      // nextn_predict_layers: DSpark stages
    std::vector<uint32_t> kv_sources;           // attention.kv_source_layer_ids
    std::vector<uint32_t> index_sources;        // attention.index_source_layer_ids
    int32_t candidate_source = -1;              // attention.candidate_source_layer_id (-1: off)
    uint32_t candidate_topk_blocks = 0;         // attention.candidate_topk_blocks (NB)
    uint32_t candidate_block_size = 0;          // attention.candidate_block_size (B)
    std::string scoring_func = "sqrtsoftplus";  // expert_scoring_func
    float gate_temp = 1.0f;                     // expert_gate_temp (optional)
    std::vector<float> swiglu_clamp_shexp;      // swiglu_clamp_shexp (optional; empty: none)
    engram_hparams engram;
    dspark_hparams dspark;
};

struct hparams {
    std::string arch = kArchDeepseek4;
    std::string name;  // general.name (informational)

    uint32_t n_layer = 0;              // block_count (main stack, MTP excluded)
    uint64_t n_ctx_train = 0;          // context_length (informational)
    uint32_t n_embd = 0;               // embedding_length (D)
    uint32_t n_vocab = 0;              // vocab_size
    uint32_t n_head = 0;               // attention.head_count (H)
    uint32_t n_head_kv = 1;            // attention.head_count_kv (single shared latent)
    uint32_t n_head_dim = 0;           // attention.key_length (hd)
    uint32_t n_value_dim = 0;          // attention.value_length (== hd)
    uint32_t n_rot = 0;                // rope.dimension_count (rd, RoPE'd tail of each head)
    uint32_t n_q_lora = 0;             // attention.q_lora_rank
    uint32_t n_o_lora = 0;             // attention.output_lora_rank (per group)
    uint32_t n_o_group = 0;            // attention.output_group_count (G)
    uint32_t n_expert = 0;             // expert_count (E)
    uint32_t n_expert_used = 0;        // expert_used_count (k)
    uint32_t n_ff_exp = 0;             // expert_feed_forward_length (F)
    uint32_t n_expert_shared = 0;      // expert_shared_count
    uint32_t n_hash_layer = 0;         // hash_layer_count (first layers use tid2eid routing)
    uint32_t n_expert_group = 0;       // expert_group_count (optional, 0 = none)
    uint32_t n_expert_group_used = 0;  // expert_group_used_count (optional)
    uint32_t n_swa = 0;                // attention.sliding_window (W, raw rows incl. current)
    uint32_t n_indexer_head = 0;       // attention.indexer.head_count (IH)
    uint32_t n_indexer_head_dim = 0;   // attention.indexer.key_length (Id)
    uint32_t n_indexer_top_k = 0;      // attention.indexer.top_k (K_idx)
    uint32_t n_hc = 0;                 // hyper_connection.count (NHC)
    uint32_t n_sinkhorn_iter = 0;      // hyper_connection.sinkhorn_iterations

    // attention.compress_ratios: at least n_layer entries; entry n_layer (if present) is the
    // MTP block, which is always treated as ratio 0 (spec §12.6).
    std::vector<uint32_t> compress_ratios;
    // swiglu_clamp_exp: at least n_layer entries.
    std::vector<float> swiglu_clamp;

    uint64_t rope_orig_ctx = 0;         // rope.scaling.original_context_length
    float rope_freq_base = 0;           // rope.freq_base (ratio-0 layers)
    float rope_scaling_factor = 0;      // rope.scaling.factor (YaRN s)
    float yarn_beta_fast = 0;           // rope.scaling.yarn_beta_fast
    float yarn_beta_slow = 0;           // rope.scaling.yarn_beta_slow
    float compress_rope_freq_base = 0;  // attention.compress_rope_freq_base (ratio != 0 layers)
    float expert_weights_scale = 0;     // expert_weights_scale (route scale)
    float rms_eps = 0;                  // attention.layer_norm_rms_epsilon
    float hc_eps = 0;                   // hyper_connection.epsilon
    bool expert_weights_norm = true;    // expert_weights_norm

    // V4.1 only (arch == deepseek41); default-constructed for V4.
    v41_hparams v41;

    // ---- derived helpers ----
    bool is_v41() const { return arch == kArchDeepseek41; }
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

    // ---- V4.1 layer roles (spec v41.md §1.3); il counts DSpark stages from n_layer on ----
    uint32_t n_dspark() const { return v41.n_dspark; }
    bool is_dspark(uint32_t il) const { return il >= n_layer; }
    bool is_kv_source(uint32_t il) const;
    bool is_index_source(uint32_t il) const;
    bool owns_index_k(uint32_t il) const { return is_index_source(il) && is_kv_source(il); }
    bool is_candidate_src(uint32_t il) const;
    bool uses_candidates(uint32_t il) const;
    // max{s in kv_sources : s <= il} for ratio > 0 layers, -1 otherwise.
    int32_t kv_source(uint32_t il) const;
    // max{s in index_sources : s <= il} for ratio > 0 layers, -1 otherwise.
    int32_t index_source(uint32_t il) const;
    layer_mode mode(uint32_t il) const;
    // Backbone layers (il < n_layer) of a mode; dspark counts the stages.
    uint32_t count_mode(layer_mode m) const;
    // Position of il in engram.layer_ids, -1 when il has no Engram.
    int32_t engram_index(uint32_t il) const;
    uint32_t dspark_n_expert() const {
        return v41.dspark.n_expert ? v41.dspark.n_expert : n_expert;
    }
    uint32_t dspark_n_expert_used() const {
        return v41.dspark.n_expert_used ? v41.dspark.n_expert_used : n_expert_used;
    }

    // Throws magnetar::Error naming the first inconsistent field (expected vs got).
    // Starts with check_bounds(). For V4.1 this enforces C1-C8 of spec v41.md §1.3, checks the
    // Engram primes, offsets, multipliers and token map (when present; read_hparams requires
    // it), §9.11.
    void validate() const;
    // The upper bounds of hparam_limits only (no consistency rules; zero passes): throws
    // magnetar::Error "hyper-parameter <arch>.<key>: expected at most N (why), got V" for the
    // first field above its bound. Safe on a partly read struct (defaults are zero).
    void check_bounds() const;

  private:
    void validate_shared() const;
    void validate_v4() const;
    void validate_v41() const;
};

// Engram bucket primes (spec v41.md §3.9.2): for each of n_layers Engram layers and each
// n-gram size n = 2..max_ngram, n_head primes, each the smallest prime above the previous one
// (the search restarting at vocab_size - 1 for every n) that no earlier column took.
// Flat [layer][n-2][head].
std::vector<uint64_t> engram_primes(uint64_t vocab_size, uint32_t max_ngram, uint32_t n_head,
                                    size_t n_layers);
// Per-layer prefix sums of the primes: offset of column c = sum of the layer's columns < c.
std::vector<uint64_t> engram_offsets(const std::vector<uint64_t>& primes, uint32_t n_col);

// Reads and validates the deepseek4.* or deepseek41.* keys (by general.architecture). Throws
// magnetar::Error naming the key, with the expected and found type or value, for any missing
// or bad key.
hparams read_hparams(const gguf::reader& file);

// Writes general.architecture, general.name and every deepseek4.* (or deepseek41.*) key.
void write_hparams(gguf::writer& w, const hparams& hp);

// The V4.1 halves (hparams_v41.cpp reads, hparams_v41_write.cpp writes). read_hparams_v41 reads the
// proposed deepseek41.* keys, falling back to the ds4 HF-named keys (deepseek41.<hf_key>), the
// deepseek41.config JSON and the vcruz305 engram.* keys; it fails naming the proposed key when no
// form is present.
hparams read_hparams_v41(const gguf::reader& file);
void write_hparams_v41(gguf::writer& w, const hparams& hp);

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

// DeepSeek V4.1 Flash as released (spec v41.md §1.1, released Engram multipliers of §3.9.3).
// Its Engram token map needs the real tokenizer and is left empty: the preset serves shape and
// memory accounting, not file generation.
hparams preset_v41_flash();
// The V4.1 reference test configuration `v41-tiny` (spec v41.md §6.1-§6.2): 8 layers with every
// attention mode, two Engram layers, two DSpark stages, vocabulary 512 with the stub token map
// token_map[t] = t / 2.
hparams preset_v41_tiny();

// Looks up a preset by name: flash, pro, tiny, tiny-mtp, flash-layers:N, v41-tiny, v41-flash.
// *with_mtp tells whether the preset includes the MTP block (for V4.1: the DSpark stages).
// Throws magnetar::Error for unknown names.
hparams preset_by_name(const std::string& name, bool* with_mtp);

// Names accepted by preset_by_name, for --help texts.
const char* preset_names_help();

}  // namespace magnetar
