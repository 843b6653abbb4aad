#include "cli/engine_flags.h"

#include <cstdio>
#include <cstdlib>

#include "core/format.h"

namespace magnetar::cli {

void add_backend_flags(CLI::App& sub, engine_flags& f) {
    sub.add_option("--backend", f.backend,
                   "Compute backend: cpu or cuda (default: $MAGNETAR_BACKEND, else cpu)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    sub.add_option("--device", f.device, "GPU ordinal of --backend cuda")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
}

void add_pipeline_flags(CLI::App& sub, engine_flags& f) {
    sub.add_option("--layers", f.layers,
                   "Under mpirun: layers per rank, 'auto' (balance weight bytes) or one range "
                   "or count per rank ('0:3,3:8' or '3,5')")
        ->capture_default_str();
    sub.add_flag("--wire-f32", f.f32,
                 "Under mpirun: send the HC state between stages as F32 (default BF16)");
    sub.add_option("--pipeline-chunk", f.chunk, "Under mpirun: tokens per pipelined prefill chunk")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
}

void add_engine_flags(CLI::App& sub, engine_flags& f) {
    add_backend_flags(sub, f);
    add_pipeline_flags(sub, f);
}

void apply_engine_flags(const engine_flags& f, engine_options& eo) {
    eo.backend = f.backend;
    if (eo.backend.empty()) {
        const char* env = std::getenv("MAGNETAR_BACKEND");
        eo.backend = env && *env ? env : "cpu";
    }
    eo.device = f.device;
    eo.pipeline_layers = f.layers;
    eo.pipeline_f32 = f.f32;
    eo.pipeline_chunk = f.chunk;
}

void report_engine(const model_info& info) {
    if (info.backend != "cpu") {
        std::fprintf(stderr, "magnetar: backend %s: %s, %s of weights copied in %.1f s",
                     info.backend.c_str(), info.device.c_str(),
                     human_bytes(info.device_weight_bytes).c_str(), info.weight_upload_seconds);
        if (info.weight_upload_seconds > 0) {
            std::fprintf(
                stderr, " (%.1f GB/s)",
                static_cast<double>(info.device_weight_bytes) / info.weight_upload_seconds / 1e9);
        }
        std::fprintf(stderr, "\n");
    }
    if (info.n_stages > 1)
        std::fprintf(stderr, "magnetar: pipeline of %s\n", info.pipeline.c_str());
}

}  // namespace magnetar::cli
