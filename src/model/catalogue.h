// The DeepSeek V4 and V4.1 tensor catalogues: every tensor name, its shape and the weight
// types it may have, derived from the hyper-parameters (spec model.md §3.3, §3.5; for V4.1
// spec v41.md §2.3, built in catalogue_v41.cpp).
//
// This is the single source of truth used by weight binding (validation), the model generator
// (what to write) and `magnetar inspect` (how to classify bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/types.h"
#include "model/hparams.h"

namespace magnetar {

// Which tensor types a catalogue entry accepts.
enum class dtype_class {
    f32,            // norms, sinks, HC base / scale, router bias: F32 only
    float_any,      // F32 / F16 / BF16 (HC mixers, compressors, indexer, router)
    matrix,         // any weight type (float or block-quantized)
    routed_expert,  // IQ2_XXS / Q2_K / Q4_K as published, or any float / Q8_0 type
    i32,            // hash routing table
    // V4.1 (spec v41.md §2.3)
    norm_f32_bf16,      // norms and Engram q/k weights: F32 or BF16
    dense,              // FP8 checkpoint matrices: BF16 (lossless), F32, F16, Q8_0
    routed_expert_v41,  // MXFP4 (lossless), IQ2_XXS / Q2_K / Q4_K, Q8_0, F32 / F16 / BF16
    engram_table,       // I8 row264 [ED + ED/32, rows], or Q8_0 [ED, rows] (lossy)
};

// What a tensor is for (file-size breakdown in inspect).
enum class tensor_role {
    embedding,
    output_head,
    hc,
    norm,
    attention,
    compressor,
    indexer,
    router,
    shared_expert,
    routed_expert,
    hash_table,
    mtp,  // MTP-only projections and norms (the MTP block's transformer layer uses the roles above)
    engram,  // V4.1 Engram tables, projection and gate weights
    dspark,  // V4.1 DSpark-only projections, norms and heads (stage blocks use the roles above)
};

const char* tensor_role_name(tensor_role r);
const char* dtype_class_name(dtype_class c);
bool dtype_class_accepts(dtype_class c, ggml_type t);

struct tensor_spec {
    std::string name;         // full GGUF name, e.g. "blk.3.attn_q_a.weight"
    std::string suffix;       // name without the block prefix, e.g. "attn_q_a.weight"
    std::vector<int64_t> ne;  // GGUF order [in, out(, experts)]
    dtype_class dtype;
    tensor_role role;
    int32_t layer;  // -1: global; 0..n_layer-1: main block; n_layer: MTP block
                    // (V4.1: n_layer + i is DSpark stage i)
    bool required;
    std::vector<std::string> aliases = {};  // other full names accepted on load (V4.1)
};

// The GGUF shape a tensor must have when stored with type t: spec.ne, except for Engram
// tables stored as Q8_0, which hold ED values per row instead of the ED + ED/32 row264 bytes.
std::vector<int64_t> expected_shape(const tensor_spec& spec, ggml_type t);

// Prefix of a layer's tensors: "blk.N." for main layers, "mtp.0." for the MTP block
// (il == n_layer); V4.1 DSpark stages are "blk.N." too (il >= n_layer).
std::string layer_prefix(const hparams& hp, uint32_t il);

// All tensors of a model with these hyper-parameters, in file order (globals, then layers,
// then the MTP block when with_mtp).
std::vector<tensor_spec> tensor_catalogue(const hparams& hp, bool with_mtp);

// Only the MTP block's tensors (as in a separate MTP GGUF). For V4.1: the DSpark stages.
std::vector<tensor_spec> mtp_catalogue(const hparams& hp);

// The V4.1 catalogue (tensor_catalogue and mtp_catalogue dispatch here for deepseek41):
// globals and backbone layers unless dspark_only, then the DSpark stages when with_dspark.
std::vector<tensor_spec> tensor_catalogue_v41(const hparams& hp, bool with_dspark,
                                              bool dspark_only = false);

}  // namespace magnetar
