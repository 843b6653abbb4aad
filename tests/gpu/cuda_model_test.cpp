// Whole tiny models on the CUDA backend against the CPU backend (float activations, the path
// that matches the float64 reference): logits of every position within NMSE 1e-5 with the same
// arg-max, decode == prefill == chunked prefill bit for bit on the GPU, and the session
// snapshot of the small KV state (host copy) restoring a position exactly; decode steps run as
// one CUDA graph each give the same bits.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "core/rng.h"
#include "cuda-bench/forward_runner.h"
#include "gen-model/gen_model.h"
#include "gpu/gpu_harness.h"
#include "model/model.h"
#include "support/fixture_cache.h"
#include "support/test_support.h"

namespace magnetar::gpu_test {
namespace {

using cuda_tools::forward_runner;

constexpr int64_t kTokens = 200;  // crosses a ratio-128 block, the window and the indexer budget

const std::string& tiny(const std::string& weights) {
    static std::map<std::string, std::string> paths;
    auto it = paths.find(weights);
    if (it != paths.end()) return it->second;
    const std::string name = "gpu-model-tiny-" + weights;
    const std::string key = std::to_string(test::hash_inputs({"/proc/self/exe"}, name));
    const std::string dir = test::cached_dir(name, key, [&](const std::string& out) {
        genmodel::options o;
        o.preset = "tiny";
        o.weights = genmodel::parse_weight_scheme(weights);
        o.seed = 1;
        o.output = out + "/model.gguf";
        o.quiet = true;
        genmodel::generate(o);
    });
    return paths.emplace(weights, dir + "/model.gguf").first->second;
}

std::vector<int32_t> tokens(uint32_t n_vocab) {
    Rng rng(12);
    std::vector<int32_t> ids{0};
    while (static_cast<int64_t>(ids.size()) < kTokens)
        ids.push_back(static_cast<int32_t>(rng.below(n_vocab)));
    return ids;
}

int64_t argmax_mismatches(const std::vector<float>& a, const std::vector<float>& b, int64_t width) {
    int64_t bad = 0;
    for (size_t r = 0; r + static_cast<size_t>(width) <= a.size();
         r += static_cast<size_t>(width)) {
        size_t ia = r, ib = r;
        for (size_t i = r; i < r + static_cast<size_t>(width); ++i) {
            if (a[i] > a[ia]) ia = i;
            if (b[i] > b[ib]) ib = i;
        }
        bad += ia != ib;
    }
    return bad;
}

std::vector<float> prefill(const model& m, backend::backend& be, const std::vector<int32_t>& ids,
                           int64_t chunk) {
    forward_runner run(m, be, kTokens, chunk);
    std::vector<float> out;
    for (int64_t p = 0; p < static_cast<int64_t>(ids.size()); p += chunk) {
        const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(ids.size()) - p);
        const auto l = run.eval(ids.data() + p, n, p, true);
        out.insert(out.end(), l.begin(), l.end());
    }
    return out;
}

std::vector<float> decode(const model& m, backend::backend& be, const std::vector<int32_t>& ids,
                          bool graph_steps = false) {
    forward_runner run(m, be, kTokens, 1);
    run.set_graph_steps(graph_steps);
    std::vector<float> out;
    for (int64_t p = 0; p < static_cast<int64_t>(ids.size()); ++p) {
        const auto l = run.eval(ids.data() + p, 1, p, false);
        out.insert(out.end(), l.begin(), l.end());
    }
    return out;
}

void logits_match_cpu(const std::string& weights) {
    const auto m = model::load(tiny(weights));
    const auto ids = tokens(m->hp().n_vocab);
    backend::cpu_backend cpu(2, false, /*exact=*/true);
    const auto ref = prefill(*m, cpu, ids, 64);
    backend::cuda_options o;
    o.quiet = true;
    auto gpu = backend::make_cuda_backend(o);
    cuda_tools::map_model_weights(*gpu, *m);
    const auto got = prefill(*m, *gpu, ids, 64);
    ASSERT_EQ(got.size(), ref.size());
    const double e = nmse(got, ref);
    std::printf("  tiny %s: CUDA vs CPU logits nmse %.3e over %lld positions\n", weights.c_str(), e,
                static_cast<long long>(kTokens));
    EXPECT_LE(e, 1e-5) << weights;
    EXPECT_EQ(argmax_mismatches(got, ref, m->hp().n_vocab), 0) << weights;
}

TEST(CudaModel, TinyF32LogitsMatchCpu) {
    MAGNETAR_REQUIRE_CUDA();
    logits_match_cpu("f32");
}

TEST(CudaModel, TinyPublishedQuantsLogitsMatchCpu) {
    MAGNETAR_REQUIRE_CUDA();
    logits_match_cpu("published");
}

TEST(CudaModel, DecodeEqualsPrefillBitForBit) {
    MAGNETAR_REQUIRE_CUDA();
    const auto m = model::load(tiny("published"));
    const auto ids = tokens(m->hp().n_vocab);
    backend::cuda_options o;
    o.quiet = true;
    auto gpu = backend::make_cuda_backend(o);
    cuda_tools::map_model_weights(*gpu, *m);
    const auto whole = prefill(*m, *gpu, ids, kTokens);
    const auto chunked = prefill(*m, *gpu, ids, 37);
    const auto dec = decode(*m, *gpu, ids);
    EXPECT_EQ(count_diff(chunked, whole), 0u) << "chunked prefill vs prefill";
    EXPECT_EQ(count_diff(dec, whole), 0u) << "decode vs prefill";
}

TEST(CudaModel, DecodeAsOneGraphPerStepEqualsPrefill) {
    MAGNETAR_REQUIRE_CUDA();
    const auto m = model::load(tiny("published"));
    const auto ids = tokens(m->hp().n_vocab);
    backend::cuda_options o;
    o.quiet = true;
    auto gpu = backend::make_cuda_backend(o);
    cuda_tools::map_model_weights(*gpu, *m);
    const auto whole = prefill(*m, *gpu, ids, kTokens);
    const auto dec = decode(*m, *gpu, ids, /*graph_steps=*/true);
    EXPECT_EQ(gpu->graph_steps(), static_cast<uint64_t>(kTokens));
    std::printf("  %llu graph steps: %llu replayed, %llu instantiations\n",
                static_cast<unsigned long long>(gpu->graph_steps()),
                static_cast<unsigned long long>(gpu->graph_replays()),
                static_cast<unsigned long long>(gpu->graph_instantiations()));
    // The op sequence of a decode step changes only a few times (first token, the indexer
    // starting): almost every step replays the instantiated graph.
    EXPECT_GE(gpu->graph_replays(), static_cast<uint64_t>(kTokens - 16));
    EXPECT_EQ(count_diff(dec, whole), 0u) << "graph-step decode vs prefill";
}

TEST(CudaModel, SnapshotOfTheSmallStateRestoresAPosition) {
    MAGNETAR_REQUIRE_CUDA();
    const auto m = model::load(tiny("published"));
    const auto ids = tokens(m->hp().n_vocab);
    backend::cuda_options o;
    o.quiet = true;
    auto gpu = backend::make_cuda_backend(o);
    cuda_tools::map_model_weights(*gpu, *m);
    forward_runner run(*m, *gpu, kTokens, 64);
    run.eval(ids.data(), 150, 0, false, false);
    std::vector<float> snap;
    run.cache().save_small(snap);
    const auto a = run.eval(ids.data() + 150, 50, 150, true);
    run.cache().load_small(snap);
    const auto b = run.eval(ids.data() + 150, 50, 150, true);
    EXPECT_EQ(count_diff(b, a), 0u);
}

TEST(CudaModel, BackendWithoutDeviceReportsWhy) {
    // Runs everywhere: on a machine without a GPU the factory must fail with a message, not
    // crash; with a GPU it must succeed.
    std::string why;
    const bool ok = backend::cuda_device_available(&why);
    backend::cuda_options o;
    o.quiet = true;
    if (ok) {
        EXPECT_NO_THROW(backend::make_cuda_backend(o));
    } else {
        EXPECT_FALSE(why.empty());
        try {
            backend::make_cuda_backend(o);
            ADD_FAILURE() << "make_cuda_backend succeeded without a device";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace magnetar::gpu_test
