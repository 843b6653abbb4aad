#include "cli/pipeline_flags.h"

#include <cstdio>

namespace magnetar::cli {

void add_pipeline_flags(CLI::App& sub, pipeline_flags& f) {
    sub.add_option("--layers", f.layers,
                   "Under mpirun: layers per rank, 'auto' (balance weight bytes) or one range "
                   "or count per rank ('0:3,3:8' or '3,5')")
        ->capture_default_str();
    sub.add_flag("--wire-f32", f.f32,
                 "Under mpirun: send the HC state between stages as F32 (default BF16)");
    sub.add_option("--pipeline-chunk", f.chunk,
                   "Under mpirun: tokens per pipelined prefill chunk")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
}

void apply_pipeline_flags(const pipeline_flags& f, engine_options& eo) {
    eo.pipeline_layers = f.layers;
    eo.pipeline_f32 = f.f32;
    eo.pipeline_chunk = f.chunk;
}

void report_pipeline(const model_info& info) {
    if (info.n_stages > 1) std::fprintf(stderr, "magnetar: pipeline of %s\n", info.pipeline.c_str());
}

}  // namespace magnetar::cli
