// The DeepSeek V4 tensor catalogue: every tensor name, its shape and the weight types it may
// have, derived from the hyper-parameters (spec model.md §3.3, §3.5).
//
// This is the single source of truth used by weight binding (validation), the model generator
// (what to write) and `magnetar inspect` (how to classify bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/hparams.h"
#include "quant/types.h"

namespace magnetar {

// Which tensor types a catalogue entry accepts.
enum class dtype_class {
    f32,           // norms, sinks, HC base / scale, router bias: F32 only
    float_any,     // F32 / F16 / BF16 (HC mixers, compressors, indexer, router)
    matrix,        // any weight type (float or block-quantized)
    routed_expert, // IQ2_XXS / Q2_K / Q4_K as published, or any float / Q8_0 type
    i32,           // hash routing table
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
};

const char* tensor_role_name(tensor_role r);
const char* dtype_class_name(dtype_class c);
bool dtype_class_accepts(dtype_class c, ggml_type t);

struct tensor_spec {
    std::string name;        // full GGUF name, e.g. "blk.3.attn_q_a.weight"
    std::string suffix;      // name without the block prefix, e.g. "attn_q_a.weight"
    std::vector<int64_t> ne; // GGUF order [in, out(, experts)]
    dtype_class dtype;
    tensor_role role;
    int32_t layer;           // -1: global; 0..n_layer-1: main block; n_layer: MTP block
    bool required;
};

// Prefix of a layer's tensors: "blk.N." for main layers, "mtp.0." for the MTP block
// (il == n_layer).
std::string layer_prefix(const hparams& hp, uint32_t il);

// All tensors of a model with these hyper-parameters, in file order (globals, then layers,
// then the MTP block when with_mtp).
std::vector<tensor_spec> tensor_catalogue(const hparams& hp, bool with_mtp);

// Only the MTP block's tensors (as in a separate MTP GGUF).
std::vector<tensor_spec> mtp_catalogue(const hparams& hp);

}  // namespace magnetar
