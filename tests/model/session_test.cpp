// Engine and session behaviour on the tiny models: decode == prefill == chunked prefill, greedy
// generation independent of batching, run-to-run reproducibility, the cache bytes of spec §8.2,
// errors as statuses, and the `run` command.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "magnetar/engine.h"
#include "model/forward_fixtures.h"
#include "model/memory.h"
#include "model/model.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

using test::compare_rows;
using test::diff_stats;

constexpr int64_t kVocab = 129280;

const std::vector<int32_t>& tokens() {
    static const std::vector<int32_t> t = test::test_tokens(test::kTokenSeed, test::kSeqLen);
    return t;
}

std::unique_ptr<Engine> load(const std::string& path, int threads = 2) {
    engine_options eo;
    eo.model_path = path;
    eo.n_threads = threads;
    std::unique_ptr<Engine> e;
    const status st = Engine::load(eo, &e);
    EXPECT_TRUE(st.ok()) << st.message();
    return e;
}

int32_t argmax(std::span<const float> v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i) {
        if (v[i] > v[best]) best = i;
    }
    return static_cast<int32_t>(best);
}

// Decode, prefill and chunked prefill of every size give the same logits at every position
// (the tolerance is 1e-5 relative; the design gives identical bits) and the same MTP drafts.
TEST(SessionEquivalence, DecodePrefillChunked) {
    const std::string& model = test::tiny_model("tiny-mtp", "f32");
    test::engine_run base;
    base.mtp = true;
    const auto prefill = test::run_engine(model, tokens(), base);
    struct mode {
        const char* name;
        bool decode;
        int64_t chunk;
        bool mtp;  // also compare the MTP drafts (the head over every row is the costly part)
    };
    for (const mode m : {mode{"decode", true, 1, true}, mode{"chunked:1", false, 1, false},
                         mode{"chunked:3", false, 3, false}, mode{"chunked:7", false, 7, true},
                         mode{"chunked:64", false, 64, false}}) {
        test::engine_run r = base;
        r.decode = m.decode;
        r.chunk = m.chunk;
        r.mtp = m.mtp;
        const auto got = test::run_engine(model, tokens(), r);
        const diff_stats d = compare_rows(got.logits, prefill.logits, kVocab);
        std::printf("  %-10s vs prefill: logits max rel diff %.3e (bit-identical %s)", m.name,
                    d.max_rel, d.bit_identical ? "yes" : "no");
        EXPECT_LE(d.max_rel, 1e-5) << m.name;
        EXPECT_TRUE(d.bit_identical) << m.name;
        EXPECT_EQ(d.argmax_mismatch, 0) << m.name;
        if (m.mtp) {
            const diff_stats dm = compare_rows(got.mtp, prefill.mtp, kVocab);
            std::printf(", MTP drafts max rel diff %.3e (bit-identical %s)", dm.max_rel,
                        dm.bit_identical ? "yes" : "no");
            EXPECT_LE(dm.max_rel, 1e-5) << m.name;
            EXPECT_TRUE(dm.bit_identical) << m.name;
        }
        std::printf("\n");
    }
}

// 256 greedy steps after a prompt give the same tokens whether the prompt was prefilled in one
// batch, in chunks of 7, or decoded token by token.
TEST(SessionEquivalence, Greedy256Identical) {
    auto engine = load(test::tiny_model("tiny", "f32"));
    const std::vector<int32_t> prompt(tokens().begin(), tokens().begin() + 40);
    auto generate = [&](int64_t chunk, bool decode_prompt) {
        session_options so;
        so.n_ctx = 40 + 256;
        so.chunk_size = chunk;
        std::unique_ptr<Session> s;
        EXPECT_TRUE(engine->create_session(so, &s).ok());
        if (decode_prompt) {
            for (int32_t t : prompt) {
                EXPECT_TRUE(s->eval(std::span<const int32_t>(&t, 1)).ok());
            }
        } else {
            EXPECT_TRUE(s->eval(prompt).ok());
        }
        std::vector<int32_t> out;
        for (int i = 0; i < 256; ++i) {
            const int32_t next = argmax(s->logits());
            out.push_back(next);
            if (i + 1 < 256) {
                EXPECT_TRUE(s->eval(std::span<const int32_t>(&next, 1)).ok());
            }
        }
        return out;
    };
    const auto a = generate(2048, false);
    EXPECT_EQ(generate(7, false), a);
    EXPECT_EQ(generate(2048, true), a);
    int distinct = 0;
    for (size_t i = 0; i < a.size(); ++i)
        distinct += std::find(a.begin(), a.begin() + i, a[i]) == a.begin() + i;
    std::printf("  256 greedy tokens identical in all three schedules (%d distinct ids)\n",
                distinct);
}

// Same inputs and thread count: the same bits, run after run; and the partition of rows over
// threads never changes a value either.
TEST(SessionEquivalence, RunToRunBitIdentical) {
    const std::string& model = test::tiny_model("tiny", "f32");
    const std::vector<int32_t> ids(tokens().begin(), tokens().begin() + 150);
    test::engine_run r;
    const auto a = test::run_engine(model, ids, r);
    const auto b = test::run_engine(model, ids, r);
    EXPECT_TRUE(compare_rows(b.logits, a.logits, kVocab).bit_identical);
    r.threads = 1;
    const auto c = test::run_engine(model, ids, r);
    EXPECT_TRUE(compare_rows(c.logits, a.logits, kVocab).bit_identical);
}

