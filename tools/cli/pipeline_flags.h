// The flags of a pipelined run (`mpirun -np N magnetar run|chat|serve|bench|eval-logits`,
// docs/distributed.md), shared by those subcommands. In a single process they are accepted
// and have no effect.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "magnetar/engine.h"

namespace magnetar::cli {

struct pipeline_flags {
    std::string layers = "auto";
    bool f32 = false;
    int64_t chunk = 64;
};

// --layers, --wire-f32, --pipeline-chunk.
void add_pipeline_flags(CLI::App& sub, pipeline_flags& f);
void apply_pipeline_flags(const pipeline_flags& f, engine_options& eo);
// Prints the stage split to stderr when the engine is pipelined.
void report_pipeline(const model_info& info);

}  // namespace magnetar::cli
