// How the layers are cut into pipeline stages, and the model fingerprint the handshake
// compares.
//
// Owns: the per-layer weight bytes (from the GGUF tensor directory: `blk.{il}.*` to layer il,
// the token embedding to the first stage, the output head and the MTP block to the last),
// `--layers auto` (contiguous ranges balancing those bytes), explicit ranges, and the SHA-256
// of the file's metadata and tensor directory. Does not own: loading (src/model).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"

namespace magnetar::dist {

using layer_range = std::pair<uint32_t, uint32_t>;  // [first, end)

// Tensor bytes by where they live: layers[il], plus first-stage-only and last-stage-only.
struct weight_map {
    std::vector<uint64_t> layers;
    uint64_t first = 0;  // token embedding
    uint64_t last = 0;   // output head (+ MTP block)
};
weight_map layer_weight_bytes(const model& m);

// Bytes a stage holding `r` reads from the file.
uint64_t stage_bytes(const weight_map& w, layer_range r, uint32_t n_layer);

// The split of n_layer layers over n_stages. spec: "auto" (balance weight bytes), or one item
// per stage separated by commas, each a range "a:b" (contiguous, covering every layer) or a
// layer count ("3,3,2"). Throws magnetar::Error with the reason on a bad spec.
std::vector<layer_range> split_layers(const std::string& spec, int n_stages, const weight_map& w);

// "0:3,3:8"
std::string format_split(const std::vector<layer_range>& split);

// SHA-256 (hex) of the model file's bytes before the tensor data (magic, metadata, tensor
// directory), followed by the MTP file's when one is given. Throws on a read error.
std::string model_fingerprint(const std::string& path, uint64_t data_offset,
                              const std::string& mtp_path, uint64_t mtp_data_offset);

}  // namespace magnetar::dist
