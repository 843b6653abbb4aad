// Directional steering (docs/steering.md): the project_out op's algebra, the engine's checks of
// a direction file, and steered forward passes: scale 0 is bit-identical to no steering, scale 1
// leaves no component along the direction in the tapped sub-layer outputs, decode equals
// prefill with steering on (DeepSeek V4 and V4.1), changing the scales forgets the timeline, and
// speculative decoding keeps the steered greedy output.
#include "model/steering.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "magnetar/engine.h"
#include "magnetar/session.h"
#include "model/forward_fixtures.h"
#include "support/default_engine.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

// ---------------------------------------------------------------------------------------------
// The op
// ---------------------------------------------------------------------------------------------

std::vector<float> random_unit(Rng& rng, size_t n) {
    std::vector<float> v(n);
    double s = 0;
    for (float& x : v) {
        x = rng.uniform01() * 2.0f - 1.0f;
        s += static_cast<double>(x) * x;
    }
    for (float& x : v) x = static_cast<float>(x / std::sqrt(s));
    return v;
}

double dot(const float* a, const float* b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
}

TEST(ProjectOut, RemovesScalesOrAmplifiesTheComponentAlongV) {
    backend::cpu_backend be(2);
    Rng rng(5);
    constexpr int64_t W = 37, N = 5;
    std::vector<float> x0(W * N);
    for (float& x : x0) x = rng.uniform01() * 8.0f - 4.0f;
    std::vector<float> v = random_unit(rng, W);
    const tensor tv = make_tensor(reinterpret_cast<uint8_t*>(v.data()), ggml_type::F32, W);
    for (const float s : {0.0f, 1.0f, 0.5f, 2.0f, -1.5f}) {
        std::vector<float> x = x0;
        be.project_out(make_tensor(reinterpret_cast<uint8_t*>(x.data()), ggml_type::F32, W, N), tv,
                       s);
        for (int64_t r = 0; r < N; ++r) {
            const float* a = x0.data() + r * W;
            const float* b = x.data() + r * W;
            const double before = dot(v.data(), a, W);
            const double after = dot(v.data(), b, W);
            // The component along v is scaled by 1 - s; the rest is unchanged.
            EXPECT_NEAR(after, (1.0 - s) * before, 1e-5 * (1 + std::fabs(before))) << s;
            for (int64_t i = 0; i < W; ++i) {
                const double want = a[i] - s * before * v[static_cast<size_t>(i)];
                EXPECT_NEAR(b[i], want, 1e-5) << "s " << s << " row " << r << " col " << i;
                if (s == 0.0f) {
                    EXPECT_EQ(b[i], a[i]);  // bit-identical
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Direction files
// ---------------------------------------------------------------------------------------------

std::unique_ptr<Engine> load(const std::string& model, const std::string& steer = "",
                             float ffn = 1.0f, float attn = 0.0f, status* st_out = nullptr) {
    engine_options eo;
    eo.model_path = model;
    eo.n_threads = 2;
    eo.steering_file = steer;
    eo.steering_ffn = ffn;
    eo.steering_attn = attn;
    std::unique_ptr<Engine> e;
    const status st = Engine::load(eo, &e);
    if (st_out) {
        *st_out = st;
    } else {
        EXPECT_TRUE(st.ok()) << st.message();
    }
    return e;
}

// Random unit directions for every layer of `info`'s model except `skip` (all zero there).
steering_file random_file(const model_info& info, uint64_t seed, int skip = -1) {
    steering_file f;
    f.n_layer = info.n_layer;
    f.n_embd = info.n_embd;
    f.model = info.name;
    f.arch = info.arch;
    f.component = "ffn_out";
    Rng rng(seed);
    for (uint32_t il = 0; il < info.n_layer; ++il) {
        std::vector<float> v = random_unit(rng, info.n_embd);
        if (static_cast<int>(il) == skip) {
            v.assign(info.n_embd, 0.0f);
        } else {
            f.layers.push_back(il);
        }
        f.directions.insert(f.directions.end(), v.begin(), v.end());
    }
    return f;
}

std::string write_file(const std::string& name, const steering_file& f) {
    const std::string path = test::temp_dir() + "/steer-" + name + ".f32";
    write_steering_file(path, f);
    return path;
}

const std::string& tiny() {
    return test::tiny_model("tiny", "f32");
}

std::unique_ptr<Session> session(const Engine& e, int64_t n_ctx = 256, bool all = true,
                                 int64_t chunk = 2048) {
    session_options so;
    so.n_ctx = n_ctx;
    so.all_logits = all;
    so.chunk_size = chunk;
    std::unique_ptr<Session> s;
    const status st = e.create_session(so, &s);
    EXPECT_TRUE(st.ok()) << st.message();
    return s;
}

TEST(SteeringFile, ABadFileIsRefusedWithWhatDoesNotMatch) {
    const auto plain = load(tiny());
    ASSERT_TRUE(plain);
    const model_info& info = plain->info();
    const steering_file good = random_file(info, 1);

    auto refused = [&](const std::string& path, const std::string& words) {
        status st;
        const auto e = load(tiny(), path, 1.0f, 0.0f, &st);
        EXPECT_FALSE(st.ok()) << path;
        EXPECT_EQ(st.code(), status_code::invalid_argument) << st.message();
        EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
    };
    refused(test::temp_dir() + "/steer-missing.f32", "steer-missing.f32");

    steering_file wide = good;  // another model's width
    wide.n_embd = info.n_embd * 2;
    wide.directions.resize(static_cast<size_t>(wide.n_layer) * wide.n_embd, 0.0f);
    refused(write_file("wide", wide),
            std::to_string(info.n_layer) + " layers of width " + std::to_string(info.n_embd * 2));

    steering_file other = good;  // another model of the same shape
    other.model = "some-other-model";
    refused(write_file("other", other), "\"some-other-model\"");

    steering_file arch = good;
    arch.arch = "deepseek41";
    refused(write_file("arch", arch), "architecture deepseek41");

    steering_file scaled = good;  // not unit length
    for (size_t i = 0; i < info.n_embd; ++i) scaled.directions[i] *= 2.0f;
    refused(write_file("scaled", scaled), "layer 0's direction has length 2");

    steering_file nan = good;
    nan.directions[static_cast<size_t>(info.n_embd) + 3] = std::nanf("");
    refused(write_file("nan", nan), "layer 1 has a non-finite value at 3");

    // Truncated data: the size is checked even without a sidecar.
    const std::string cut = write_file("cut", good);
    std::remove(steering_sidecar_path(cut).c_str());
    {
        std::ofstream f(cut, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(good.directions.data()), 100);
    }
    refused(cut, "got 100 bytes");

    const std::string bad_json = write_file("badjson", good);
    {
        std::ofstream f(steering_sidecar_path(bad_json), std::ios::trunc);
        f << "{not json";
    }
    refused(bad_json, "not JSON");

    // Scales out of range.
    const std::string ok = write_file("ok", good);
    status st;
    (void)load(tiny(), ok, 101.0f, 0.0f, &st);
    EXPECT_EQ(st.code(), status_code::invalid_argument);
    EXPECT_NE(st.message().find("[-100, 100]"), std::string::npos) << st.message();
    (void)load(tiny(), ok, 1.0f, std::nanf(""), &st);
    EXPECT_EQ(st.code(), status_code::invalid_argument);

    // A file without a sidecar of the right size loads (ds4's files), and says so.
    const std::string bare = write_file("bare", good);
    std::remove(steering_sidecar_path(bare).c_str());
    const auto e = load(tiny(), bare);
    ASSERT_TRUE(e);
    EXPECT_NE(e->info().steering.find("no sidecar"), std::string::npos) << e->info().steering;
}

// ---------------------------------------------------------------------------------------------
// Steered forward passes
// ---------------------------------------------------------------------------------------------

std::vector<float> prefill_logits(const Engine& e, const std::vector<int32_t>& toks,
                                  steering_scales* sc = nullptr) {
    auto s = session(e);
    if (sc) {
        EXPECT_TRUE(s->set_steering(*sc).ok());
    }
    EXPECT_TRUE(s->eval(toks).ok());
    std::vector<float> out;
    for (int64_t i = 0; i < s->n_logit_rows(); ++i) {
        const auto row = s->logits_at(i);
        out.insert(out.end(), row.begin(), row.end());
    }
    return out;
}

TEST(Steering, ScaleZeroIsBitIdenticalToNoSteering) {
    const auto plain = load(tiny());
    ASSERT_TRUE(plain);
    const std::string path = write_file("zero", random_file(plain->info(), 2));
    const auto steered = load(tiny(), path, 0.0f, 0.0f);
    ASSERT_TRUE(steered);
    EXPECT_EQ(steered->info().steering_ffn, 0.0f);
    const std::vector<int32_t> toks = test::test_tokens(3, 90);
    const std::vector<float> a = prefill_logits(*plain, toks);
    const std::vector<float> b = prefill_logits(*steered, toks);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    // And the default scales (ffn 1) do change the logits.
    const auto one = load(tiny(), path);
    const std::vector<float> c = prefill_logits(*one, toks);
    EXPECT_NE(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)));
}

// With scale 1 the tapped sub-layer output has no component along its layer's direction.
void expect_projected_out(const std::string& model, const char* what, steering_scales sc) {
    const auto plain = load(model);
    ASSERT_TRUE(plain);
    const steering_file f = random_file(plain->info(), 4, 1);  // layer 1 unsteered
    const std::string path = write_file(std::string("proj-") + what, f);
    const auto e = load(model, path, sc.ffn, sc.attn);
    ASSERT_TRUE(e);
    auto s = session(*e);
    const uint32_t D = e->info().n_embd;
    int checked = 0, unsteered_rows = 0;
    s->set_dump({std::string("blk.*.") + what},
                [&](const std::string& name, int64_t, int64_t n, int64_t width, const float* data) {
                    unsigned il = 0;
                    ASSERT_EQ(std::sscanf(name.c_str(), "blk.%u.", &il), 1) << name;
                    if (il >= e->info().n_layer) return;
                    ASSERT_EQ(width, D);
                    // Layer 1 has no direction: probe it with layer 0's, which stays.
                    const float* v = f.direction(il == 1 ? 0 : il);
                    for (int64_t r = 0; r < n; ++r) {
                        const float* y = data + r * width;
                        const double along = dot(v, y, D);
                        const double size = std::sqrt(dot(y, y, D));
                        if (il == 1) {
                            // No direction: nothing is removed.
                            if (std::fabs(along) > 1e-3 * size) ++unsteered_rows;
                            continue;
                        }
                        EXPECT_LE(std::fabs(along), 1e-5 * size + 1e-6) << name << " row " << r;
                        ++checked;
                    }
                });
    const std::vector<int32_t> toks = test::test_tokens(5, 40, e->info().n_vocab);
    ASSERT_TRUE(s->eval(toks).ok());
    EXPECT_GE(checked, 40 * (static_cast<int>(e->info().n_layer) - 1));
    EXPECT_GT(unsteered_rows, 0);
}

TEST(Steering, ScaleOneLeavesNoComponentAlongTheDirectionV4) {
    expect_projected_out(tiny(), "ffn_out", {1.0f, 0.0f});
    expect_projected_out(tiny(), "attn_out", {0.0f, 1.0f});
}

TEST(Steering, ScaleOneLeavesNoComponentAlongTheDirectionV41) {
    const std::string& v41 = test::tiny_model("v41-tiny", "lossless");
    expect_projected_out(v41, "ffn_out", {1.0f, 0.0f});
    expect_projected_out(v41, "attn_out", {0.0f, 1.0f});
}

// One eval of the whole sequence, chunks of 16, and one token at a time: the same logits.
void expect_decode_equals_prefill(const std::string& model) {
    const auto plain = load(model);
    ASSERT_TRUE(plain);
    const std::string path = write_file("dep", random_file(plain->info(), 6));
    const auto e = load(model, path, -1.5f, 0.5f);
    ASSERT_TRUE(e);
    const std::vector<int32_t> toks = test::test_tokens(7, 70, e->info().n_vocab);
    const std::vector<float> whole = prefill_logits(*e, toks);
    const uint32_t V = e->info().n_vocab;

    auto chunked = session(*e, 256, true, 16);
    ASSERT_TRUE(chunked->eval(toks).ok());
    auto decode = session(*e, 256, false);
    for (size_t i = 0; i < toks.size(); ++i) {
        ASSERT_TRUE(decode->eval(std::span<const int32_t>(&toks[i], 1)).ok());
        const auto row = decode->logits();
        ASSERT_EQ(0, std::memcmp(row.data(), whole.data() + i * V, V * sizeof(float)))
            << "position " << i;
        const auto crow = chunked->logits_at(static_cast<int64_t>(i));
        ASSERT_EQ(0, std::memcmp(crow.data(), whole.data() + i * V, V * sizeof(float)))
            << "chunked, position " << i;
    }
    // The steered logits differ from the unsteered ones.
    const std::vector<float> base = prefill_logits(*plain, toks);
    EXPECT_NE(0, std::memcmp(base.data(), whole.data(), base.size() * sizeof(float)));
}

TEST(Steering, DecodeEqualsPrefillV4) {
    expect_decode_equals_prefill(tiny());
}

TEST(Steering, DecodeEqualsPrefillV41) {
    expect_decode_equals_prefill(test::tiny_model("v41-tiny", "lossless"));
}

TEST(Steering, ChangingTheScalesForgetsTheTimeline) {
    const auto plain = load(tiny());
    ASSERT_TRUE(plain);
    const std::string path = write_file("change", random_file(plain->info(), 8));
    const auto e = load(tiny(), path, 0.5f, 0.0f);
    ASSERT_TRUE(e);
    auto s = session(*e);
    EXPECT_EQ(s->steering(), (steering_scales{0.5f, 0.0f}));
    const std::vector<int32_t> toks = test::test_tokens(9, 30);
    ASSERT_TRUE(s->eval(toks).ok());
    ASSERT_TRUE(s->set_steering({0.5f, 0.0f}).ok());  // the same scales: kept
    EXPECT_EQ(s->n_past(), 30);
    ASSERT_TRUE(s->set_steering({2.0f, -1.0f}).ok());
    EXPECT_EQ(s->n_past(), 0);
    EXPECT_EQ(s->steering(), (steering_scales{2.0f, -1.0f}));
    // Evaluated again under the new scales: the logits of a fresh session created with them.
    ASSERT_TRUE(s->eval(toks).ok());
    steering_scales sc{2.0f, -1.0f};
    const std::vector<float> fresh = prefill_logits(*e, toks, &sc);
    const uint32_t V = e->info().n_vocab;
    EXPECT_EQ(0, std::memcmp(s->logits_at(29).data(), fresh.data() + 29 * V, V * sizeof(float)));

    const status out = s->set_steering({150.0f, 0.0f});
    EXPECT_EQ(out.code(), status_code::invalid_argument);
    EXPECT_EQ(s->steering(), (steering_scales{2.0f, -1.0f}));
    auto unsteered = session(*plain);
    EXPECT_EQ(unsteered->steering(), (steering_scales{}));
    const status none = unsteered->set_steering({1.0f, 0.0f});
    EXPECT_EQ(none.code(), status_code::invalid_argument);
    EXPECT_NE(none.message().find("without a steering file"), std::string::npos);
    EXPECT_TRUE(unsteered->set_steering({0.0f, 0.0f}).ok());
}

// A batched decode step (Engine::decode_batch) steers every session by its own scales: each
// session's logits are those of decoding it alone.
TEST(Steering, BatchedDecodeKeepsEachSessionsScales) {
    const auto plain = load(tiny());
    ASSERT_TRUE(plain);
    const std::string path = write_file("batch", random_file(plain->info(), 10));
    const auto e = load(tiny(), path, 1.0f, 0.0f);
    ASSERT_TRUE(e);
    const std::vector<steering_scales> scales = {{1.0f, 0.0f}, {0.0f, 0.0f}, {-2.0f, 0.75f}};
    const std::vector<int32_t> toks = test::test_tokens(11, 40, e->info().n_vocab);
    std::vector<std::unique_ptr<Session>> alone, batched;
    std::vector<Session*> ptrs;
    for (const steering_scales& sc : scales) {
        for (auto* list : {&alone, &batched}) {
            list->push_back(session(*e, 256, false));
            ASSERT_TRUE(list->back()->set_steering(sc).ok());
            ASSERT_TRUE(list->back()->eval(std::span<const int32_t>(toks.data(), 20)).ok());
        }
        ptrs.push_back(batched.back().get());
    }
    const uint32_t V = e->info().n_vocab;
    for (size_t k = 20; k < 30; ++k) {
        std::vector<int32_t> step(scales.size(), toks[k]);
        ASSERT_TRUE(e->decode_batch(ptrs, step).ok());
        for (size_t i = 0; i < scales.size(); ++i) {
            ASSERT_TRUE(alone[i]->eval(std::span<const int32_t>(&toks[k], 1)).ok());
            ASSERT_EQ(0, std::memcmp(batched[i]->logits().data(), alone[i]->logits().data(),
                                     V * sizeof(float)))
                << "session " << i << ", position " << k;
        }
    }
    // The scales made a difference (the sessions hold the same tokens).
    EXPECT_NE(0, std::memcmp(batched[0]->logits().data(), batched[1]->logits().data(),
                             V * sizeof(float)));
}

// Speculative decoding verifies with the steered model: greedy output unchanged.
TEST(Steering, SpeculativeGreedyEqualsPlainSteeredGreedy) {
    MAGNETAR_REQUIRE_DEFAULT_MODEL();
    const std::string model = test::default_engine()->info().path;
    const std::string path = write_file("spec", random_file(test::default_engine()->info(), 10));
    const auto e = load(model, path, -0.5f, 0.0f);
    ASSERT_TRUE(e);
    std::vector<int32_t> prompt;
    ASSERT_TRUE(
        e->tokenize_chat({{"user", "Tell me about magnetars.", ""}}, think_mode::off, 4096, &prompt)
            .ok());
    constexpr int kTokens = 48;
    auto argmax = [](std::span<const float> l) {
        return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    };
    auto plain = session(*e, 512, false);
    ASSERT_TRUE(plain->eval(prompt).ok());
    std::vector<int32_t> want;
    for (int i = 0; i < kTokens; ++i) {
        want.push_back(plain->argmax());
        ASSERT_TRUE(plain->eval(std::span<const int32_t>(&want.back(), 1)).ok());
    }
    auto spec = session(*e, 512, false);
    ASSERT_TRUE(spec->eval(prompt).ok());
    std::vector<int32_t> got{spec->argmax()};
    int64_t kept = 0;
    while (static_cast<int>(got.size()) < kTokens) {
        speculation_options so;
        so.n_draft = 1;
        so.max_keep = kTokens - static_cast<int64_t>(got.size());
        speculation_result r;
        ASSERT_TRUE(spec->eval_speculative(got.back(), so, argmax, &r).ok());
        got.insert(got.end(), r.drafts.begin(), r.drafts.begin() + r.kept);
        kept += r.kept;
        got.push_back(r.next);
    }
    got.resize(kTokens);
    EXPECT_EQ(got, want);
    EXPECT_GT(kept, 0);  // the trained model's drafts are kept under mild steering
}

}  // namespace
}  // namespace magnetar
