// The synthetic model generator behind `magnetar gen-model`: DeepSeek-V4 and V4.1 layout GGUFs
// with random weights from a seed, deterministic across runs and machines. The V4.1 half
// (gen_model_v41.cpp) draws the weights in the checkpoint formats (spec v41.md §4, §6.1) and
// writes them in the chosen storage profile.
#pragma once

#include <cstdint>
#include <string>

#include "model/catalogue.h"
#include "model/hparams.h"
#include "quant/types.h"

namespace magnetar::genmodel {

// Weight type schemes.
//   f32           every weight F32 (hash tables I32): the reference tests' models
//   published     the published Flash q2 mix (spec §3.4): routed gate/up IQ2_XXS, down Q2_K,
//                 F16 embeddings / HC / compressor / indexer / router, Q8_0 attention /
//                 shared expert / head, F32 norms; the MTP block's experts Q4_K (as the
//                 published MTP file)
//   published-q4  the same with all routed experts Q4_K (the published q4 files)
// V4.1 (spec v41.md §2.3): the values are always drawn in the checkpoint formats (FP8 E4M3
// tiles of 32x32 with UE8M0 scales, FP4 E2M1 experts with a UE8M0 scale per 32, Engram rows
// of E4M3 + UE8M0 per 32, BF16 / F32 for the rest); the scheme only picks the storage:
//   lossless      the lossless profile: FP8 matrices BF16 (exact), experts MXFP4 (a nibble
//                 repack), Engram tables I8 row264, norms / HC / sinks / router bias F32,
//                 router / compressor / indexer / embedding / head BF16
//   f32           every tensor F32 (the exact values of lossless), Engram tables I8 row264
//   published     the compact profile: FP8 matrices Q8_0, routed gate/up IQ2_XXS and down Q2_K
//                 (MXFP4 where a row is not a multiple of 256), embedding / head BF16, Engram
//                 tables row264
//   published-q4  published with the routed experts Q4_K (MXFP4 where rows are too short)
// preset_default is lossless for V4.1 presets and f32 for V4 presets; lossless is V4.1 only.
enum class weight_scheme { f32, published, published_q4, lossless, preset_default };

weight_scheme parse_weight_scheme(const std::string& s);

struct options {
    std::string preset = "tiny";
    weight_scheme weights = weight_scheme::preset_default;
    uint64_t seed = 1;
    std::string output;
    // V4: empty means find_tokenizer_json(). V4.1 presets write no tokenizer unless this names
    // a tokenizer.json; then the vocabulary becomes DeepSeek's (v41_with_vocab()).
    std::string tokenizer_json;
    bool quiet = false;  // no progress bar
    bool mtp = false;    // add the MTP block to a V4 preset that has none (tiny-mtp is tiny + mtp)
    uint32_t sliding_window = 0;  // raw attention window in tokens; 0 keeps the preset's
};

// The general.generator value: the command line that reproduces the file (the V4.1 generator
// appends " --tokenizer-json" when it wrote a tokenizer).
std::string generator_command(const options& opts);

// Writes the model. Throws magnetar::Error on bad options or I/O errors; on failure no partial
// file is left at the output path.
void generate(const options& opts);

// Type a tensor gets under a scheme (exposed for tests: the published mix of spec §3.4).
ggml_type scheme_type(weight_scheme s, const std::string& name, bool mtp_block);

// Type a V4.1 tensor gets under a scheme (f32, lossless, published, published-q4), before the
// fallback for rows that are not whole blocks of the type.
ggml_type scheme_type_v41(weight_scheme s, const tensor_spec& spec);

// A V4.1 shape re-sized for a real vocabulary of n_vocab ids (the DeepSeek tokenizer's 129280):
// embedding, head and Markov heads follow n_vocab; the Engram token map is the stub of spec
// v41.md §6.1 over the whole vocabulary, token_map[t] = t / 2 (compressed_vocab_size
// ceil(n_vocab / 2), compressed pad id token_map[2] = 1); the hash multipliers are folded
// under the new bound of §3.9.3 (m -> 2 ((m >> 1) mod bound) + 1, odd and < 2 bound); the
// DSpark noise token becomes the released id 128799 when it exists. Validated (C1-C8, Engram
// checks); throws magnetar::Error otherwise.
hparams v41_with_vocab(const hparams& hp, uint32_t n_vocab);

// Writes a V4.1 model (called by generate() for deepseek41 presets; scheme already resolved).
void generate_v41(const options& opts, const hparams& hp);

}  // namespace magnetar::genmodel
