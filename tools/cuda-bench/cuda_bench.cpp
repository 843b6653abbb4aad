// magnetar_cuda_bench: prefill and decode speed of the CUDA backend on a model file (usually a
// generated `flash-layers:N --weights published` model), next to the device's own
// device-to-device copy bandwidth measured in the same run.
//
// Decode is timed per step with and without the output head, so the per-layer time and a
// projection to the full 43-layer model follow from one model:
//   layer = step_without_head / n_layer, head = step_with_head - step_without_head,
//   projected t/s = 1e6 / (43 * layer + head).
// The first half of the decode steps launches op by op, the second half runs each step as one
// CUDA graph (cuda_backend::begin_graph_step); the per-layer time and the projection use the
// graph steps.
// Achieved bandwidth counts the weight bytes one decode step must read (every non-expert
// tensor, n_expert_used / n_expert of the routed experts, one embedding row) over the step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "core/format.h"
#include "core/rng.h"
#include "cuda-bench/forward_runner.h"
#include "model/model.h"

namespace {

using namespace magnetar;
using clock_type = std::chrono::steady_clock;

struct args {
    std::string model;
    int64_t prefill = 2048;
    int64_t chunk = 2048;
    int64_t decode = 64;
    int64_t full_layers = 43;
    std::string json;
    bool probe = false;
};

void usage() {
    std::fprintf(
        stderr,
        "usage: magnetar_cuda_bench -m MODEL [--prefill N] [--chunk N] [--decode N]\n"
        "                           [--full-layers N] [--json FILE]\n"
        "       magnetar_cuda_bench --probe   (exit 0 with a usable device, 77 without)\n"
        "  --prefill N      prompt tokens before decoding (default 2048)\n"
        "  --chunk N        prefill chunk size (default 2048)\n"
        "  --decode N       timed decode steps, half op by op, half as CUDA graphs (default 64)\n"
        "  --full-layers N  layer count of the projection (default 43, V4 Flash)\n"
        "  --json FILE      also write the results as JSON\n");
}

args parse(int argc, char** argv) {
    args a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) throw Error("missing value after " + k);
            return argv[++i];
        };
        auto num = [&]() -> int64_t {
            const std::string v = val();
            char* end = nullptr;
            const long long n = std::strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || n < 0) throw Error("bad number '" + v + "' for " + k);
            return n;
        };
        if (k == "-m" || k == "--model")
            a.model = val();
        else if (k == "--prefill")
            a.prefill = num();
        else if (k == "--chunk")
            a.chunk = num();
        else if (k == "--decode")
            a.decode = num();
        else if (k == "--full-layers")
            a.full_layers = num();
        else if (k == "--json")
            a.json = val();
        else if (k == "--probe")
            a.probe = true;
        else if (k == "-h" || k == "--help") {
            usage();
            std::exit(0);
        } else {
            throw Error("unknown argument '" + k + "'");
        }
    }
    if (a.model.empty() && !a.probe) throw Error("-m MODEL is required");
    if (a.chunk == 0 || a.prefill == 0 || a.decode == 0) throw Error("sizes must be positive");
    return a;
}

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// Weight bytes one decode step reads.
uint64_t decode_bytes(const model& m) {
    const hparams& hp = m.hp();
    uint64_t b = 0;
    for (const auto& t : m.file().tensors()) {
        if (t.name.find("_exps") != std::string::npos) {
            b += t.n_bytes / hp.n_expert * hp.n_expert_used;
        } else if (t.name == "token_embd.weight") {
            b += t.n_bytes / static_cast<uint64_t>(t.ne[1]);
        } else {
            b += t.n_bytes;
        }
    }
    return b;
}

