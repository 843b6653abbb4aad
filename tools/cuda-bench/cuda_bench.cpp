// magnetar_cuda_bench: prefill and decode speed of the CUDA backend on a model file (usually a
// generated `flash-layers:N --weights published` model), through the engine and a session, next
// to the device's own device-to-device copy bandwidth measured in the same run.
//
// The first half of the decode steps launches op by op, the second half runs each step as one
// CUDA graph (eval_options::graph_steps). A decode step reads every non-expert tensor,
// n_expert_used / n_expert of the routed experts and one embedding row; its time is split
// between the layers and the layer-independent part (output head, HC collapse) by their shares
// of those bytes, as `magnetar bench` does, which gives the per-layer time and a projection to
// the full 43-layer model:
//   layer = step * layer_bytes / step_bytes,   projected t/s = 1e6 / (43 * layer + fixed).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "core/rng.h"
#include "gguf/gguf.h"
#include "magnetar/engine.h"

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

// Weight bytes one decode step reads: in the layers, and outside them.
struct step_bytes {
    uint64_t layers = 0;
    uint64_t fixed = 0;
    uint64_t total() const { return layers + fixed; }
};

step_bytes decode_bytes(const gguf::reader& f) {
    const gguf::value* used = f.find("deepseek4.expert_used_count");
    if (!used) used = f.find("deepseek41.expert_used_count");
    const uint64_t n_used = used ? used->u : 0;
    step_bytes b;
    for (const auto& t : f.tensors()) {
        uint64_t n = t.n_bytes;
        // Routed experts [D, F, E]: n_used of the E experts per token.
        if (t.name.find("_exps") != std::string::npos && t.ne[2] > 0) {
            n = n / static_cast<uint64_t>(t.ne[2]) * n_used;
        } else if (t.name == "token_embd.weight") {
            n = n / static_cast<uint64_t>(t.ne[1]);
        }
        (t.name.rfind("blk.", 0) == 0 ? b.layers : b.fixed) += n;
    }
    return b;
}

void check(const status& st) {
    if (!st.ok()) throw Error(st.message());
}

int run(const args& a) {
    engine_options eo;
    eo.model_path = a.model;
    eo.backend = "cuda";
    std::string device;
    const status probe = Engine::probe_backend(eo, &device);
    if (!probe.ok()) {
        std::fprintf(stderr, "%s\n", probe.message().c_str());
        return 77;
    }
    std::printf("device: %s\n", device.c_str());
    if (a.probe) return 0;
    std::unique_ptr<Engine> engine;
    check(Engine::load(eo, &engine));
    const model_info& info = engine->info();
    double copy_gbs = 0.0;
    check(engine->measure_copy_bandwidth(size_t{2} << 30, &copy_gbs));

    const auto file = gguf::reader::open(a.model);
    const step_bytes sb = decode_bytes(*file);

    const int64_t n_ctx = a.prefill + a.decode + 1;
    session_options so;
    so.n_ctx = n_ctx;
    so.chunk_size = std::min(a.chunk, a.prefill);
    so.checkpoint_interval = 0;
    std::unique_ptr<Session> session;
    check(engine->create_session(so, &session));
    Rng rng(7);
    std::vector<int32_t> ids(static_cast<size_t>(n_ctx));
    for (auto& v : ids) v = static_cast<int32_t>(rng.below(info.n_vocab));

    auto t0 = clock_type::now();
    check(session->eval(std::span<const int32_t>(ids.data(), static_cast<size_t>(a.prefill))));
    const double prefill_s = seconds_since(t0);

    // Decode: the first half launches op by op, the second half runs each step as one graph.
    std::vector<double> direct_us, graph_us;
    for (int64_t i = 0; i < a.decode; ++i) {
        eval_options o;
        o.graph_steps = i >= a.decode / 2;
        const int64_t pos = session->n_past();
        t0 = clock_type::now();
        check(session->eval(std::span<const int32_t>(ids.data() + pos, 1), o));
        (o.graph_steps ? graph_us : direct_us).push_back(seconds_since(t0) * 1e6);
    }
    const double step_us = median(graph_us.empty() ? direct_us : graph_us);
    const double layer_us =
        step_us * static_cast<double>(sb.layers) / static_cast<double>(sb.total()) / info.n_layer;
    const double fixed_us =
        step_us * static_cast<double>(sb.fixed) / static_cast<double>(sb.total());
    const double projected = 1e6 / (static_cast<double>(a.full_layers) * layer_us + fixed_us);
    const double hbm_gbs = static_cast<double>(sb.total()) / (step_us * 1e-6) / 1e9;
    const Engine::graph_stats gs = engine->graph_step_stats();

    std::printf("\n| metric | value |\n|---|---|\n");
    std::printf("| model | %s (%u layers) |\n", info.name.c_str(), info.n_layer);
    std::printf("| weights uploaded | %.2f GiB in %.1f s (%.1f GB/s) |\n",
                static_cast<double>(info.device_weight_bytes) / (1024.0 * 1024.0 * 1024.0),
                info.weight_upload_seconds,
                static_cast<double>(info.device_weight_bytes) / info.weight_upload_seconds / 1e9);
    std::printf("| device-to-device copy | %.0f GB/s |\n", copy_gbs);
    std::printf("| prefill %lld tokens (chunk %lld) | %.0f t/s |\n",
                static_cast<long long>(a.prefill), static_cast<long long>(so.chunk_size),
                static_cast<double>(a.prefill) / prefill_s);
    std::printf("| decode step at ctx %lld, op by op | %.0f us |\n",
                static_cast<long long>(a.prefill), median(direct_us));
    std::printf("| decode step at ctx %lld, one CUDA graph | %.0f us |\n",
                static_cast<long long>(a.prefill), median(graph_us));
    std::printf("| graph steps | %llu (%llu replayed, %llu instantiations) |\n",
                static_cast<unsigned long long>(gs.steps),
                static_cast<unsigned long long>(gs.replays),
                static_cast<unsigned long long>(gs.instantiations));
    std::printf("| decode per layer (byte share) | %.0f us |\n", layer_us);
    std::printf("| layer-independent part | %.0f us |\n", fixed_us);
    std::printf("| projected %lld-layer decode | %.1f t/s |\n",
                static_cast<long long>(a.full_layers), projected);
    std::printf("| weight bytes per decode step | %.2f GB |\n",
                static_cast<double>(sb.total()) / 1e9);
    std::printf("| achieved decode bandwidth | %.0f GB/s (%.1f %% of the copy) |\n", hbm_gbs,
                100.0 * hbm_gbs / copy_gbs);

    if (!a.json.empty()) {
        std::ofstream f(a.json);
        f << strfmt(
            "{\"device\": \"%s\", \"model\": \"%s\", \"n_layer\": %u, \"copy_gbs\": %.1f, "
            "\"upload_s\": %.2f, \"prefill_tokens\": %lld, \"prefill_tps\": %.1f, "
            "\"decode_step_direct_us\": %.1f, \"decode_step_us\": %.1f, "
            "\"decode_layer_us\": %.1f, \"fixed_us\": %.1f, "
            "\"projected_layers\": %lld, \"projected_tps\": %.2f, \"decode_bytes\": %llu, "
            "\"decode_gbs\": %.1f}\n",
            info.device.c_str(), info.name.c_str(), info.n_layer, copy_gbs,
            info.weight_upload_seconds, static_cast<long long>(a.prefill),
            static_cast<double>(a.prefill) / prefill_s, median(direct_us), step_us, layer_us,
            fixed_us, static_cast<long long>(a.full_layers), projected,
            static_cast<unsigned long long>(sb.total()), hbm_gbs);
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
