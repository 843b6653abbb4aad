// The flags that choose how a model runs, shared by the subcommands that load one: the compute
// backend (--backend, --device; MAGNETAR_BACKEND sets the default) and, under mpirun, the
// pipeline split (docs/distributed.md). In a single process the pipeline flags are accepted and
// have no effect.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "magnetar/engine.h"

namespace magnetar::cli {

struct engine_flags {
    std::string backend;  // empty: MAGNETAR_BACKEND, else "cpu"
    int device = 0;
    int n_gpu_layers = -1;  // -ngl: 0 the CPU, > 0 the GPU (the whole model); -1 not given
    bool no_mmap = false;   // read the file into private memory instead of mapping it
    bool mlock = false;     // lock the weights in RAM
    std::string layers = "auto";
    bool f32 = false;
    int64_t chunk = 64;
    // MTP block and speculative decoding (docs/engine.md "Speculative decoding").
    std::string mtp;  // separate MTP GGUF; empty: the main file's block, if any
    bool no_mtp = false;
    int mtp_draft = 0;  // 0 off, 1 draft and report agreement only, N >= 2 up to N tokens a step
    float mtp_margin = 0.0f;
    // Directional steering (docs/steering.md).
    std::string steer_file;
    float steer_ffn = 1.0f;
    float steer_attn = 0.0f;
};

// --backend, --device, -ngl / --n-gpu-layers, --no-mmap, --mlock.
void add_backend_flags(CLI::App& sub, engine_flags& f);
// --layers, --wire-f32, --pipeline-chunk.
void add_pipeline_flags(CLI::App& sub, engine_flags& f);
// --mtp, --no-mtp, --mtp-draft, --mtp-margin.
void add_mtp_flags(CLI::App& sub, engine_flags& f);
// Checks the MTP flags against the loaded model: --mtp-draft needs a DeepSeek V4 model with an
// MTP block or a V4.1 model with DSpark stages (>= 2 only), and speculation (>= 2) a single
// process. Throws std::runtime_error.
void check_mtp_flags(const engine_flags& f, const model_info& info);
// --dir-steering-file, --dir-steering-ffn, --dir-steering-attn.
void add_steering_flags(CLI::App& sub, engine_flags& f);
// Backend and pipeline flags.
void add_engine_flags(CLI::App& sub, engine_flags& f);
// Throws std::runtime_error for -ngl N > 0 when no GPU backend can run here (one line saying
// why) and for -ngl that contradicts --backend. Progress bars follow --log-disable.
void apply_engine_flags(const engine_flags& f, engine_options& eo);
// Prints the backend (when it is not the CPU), the stage split (when pipelined), the steering
// file with its scales (when one is loaded) and a refused --mlock to stderr as notes, and with
// --verbose the model, how its file is held and the threads.
void report_engine(const model_info& info);

}  // namespace magnetar::cli
