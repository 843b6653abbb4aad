// `magnetar bench` (no sub-command): the model walk of protocol §7.3 (ds4-bench) with roofline
// accounting and a full-model projection. docs/performance.md describes the method, the CSV
// columns and the formulas.
//
// Owns: the flags, the frontier schedule, the timed sync / generation per frontier, the CSV,
// the SVG file and the projection. Everything runs through include/magnetar (Engine, Session);
// the byte counts come from model/roofline.h over the model file's tensor directory.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace magnetar::cli {

struct model_bench_args {
    std::string model;
    int threads = 0;
    std::string prompt_file;
    std::string chat_prompt_file;
    std::string system = "You are a helpful assistant.";
    int64_t ctx_start = 2048;
    int64_t ctx_max = 32768;
    int64_t step_incr = 2048;
    double step_mul = 1.0;
    int64_t ctx_alloc = 0;  // 0: ctx_max + gen_tokens + 1
    int64_t gen_tokens = 128;
    int64_t chunk = 2048;
    std::string csv;
    std::string svg;
    uint32_t project_layers = 0;
    std::string project_base;
    uint32_t project_base_layers = 0;
    uint64_t read_mb = 0;  // 0: probe_bytes_for_model (the weight bytes, 64 MiB .. 2 GiB)
    // Speculative decoding (>= 2: also time the probe with Session::eval_speculative, up to N
    // tokens a step, against a plain probe without the expert taps).
    std::string mtp;
    int mtp_draft = 0;
    float mtp_margin = 0.0f;
    // >= 2: also time this many sessions decoding together, one batched step per token
    // (Engine::decode_batch), against one session alone, both without taps.
    int sessions = 0;
};

// Adds the walk's flags to `app` (the `bench` app itself).
void add_model_bench_flags(CLI::App& app, model_bench_args& a);
int run_model_bench(const model_bench_args& a);

// The frontiers ctx_start, ... <= ctx_max: + step_incr, or next = ceil(cur * step_mul) when
// step_mul > 1. Throws std::runtime_error on bad values.
std::vector<int64_t> bench_frontiers(int64_t ctx_start, int64_t ctx_max, int64_t step_incr,
                                     double step_mul);

// Projection of one measurement to `layers` layers (docs/performance.md, "Projection").
struct projection_input {
    uint32_t n_layer = 0;    // layers of the measured model
    bool mtp = false;        // the measured model runs an MTP block per token
    double prefill_tps = 0;  // measured
    double gen_tps = 0;      // measured
    double fixed_share = 0;  // layer-count-independent share of the decode bytes per token
    // Optional second measurement at the same frontier on a model with base_layers layers.
    uint32_t base_layers = 0;
    double base_prefill_tps = 0;
    double base_gen_tps = 0;
};
struct projection_output {
    double prefill_tps = 0;
    double gen_tps = 0;
    bool from_difference = false;  // the two-model formula was used
};
projection_output project(const projection_input& in, uint32_t layers);

}  // namespace magnetar::cli
