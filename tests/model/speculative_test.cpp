// Speculative decoding with the MTP block (Session::eval_speculative): greedy and sampled
// output, the timeline, the logits and the checkpoints equal those of one-token-at-a-time
// decoding, over chunk ends, checkpoint positions and ratio-4 / ratio-128 block ends, on the
// random tiny-mtp model (almost every draft rejected: the rollback and replay paths) and on the
// trained default model (most drafts kept: the acceptance path, and its mean accepted length).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "magnetar/engine.h"
#include "magnetar/sampler.h"
#include "magnetar/session.h"
#include "model/forward_fixtures.h"
#include "support/default_engine.h"

namespace magnetar {
namespace {

std::unique_ptr<Engine> load(const std::string& path, bool exact = true) {
    engine_options eo;
    eo.model_path = path;
    eo.n_threads = 2;
    eo.exact_matmul = exact;
    std::unique_ptr<Engine> e;
    const status st = Engine::load(eo, &e);
    EXPECT_TRUE(st.ok()) << st.message();
    return e;
}

std::unique_ptr<Session> session(const Engine& e, int64_t n_ctx, int64_t chunk, int64_t every,
                                 bool drafts = false) {
    session_options so;
    so.drafts = drafts;
    so.n_ctx = n_ctx;
    so.chunk_size = chunk;
    so.checkpoint_interval = every;
    std::unique_ptr<Session> s;
    const status st = e.create_session(so, &s);
    EXPECT_TRUE(st.ok()) << st.message();
    return s;
}

struct run_out {
    std::vector<int32_t> tokens;  // generated
    std::vector<int32_t> timeline;
    std::vector<float> logits;  // of the last evaluated position
    std::vector<int64_t> checkpoints;
    int64_t steps = 0;
    int64_t drafted = 0;
    int64_t kept = 0;
    int64_t replays = 0;
};

// Generates n tokens after `prompt` as the CLI does: the last generated token is not
// evaluated. n_draft < 0: one eval() per token.
run_out generate(Session& s, const std::vector<int32_t>& prompt, int n, int n_draft,
                 const sampling_params& sp, std::vector<int32_t> stop = {}) {
    run_out o;
    EXPECT_TRUE(s.eval(prompt).ok());
    sampler smp(sp, s.n_vocab());
    const token_chooser choose = [&](std::span<const float> row) {
        return sp.temperature <= 0 ? sampler::argmax(row) : smp.sample(row);
    };
    int32_t id = choose(s.logits());
    while (static_cast<int>(o.tokens.size()) < n) {
        o.tokens.push_back(id);
        const int64_t left = n - static_cast<int64_t>(o.tokens.size());
        if (left == 0) break;
        if (n_draft < 0) {
            EXPECT_TRUE(s.eval(std::span<const int32_t>(&id, 1)).ok());
            id = choose(s.logits());
            continue;
        }
        speculation_options so;
        so.n_draft = n_draft;
        so.max_keep = left - 1;
        if (!stop.empty()) {
            so.keep = [&stop](int32_t t) {
                return std::find(stop.begin(), stop.end(), t) == stop.end();
            };
        }
        speculation_result r;
        const status st = s.eval_speculative(id, so, choose, &r);
        EXPECT_TRUE(st.ok()) << st.message();
        if (!st.ok()) break;
        EXPECT_LE(r.kept, static_cast<int64_t>(r.drafts.size()));
        EXPECT_LE(static_cast<int64_t>(r.drafts.size()), n_draft);
        o.steps += r.drafts.empty() ? 0 : 1;
        o.drafted += static_cast<int64_t>(r.drafts.size());
        o.kept += r.kept;
        o.replays += r.replayed ? 1 : 0;
        for (int64_t j = 0; j < r.kept; ++j) {
            const int32_t d = r.drafts[static_cast<size_t>(j)];
            for (int32_t t : stop) EXPECT_NE(d, t) << "a refused draft was kept";
            o.tokens.push_back(d);
        }
        id = r.next;
    }
    o.timeline.assign(s.tokens().begin(), s.tokens().end());
    o.logits.assign(s.logits().begin(), s.logits().end());
    o.checkpoints = s.checkpoint_positions();
    return o;
}

void expect_same(const run_out& plain, const run_out& spec, const std::string& what) {
    EXPECT_EQ(plain.tokens, spec.tokens) << what;
    EXPECT_EQ(plain.timeline, spec.timeline) << what;
    EXPECT_EQ(plain.checkpoints, spec.checkpoints) << what;
    ASSERT_EQ(plain.logits.size(), spec.logits.size()) << what;
    EXPECT_EQ(0, std::memcmp(plain.logits.data(), spec.logits.data(),
                             plain.logits.size() * sizeof(float)))
        << what << ": last logits differ";
}

sampling_params greedy() {
    sampling_params sp;
    sp.temperature = 0;
    return sp;
}

// Random weights: the MTP block's argmax rarely matches the model's, so nearly every step
// rolls back, and with two or more drafts replays.
TEST(Speculative, GreedyEqualsPlainDecodeOnRandomWeights) {
    for (const char* weights : {"f32", "published"}) {
        const auto e = load(test::tiny_model("tiny-mtp", weights), weights == std::string("f32"));
        const std::vector<int32_t> prompt = test::test_tokens(test::kTokenSeed, 40);
        // 260 generated tokens cross two ratio-128 block ends, the 64-token chunk ends and the
        // checkpoint positions (every 48).
        auto ps = session(*e, 320, 64, 48);
        const run_out plain = generate(*ps, prompt, 260, -1, greedy());
        for (int n_draft : {1, 2, 4}) {
            auto ss = session(*e, 320, 64, 48);
            const run_out spec = generate(*ss, prompt, 260, n_draft, greedy());
            const std::string what = std::string(weights) + " n_draft " + std::to_string(n_draft);
            expect_same(plain, spec, what);
            EXPECT_GT(spec.steps, 200) << what;
            if (n_draft >= 2) {
                EXPECT_GT(spec.replays, 0) << what;
            }
        }
    }
}

// Sampling: the chooser draws once per emitted token, so a seeded sampler gives the tokens of
// plain sampled decoding (drafts are kept exactly when the draw picks them).
TEST(Speculative, SampledEqualsPlainSampledDecode) {
    const auto e = load(test::tiny_model("tiny-mtp", "f32"));
    const std::vector<int32_t> prompt = test::test_tokens(7, 24);
    sampling_params sp;
    sp.temperature = 0.9f;
    sp.min_p = 0.0f;
    sp.top_k = 40;
    sp.seed = 1234;
    auto ps = session(*e, 256, 2048, 0);
    const run_out plain = generate(*ps, prompt, 150, -1, sp);
    auto ss = session(*e, 256, 2048, 0);
    const run_out spec = generate(*ss, prompt, 150, 3, sp);
    expect_same(plain, spec, "sampled");
}

TEST(Speculative, RefusesWhatItCannotDo) {
    const auto e = load(test::tiny_model("tiny", "f32"));  // no MTP block
    auto s = session(*e, 64, 64, 0);
    const std::vector<int32_t> prompt = test::test_tokens(3, 8);
    ASSERT_TRUE(s->eval(prompt).ok());
    const token_chooser choose = [](std::span<const float> row) { return sampler::argmax(row); };
    speculation_options so;
    so.n_draft = 2;
    EXPECT_EQ(s->eval_speculative(1, so, choose, nullptr).code(), status_code::unsupported);

    const auto m = load(test::tiny_model("tiny-mtp", "f32"));
    auto t = session(*m, 16, 16, 0);
    ASSERT_TRUE(t->eval(std::span<const int32_t>(prompt.data(), 8)).ok());
    EXPECT_EQ(t->eval_speculative(-1, so, choose, nullptr).code(), status_code::invalid_argument);
    EXPECT_EQ(t->eval_speculative(1, so, nullptr, nullptr).code(), status_code::invalid_argument);
    so.n_draft = -1;
    EXPECT_EQ(t->eval_speculative(1, so, choose, nullptr).code(), status_code::invalid_argument);
    so.n_draft = 4;
    // Near the context end fewer drafts are made; at the end the step is refused.
    speculation_result r;
    while (t->n_past() < t->n_ctx()) {
        const int64_t before = t->n_past();
        ASSERT_TRUE(t->eval_speculative(1, so, choose, &r).ok());
        EXPECT_LE(t->n_past(), t->n_ctx());
        EXPECT_EQ(t->n_past(), before + 1 + r.kept);
    }
    EXPECT_EQ(t->eval_speculative(1, so, choose, &r).code(), status_code::context_full);
}

// DeepSeek V4.1: DSpark drafts through the same step (random weights: nearly every draft is
// rejected, so every step restores and replays), equal to plain decoding over the window, the
// ratio-2 groups and the checkpoints; a session without the DSpark rings refuses.
TEST(Speculative, V41DSparkEqualsPlainDecode) {
    const auto e = load(test::tiny_model("v41-tiny", "lossless"));
    const std::vector<int32_t> prompt = test::test_tokens(5, 30, e->info().n_vocab);
    auto ps = session(*e, 256, 64, 48);
    const run_out plain = generate(*ps, prompt, 150, -1, greedy());
    for (int n_draft : {1, 3}) {
        auto ss = session(*e, 256, 64, 48, /*drafts=*/true);
        const run_out spec = generate(*ss, prompt, 150, n_draft, greedy());
        expect_same(plain, spec, "v41 n_draft " + std::to_string(n_draft));
        EXPECT_GT(spec.steps, 100);
    }
    sampling_params sp;
    sp.temperature = 0.7f;
    sp.seed = 99;
    auto pss = session(*e, 256, 64, 48);
    const run_out psampled = generate(*pss, prompt, 100, -1, sp);
    auto sss = session(*e, 256, 64, 48, true);
    expect_same(psampled, generate(*sss, prompt, 100, 2, sp), "v41 sampled");

    auto no = session(*e, 64, 64, 0);
    ASSERT_TRUE(no->eval(std::span<const int32_t>(prompt.data(), 8)).ok());
    speculation_options so;
    so.n_draft = 2;
    const token_chooser choose = [](std::span<const float> row) { return sampler::argmax(row); };
    EXPECT_EQ(no->eval_speculative(1, so, choose, nullptr).code(), status_code::unsupported);
}

// The trained model: its MTP block agrees with the model most of the time, so drafts are kept
// (the acceptance path) and the output still equals plain greedy decoding.
TEST(Speculative, TrainedModelKeepsDraftsAndMatchesGreedy) {
    MAGNETAR_REQUIRE_DEFAULT_MODEL();
    const Engine& e = *test::default_engine();
    std::vector<int32_t> prompt;
    const std::vector<chat_turn> turns = {
        {"user", "Explain what a magnetar is and how its magnetic field decays.", ""}};
    ASSERT_TRUE(e.tokenize_chat(turns, think_mode::off, 4096, &prompt).ok());
    auto ps = session(e, 1024, 2048, 128);
    const run_out plain = generate(*ps, prompt, 300, -1, greedy());
    for (int n_draft : {1, 3}) {
        auto ss = session(e, 1024, 2048, 128);
        const run_out spec = generate(*ss, prompt, 300, n_draft, greedy());
        expect_same(plain, spec, "trained, n_draft " + std::to_string(n_draft));
        const double per_step = static_cast<double>(spec.steps + spec.kept) /
                                static_cast<double>(std::max<int64_t>(spec.steps, 1));
        std::printf(
            "n_draft %d: %lld steps, %lld of %lld drafts kept, %.2f tokens per step, "
            "%lld replays\n",
            n_draft, static_cast<long long>(spec.steps), static_cast<long long>(spec.kept),
            static_cast<long long>(spec.drafted), per_step, static_cast<long long>(spec.replays));
        // Issue acceptance: at least 1.4 tokens per verify step at --mtp-draft 2.
        if (n_draft == 1) {
            EXPECT_GE(per_step, 1.4);
        }
    }
    // Drafts keep() refuses are never kept: refusing every generated token, no draft is kept
    // and the output is unchanged.
    auto ss = session(e, 1024, 2048, 128);
    const run_out none = generate(*ss, prompt, 120, 2, greedy(), plain.tokens);
    EXPECT_EQ(none.kept, 0);
    EXPECT_EQ(std::vector<int32_t>(plain.tokens.begin(), plain.tokens.begin() + 120), none.tokens);
}

}  // namespace
}  // namespace magnetar
