// The synthetic model generator behind `magnetar gen-model`: DeepSeek-V4-layout GGUFs with
// random weights from a seed, deterministic across runs and machines.
#pragma once

#include <cstdint>
#include <string>

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
enum class weight_scheme { f32, published, published_q4 };

weight_scheme parse_weight_scheme(const std::string& s);

struct options {
    std::string preset = "tiny";
    weight_scheme weights = weight_scheme::f32;
    uint64_t seed = 1;
    std::string output;
    std::string tokenizer_json;  // empty: find_tokenizer_json()
    bool quiet = false;          // no progress bar
};

// Writes the model. Throws magnetar::Error on bad options or I/O errors; on failure no partial
// file is left at the output path.
void generate(const options& opts);

// Type a tensor gets under a scheme (exposed for tests: the published mix of spec §3.4).
ggml_type scheme_type(weight_scheme s, const std::string& name, bool mtp_block);

}  // namespace magnetar::genmodel
