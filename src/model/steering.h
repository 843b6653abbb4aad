// Directional steering files (docs/steering.md): one unit direction of width n_embd per layer,
// as flat little-endian F32 (layer 0 first, ds4's `dir-steering` layout), with a JSON sidecar
// next to it (`verbosity.f32` -> `verbosity.json`) naming the model, the shape, the layers the
// directions were built for and the component they were read from.
//
// Owns: the file format, its checks against a model and its writer. Does not own: where the
// projection runs (src/graph), the scales (sessions) or how directions are built (the CLI).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/hparams.h"

namespace magnetar {

struct steering_file {
    uint32_t n_layer = 0;
    uint32_t n_embd = 0;
    std::vector<float> directions;  // [n_layer, n_embd]; an all-zero row: the layer is not steered
    // Sidecar fields (empty / zero when the file has no sidecar).
    bool has_sidecar = false;
    std::string model;      // general.name of the model the directions were built on
    std::string arch;       // general.architecture
    std::string component;  // "ffn_out" or "attn_out": the taps the directions were read from
    std::vector<uint32_t> layers;  // layers with a direction
    int64_t n_target = 0;          // prompts of the target and control sets
    int64_t n_control = 0;
    bool orthogonalized = false;   // the control mean was projected out
    bool pair_normalized = false;  // each target/control pair difference was normalised first
    std::string note;              // free text (the command line that built it)

    const float* direction(uint32_t il) const {
        return directions.data() + static_cast<size_t>(il) * n_embd;
    }
};

// The sidecar path of a direction file: the `.f32` extension replaced by `.json` (a name
// without that extension gets `.json` appended).
std::string steering_sidecar_path(const std::string& path);

// Reads and checks a direction file for a model of shape hp named `model_name` (general.name):
// the size must be n_layer * n_embd floats, every value finite, every row of unit length (or
// all zero), and a sidecar, when present, must name this architecture, width, depth and model.
// Throws magnetar::Error with one line saying what does not match (expected vs got).
steering_file read_steering_file(const std::string& path, const hparams& hp,
                                 const std::string& model_name);

// Writes f (directions and sidecar fields) to path and its sidecar, each through a temporary
// file renamed into place. Throws magnetar::Error on a write failure.
void write_steering_file(const std::string& path, const steering_file& f);

// 64-bit FNV-1a of the direction bytes: identifies a file's contents (disk caches keyed by it).
uint64_t steering_fingerprint(const steering_file& f);

}  // namespace magnetar