// The session holds exactly the cache of spec §8.2 (model/memory.h): the growing compressed
// and indexer rows, the raw windows (MTP included) and the FP32 frontiers.
TEST(SessionMemory, KvBytesMatchSpecFormula) {
    for (const char* preset : {"tiny", "tiny-mtp"}) {
        const std::string& path = test::tiny_model(preset, "f32");
        auto m = model::load(path);
        auto engine = load(path);
        const bool mtp = engine->info().has_mtp;
        for (int64_t ctx : {4096, 1000, 7}) {
            session_options so;
            so.n_ctx = ctx;
            so.chunk_size = 256;
            std::unique_ptr<Session> s;
            ASSERT_TRUE(engine->create_session(so, &s).ok());
            const session_memory got = s->memory();
            const kv_memory want = estimate_kv_memory(m->hp(), static_cast<uint64_t>(ctx), 4, mtp);
            EXPECT_EQ(got.growing_bytes, want.growing_bytes) << preset << " ctx " << ctx;
            EXPECT_EQ(got.raw_window_bytes, want.raw_window_bytes) << preset << " ctx " << ctx;
            EXPECT_EQ(got.frontier_bytes, want.frontier_bytes) << preset << " ctx " << ctx;
            if (ctx % 128 == 0) {
                EXPECT_EQ(got.kv_bytes_per_token(), kv_bytes_per_token(m->hp(), 4));
                std::printf(
                    "  %-8s ctx %5lld: %.1f cache bytes per token (spec formula %.1f), raw windows "
                    "%llu B, "
                    "frontiers %llu B, scratch %llu B\n",
                    preset, static_cast<long long>(ctx), got.kv_bytes_per_token(),
                    kv_bytes_per_token(m->hp(), 4),
                    static_cast<unsigned long long>(got.raw_window_bytes),
                    static_cast<unsigned long long>(got.frontier_bytes),
                    static_cast<unsigned long long>(got.scratch_bytes));
            }
        }
    }
}

TEST(SessionApi, ErrorsAreStatuses) {
    auto engine = load(test::tiny_model("tiny", "f32"));
    std::unique_ptr<Session> s;
    session_options so;
    so.n_ctx = 8;
    ASSERT_TRUE(engine->create_session(so, &s).ok());
    const std::vector<int32_t> nine(9, 5);
    EXPECT_EQ(s->eval(nine).code(), status_code::context_full);
    const std::vector<int32_t> bad{0, 129280};
    EXPECT_EQ(s->eval(bad).code(), status_code::invalid_argument);
    EXPECT_EQ(s->eval(std::span<const int32_t>()).code(), status_code::invalid_argument);
    EXPECT_EQ(s->n_past(), 0);
    so.mtp_logits = true;
    std::unique_ptr<Session> s2;
    EXPECT_EQ(engine->create_session(so, &s2).code(), status_code::unsupported);
    engine_options eo;
    eo.model_path = test::temp_dir() + "/missing.gguf";
    std::unique_ptr<Engine> e2;
    const status st = Engine::load(eo, &e2);
    EXPECT_EQ(st.code(), status_code::model_error);
    EXPECT_NE(st.message().find("missing.gguf"), std::string::npos) << st.message();
}

// reset() forgets the timeline: the same tokens give the same logits again.
TEST(SessionApi, ResetStartsOver) {
    auto engine = load(test::tiny_model("tiny", "f32"));
    session_options so;
    so.n_ctx = 64;
    std::unique_ptr<Session> s;
    ASSERT_TRUE(engine->create_session(so, &s).ok());
    const std::vector<int32_t> ids(tokens().begin(), tokens().begin() + 40);
    ASSERT_TRUE(s->eval(ids).ok());
    const std::vector<float> first(s->logits().begin(), s->logits().end());
    s->reset();
    EXPECT_EQ(s->n_past(), 0);
    ASSERT_TRUE(s->eval(ids).ok());
    EXPECT_TRUE(std::equal(first.begin(), first.end(), s->logits().begin()));
}

TEST(RunCommand, GreedyIdsAndSpeed) {
    const std::string dir = test::temp_dir();
    const std::vector<int32_t> prompt(tokens().begin(), tokens().begin() + 20);
    {
        std::ofstream f(dir + "/ids.json");
        f << "[";
        for (size_t i = 0; i < prompt.size(); ++i) f << (i ? "," : "") << prompt[i];
        f << "]";
    }
    std::string out;
    const std::string cmd = test::magnetar_bin() + " run -m " + test::tiny_model("tiny", "f32") +
                            " --tokens " + dir + "/ids.json -n 8 -t 2";
    ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
    EXPECT_NE(out.find("prefill: 20 tokens"), std::string::npos) << out;
    EXPECT_NE(out.find("decode:"), std::string::npos) << out;

    auto engine = load(test::tiny_model("tiny", "f32"));
    session_options so;
    so.n_ctx = 28;
    std::unique_ptr<Session> s;
    ASSERT_TRUE(engine->create_session(so, &s).ok());
    ASSERT_TRUE(s->eval(prompt).ok());
    std::string want;
    for (int i = 0; i < 8; ++i) {
        const int32_t next = argmax(s->logits());
        want += (i ? " " : "") + std::to_string(next);
        if (i < 7) {
            ASSERT_TRUE(s->eval(std::span<const int32_t>(&next, 1)).ok());
        }
    }
    EXPECT_EQ(out.substr(0, out.find('\n')), want) << out;
}

}  // namespace
}  // namespace magnetar
