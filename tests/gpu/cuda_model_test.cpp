// Whole tiny models on the CUDA backend against the CPU backend, both through Engine and
// Session (float activations on the CPU, the path that matches the float64 reference): logits
// of every position within NMSE 1e-5 with the same arg-max, decode == prefill == chunked
// prefill bit for bit on the GPU, a checkpoint restoring a position exactly, and decode steps
// run as one CUDA graph each giving the same bits.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "core/rng.h"
#include "gen-model/gen_model.h"
#include "gpu/gpu_harness.h"
#include "magnetar/engine.h"
#include "support/fixture_cache.h"
#include "support/test_support.h"

namespace magnetar::gpu_test {
namespace {

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

std::unique_ptr<Engine> load(const std::string& path, const std::string& backend) {
    engine_options eo;
    eo.model_path = path;
    eo.backend = backend;
    eo.n_threads = 2;
    eo.exact_matmul = true;  // float activations: the CUDA matmuls' arithmetic
    eo.quiet = true;
    std::unique_ptr<Engine> e;
    const status st = Engine::load(eo, &e);
    EXPECT_TRUE(st.ok()) << st.message();
    return e;
}

std::unique_ptr<Session> session(const Engine& e, int64_t chunk, bool all_logits,
                                 int64_t checkpoint_interval = 0) {
    session_options so;
    so.n_ctx = kTokens;
    so.chunk_size = chunk;
    so.all_logits = all_logits;
    so.checkpoint_interval = checkpoint_interval;
    std::unique_ptr<Session> s;
    const status st = e.create_session(so, &s);
    EXPECT_TRUE(st.ok()) << st.message();
    return s;
}

std::vector<float> rows_of(const Session& s) {
    std::vector<float> out;
    for (int64_t i = 0; i < s.n_logit_rows(); ++i) {
        const auto l = s.logits_at(i);
        out.insert(out.end(), l.begin(), l.end());
    }
    return out;
}

std::vector<float> prefill(const Engine& e, const std::vector<int32_t>& ids, int64_t chunk) {
    auto s = session(e, chunk, true);
    const status st = s->eval(ids);
    EXPECT_TRUE(st.ok()) << st.message();
    return rows_of(*s);
}

std::vector<float> decode(const Engine& e, const std::vector<int32_t>& ids,
                          bool graph_steps = false) {
    auto s = session(e, 1, false);
    std::vector<float> out;
    eval_options o;
    o.graph_steps = graph_steps;
    for (size_t p = 0; p < ids.size(); ++p) {
        const status st = s->eval(std::span<const int32_t>(&ids[p], 1), o);
        EXPECT_TRUE(st.ok()) << st.message();
        const auto l = s->logits();
        out.insert(out.end(), l.begin(), l.end());
    }
    return out;
}

void logits_match_cpu(const std::string& weights) {
    const auto cpu = load(tiny(weights), "cpu");
    const auto gpu = load(tiny(weights), "cuda");
    ASSERT_TRUE(cpu && gpu);
    const auto ids = tokens(cpu->info().n_vocab);
    const auto ref = prefill(*cpu, ids, 64);
    const auto got = prefill(*gpu, ids, 64);
    ASSERT_EQ(got.size(), ref.size());
    const double e = nmse(got, ref);
    std::printf("  tiny %s: CUDA vs CPU logits nmse %.3e over %lld positions (%s)\n",
                weights.c_str(), e, static_cast<long long>(kTokens), gpu->info().device.c_str());
    EXPECT_LE(e, 1e-5) << weights;
    EXPECT_EQ(argmax_mismatches(got, ref, cpu->info().n_vocab), 0) << weights;
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
    const auto gpu = load(tiny("published"), "cuda");
    ASSERT_TRUE(gpu);
    const auto ids = tokens(gpu->info().n_vocab);
    const auto whole = prefill(*gpu, ids, kTokens);
    const auto chunked = prefill(*gpu, ids, 37);
    const auto dec = decode(*gpu, ids);
    // prefill() keeps every row; decode() the row of each step.
    EXPECT_EQ(count_diff(chunked, whole), 0u) << "chunked prefill vs prefill";
    EXPECT_EQ(count_diff(dec, whole), 0u) << "decode vs prefill";
}

TEST(CudaModel, DecodeAsOneGraphPerStepEqualsPrefill) {
    MAGNETAR_REQUIRE_CUDA();
    const auto gpu = load(tiny("published"), "cuda");
    ASSERT_TRUE(gpu);
    const auto ids = tokens(gpu->info().n_vocab);
    const auto whole = prefill(*gpu, ids, kTokens);
    const Engine::graph_stats before = gpu->graph_step_stats();
    const auto dec = decode(*gpu, ids, /*graph_steps=*/true);
    const Engine::graph_stats g = gpu->graph_step_stats();
    EXPECT_EQ(before.steps, 0u);
    EXPECT_EQ(g.steps, static_cast<uint64_t>(kTokens));
    std::printf("  %llu graph steps: %llu replayed, %llu instantiations\n",
                static_cast<unsigned long long>(g.steps),
                static_cast<unsigned long long>(g.replays),
                static_cast<unsigned long long>(g.instantiations));
    // The op sequence of a decode step changes only a few times (first token, the indexer
    // starting): almost every step replays the instantiated graph.
    EXPECT_GE(g.replays, static_cast<uint64_t>(kTokens - 16));
    EXPECT_EQ(count_diff(dec, whole), 0u) << "graph-step decode vs prefill";
}

TEST(CudaModel, CheckpointRestoresAPosition) {
    MAGNETAR_REQUIRE_CUDA();
    const auto gpu = load(tiny("published"), "cuda");
    ASSERT_TRUE(gpu);
    const auto ids = tokens(gpu->info().n_vocab);
    auto s = session(*gpu, 64, true, /*checkpoint_interval=*/50);
    const std::span<const int32_t> all(ids);
    ASSERT_TRUE(s->eval(all.subspan(0, 150)).ok());
    ASSERT_TRUE(s->eval(all.subspan(150, 50)).ok());
    const auto a = rows_of(*s);
    ASSERT_TRUE(s->rewind(150).ok());
    ASSERT_TRUE(s->eval(all.subspan(150, 50)).ok());
    const auto b = rows_of(*s);
    ASSERT_EQ(a.size(), static_cast<size_t>(50) * gpu->info().n_vocab);
    EXPECT_EQ(count_diff(b, a), 0u);
}

TEST(CudaModel, BackendWithoutDeviceReportsWhy) {
    // Runs everywhere: on a machine without a GPU the factory and the engine must fail with a
    // message, not crash; with a GPU they must succeed.
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
    engine_options eo;
    eo.model_path = tiny("published");
    eo.backend = "cuda";
    eo.quiet = true;
    std::unique_ptr<Engine> e;
    const status st = Engine::load(eo, &e);
    EXPECT_EQ(st.ok(), ok) << st.message();
    if (!ok) {
        EXPECT_NE(st.message().find("backend cuda: no CUDA device"), std::string::npos)
            << st.message();
        EXPECT_EQ(st.message().find('\n'), std::string::npos) << "one line: " << st.message();
    }
}

}  // namespace
}  // namespace magnetar::gpu_test