int run(const args& a) {
    std::string why;
    if (!backend::cuda_device_available(&why)) {
        std::fprintf(stderr, "no CUDA device: %s\n", why.c_str());
        return 77;
    }
    backend::cuda_options o;
    auto be = backend::make_cuda_backend(o);
    std::printf("device: %s\n", be->device_description().c_str());
    if (a.probe) return 0;
    const double copy_gbs = be->measure_copy_bandwidth(size_t{2} << 30);

    const auto m = model::load(a.model);
    const hparams& hp = m->hp();
    auto t0 = clock_type::now();
    const uint64_t mapped = cuda_tools::map_model_weights(*be, *m);
    const double upload_s = seconds_since(t0);

    const int64_t n_ctx = a.prefill + a.decode + 1;
    cuda_tools::forward_runner run(*m, *be, n_ctx, std::min(a.chunk, a.prefill));
    Rng rng(7);
    std::vector<int32_t> ids(static_cast<size_t>(n_ctx));
    for (auto& v : ids) v = static_cast<int32_t>(rng.below(hp.n_vocab));

    // Prefill (the last chunk's last row gets logits, as a session does).
    t0 = clock_type::now();
    for (int64_t p = 0; p < a.prefill; p += a.chunk) {
        const int64_t n = std::min(a.chunk, a.prefill - p);
        run.eval(ids.data() + p, n, p, false, p + n == a.prefill);
    }
    const double prefill_s = seconds_since(t0);

    // Decode: steps with and without the head alternate so both see the same positions; the
    // first half launches op by op, the second half runs each step as one CUDA graph.
    struct decode_times {
        std::vector<double> with_head, without_head;
        double step_us() const { return median(with_head); }
        double body_us() const { return median(without_head.empty() ? with_head : without_head); }
    };
    decode_times direct, graph;
    int64_t pos = a.prefill;
    for (int64_t i = 0; i < a.decode; ++i) {
        const bool use_graph = i >= a.decode / 2;
        const bool head = i % 2 == 0;
        run.set_graph_steps(use_graph);
        decode_times& d = use_graph ? graph : direct;
        t0 = clock_type::now();
        run.eval(ids.data() + pos, 1, pos, false, head);
        (head ? d.with_head : d.without_head).push_back(seconds_since(t0) * 1e6);
        ++pos;
    }
    const decode_times& best = graph.with_head.empty() ? direct : graph;
    const double step_us = best.step_us();
    const double body_us = best.body_us();
    const double layer_us = body_us / hp.n_layer;
    const double head_us = std::max(0.0, step_us - body_us);
    const double projected = 1e6 / (static_cast<double>(a.full_layers) * layer_us + head_us);
    const uint64_t step_bytes = decode_bytes(*m);
    const double hbm_gbs = static_cast<double>(step_bytes) / (step_us * 1e-6) / 1e9;

    std::printf("\n| metric | value |\n|---|---|\n");
    std::printf("| model | %s (%u layers) |\n", hp.name.c_str(), hp.n_layer);
    std::printf("| weights uploaded | %.2f GiB in %.1f s (%.1f GB/s) |\n",
                static_cast<double>(mapped) / (1024.0 * 1024.0 * 1024.0), upload_s,
                static_cast<double>(mapped) / upload_s / 1e9);
    std::printf("| device-to-device copy | %.0f GB/s |\n", copy_gbs);
    std::printf("| prefill %lld tokens (chunk %lld) | %.0f t/s |\n",
                static_cast<long long>(a.prefill), static_cast<long long>(a.chunk),
                static_cast<double>(a.prefill) / prefill_s);
    std::printf("| decode step at ctx %lld, op by op | %.0f us |\n",
                static_cast<long long>(a.prefill), direct.step_us());
    std::printf("| decode step at ctx %lld, one CUDA graph | %.0f us |\n",
                static_cast<long long>(a.prefill), graph.step_us());
    std::printf("| decode per layer | %.0f us |\n", layer_us);
    std::printf("| output head | %.0f us |\n", head_us);
    std::printf("| projected %lld-layer decode | %.1f t/s |\n",
                static_cast<long long>(a.full_layers), projected);
    std::printf("| weight bytes per decode step | %.2f GB |\n",
                static_cast<double>(step_bytes) / 1e9);
    std::printf("| achieved decode bandwidth | %.0f GB/s (%.1f %% of the copy) |\n", hbm_gbs,
                100.0 * hbm_gbs / copy_gbs);

    if (!a.json.empty()) {
        std::ofstream f(a.json);
        f << strfmt(
            "{\"device\": \"%s\", \"model\": \"%s\", \"n_layer\": %u, \"copy_gbs\": %.1f, "
            "\"upload_s\": %.2f, \"prefill_tokens\": %lld, \"prefill_tps\": %.1f, "
            "\"decode_step_direct_us\": %.1f, \"decode_step_us\": %.1f, "
            "\"decode_layer_us\": %.1f, \"head_us\": %.1f, "
            "\"projected_layers\": %lld, \"projected_tps\": %.2f, \"decode_bytes\": %llu, "
            "\"decode_gbs\": %.1f}\n",
            be->device_description().c_str(), hp.name.c_str(), hp.n_layer, copy_gbs, upload_s,
            static_cast<long long>(a.prefill), static_cast<double>(a.prefill) / prefill_s,
            direct.step_us(), step_us, layer_us, head_us, static_cast<long long>(a.full_layers),
            projected, static_cast<unsigned long long>(step_bytes), hbm_gbs);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(parse(argc, argv));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "magnetar_cuda_bench: %s\n", e.what());
        return 1;
    }
}
