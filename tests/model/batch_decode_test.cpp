// Engine::decode_batch: one decode step of several sessions in one forward pass leaves every
// session exactly as decoding it alone does (logits, MTP draft logits, timeline, checkpoints,
// bit for bit), with the sessions at different positions (before and after the indexer's
// budget, across ratio-4 and ratio-128 block ends and the window), with float and int8
// activations; sessions that cannot share the pass (V4.1, an empty MTP timeline) are evaluated
// alone; a wrong argument evaluates nothing.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "magnetar/engine.h"
#include "magnetar/session.h"
#include "model/forward_fixtures.h"

namespace magnetar {
namespace {

std::unique_ptr<Engine> load(const std::string& path, bool exact) {
    engine_options eo;
    eo.model_path = path;
    eo.n_threads = 2;
    eo.exact_matmul = exact;
    std::unique_ptr<Engine> e;
    const status st = Engine::load(eo, &e);
    EXPECT_TRUE(st.ok()) << st.message();
    return e;
}

std::unique_ptr<Session> session(const Engine& e, int64_t n_ctx = 512, bool mtp_logits = true) {
    session_options so;
    so.n_ctx = n_ctx;
    so.chunk_size = 64;
    so.checkpoint_interval = 32;
    so.max_checkpoints = 4;
    so.mtp_logits = mtp_logits;
    std::unique_ptr<Session> s;
    const status st = e.create_session(so, &s);
    EXPECT_TRUE(st.ok()) << st.message();
    return s;
}

struct snapshot {
    std::vector<float> logits;
    std::vector<float> mtp;
    int64_t mtp_first = 0;
    std::vector<int32_t> timeline;
    std::vector<int64_t> checkpoints;
};

snapshot snap(const Session& s) {
    snapshot o;
    o.logits.assign(s.logits().begin(), s.logits().end());
    for (int64_t j = 0; j < s.n_mtp_rows(); ++j) {
        const auto r = s.mtp_logits_at(j);
        o.mtp.insert(o.mtp.end(), r.begin(), r.end());
    }
    o.mtp_first = s.mtp_first_pos();
    o.timeline.assign(s.tokens().begin(), s.tokens().end());
    o.checkpoints = s.checkpoint_positions();
    return o;
}

void expect_same(const snapshot& a, const snapshot& b, const std::string& where) {
    EXPECT_EQ(a.logits, b.logits) << where << ": logits differ";
    EXPECT_EQ(a.mtp, b.mtp) << where << ": MTP logits differ";
    EXPECT_EQ(a.mtp_first, b.mtp_first) << where;
    EXPECT_EQ(a.timeline, b.timeline) << where;
    EXPECT_EQ(a.checkpoints, b.checkpoints) << where;
}

// Prompts of these lengths, then `steps` decode steps of every session with its own tokens:
// once each alone, once all in decode_batch; compared after every step.
void batched_equals_alone(const std::string& model, bool exact, const std::vector<int>& lengths,
                          int steps) {
    const std::unique_ptr<Engine> e = load(model, exact);
    ASSERT_TRUE(e);
    const uint32_t n_vocab = e->info().n_vocab;
    const size_t n = lengths.size();
    std::vector<std::vector<int32_t>> toks;
    std::vector<std::unique_ptr<Session>> alone, batched;
    for (size_t i = 0; i < n; ++i) {
        toks.push_back(test::test_tokens(100 + i, lengths[i] + steps, n_vocab));
        alone.push_back(session(*e));
        batched.push_back(session(*e));
        const std::span<const int32_t> prompt(toks[i].data(), static_cast<size_t>(lengths[i]));
        ASSERT_TRUE(alone[i]->eval(prompt).ok());
        ASSERT_TRUE(batched[i]->eval(prompt).ok());
    }
    std::vector<Session*> ptrs;
    for (auto& s : batched) ptrs.push_back(s.get());
    for (int k = 0; k < steps; ++k) {
        std::vector<int32_t> step;
        for (size_t i = 0; i < n; ++i) {
            step.push_back(toks[i][static_cast<size_t>(lengths[i] + k)]);
            ASSERT_TRUE(alone[i]->eval(std::span<const int32_t>(&step.back(), 1)).ok());
        }
        const status st = e->decode_batch(ptrs, step);
        ASSERT_TRUE(st.ok()) << st.message();
        for (size_t i = 0; i < n; ++i) {
            expect_same(snap(*batched[i]), snap(*alone[i]),
                        "session " + std::to_string(i) + " step " + std::to_string(k));
        }
        if (::testing::Test::HasFailure()) return;
    }
}

// tiny-mtp: window 128, ratio-4 and ratio-128 layers, indexer budget below 300 / 4 rows.
TEST(BatchDecode, FloatActivationsMatchDecodingAlone) {
    batched_equals_alone(test::tiny_model("tiny-mtp", "f32"), true, {1, 31, 126, 255, 300}, 6);
}

TEST(BatchDecode, Int8ActivationsOnPublishedWeightsMatchDecodingAlone) {
    batched_equals_alone(test::tiny_model("tiny-mtp", "published"), false, {2, 129, 310}, 5);
}

TEST(BatchDecode, WithoutTheMtpBlockAndAcrossAChunkEnd) {
    // engine_options::use_mtp false: no MTP rows; positions 62..66 cross the chunk of 64.
    engine_options eo;
    eo.model_path = test::tiny_model("tiny-mtp", "f32");
    eo.n_threads = 2;
    eo.use_mtp = false;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::load(eo, &e).ok());
    const std::vector<int32_t> t = test::test_tokens(7, 80, e->info().n_vocab);
    auto a = session(*e, 256, false), b = session(*e, 256, false);
    auto c = session(*e, 256, false), d = session(*e, 256, false);
    ASSERT_TRUE(a->eval(std::span<const int32_t>(t.data(), 62)).ok());
    ASSERT_TRUE(b->eval(std::span<const int32_t>(t.data(), 62)).ok());
    ASSERT_TRUE(c->eval(std::span<const int32_t>(t.data(), 5)).ok());
    ASSERT_TRUE(d->eval(std::span<const int32_t>(t.data(), 5)).ok());
    for (int k = 0; k < 5; ++k) {
        const int32_t x = t[static_cast<size_t>(62 + k)], y = t[static_cast<size_t>(5 + k)];
        ASSERT_TRUE(a->eval(std::span<const int32_t>(&x, 1)).ok());
        ASSERT_TRUE(c->eval(std::span<const int32_t>(&y, 1)).ok());
        Session* pair[] = {b.get(), d.get()};
        const int32_t step[] = {x, y};
        ASSERT_TRUE(e->decode_batch(pair, step).ok());
        expect_same(snap(*b), snap(*a), "b step " + std::to_string(k));
        expect_same(snap(*d), snap(*c), "d step " + std::to_string(k));
    }
}

TEST(BatchDecode, AnEmptyMtpTimelineIsEvaluatedAlone) {
    const std::unique_ptr<Engine> e = load(test::tiny_model("tiny-mtp", "f32"), true);
    const std::vector<int32_t> t = test::test_tokens(3, 40, e->info().n_vocab);
    auto fresh = session(*e), busy = session(*e);
    auto fresh_ref = session(*e), busy_ref = session(*e);
    ASSERT_TRUE(busy->eval(std::span<const int32_t>(t.data(), 20)).ok());
    ASSERT_TRUE(busy_ref->eval(std::span<const int32_t>(t.data(), 20)).ok());
    ASSERT_TRUE(fresh_ref->eval(std::span<const int32_t>(&t[0], 1)).ok());
    ASSERT_TRUE(busy_ref->eval(std::span<const int32_t>(&t[20], 1)).ok());
    Session* both[] = {fresh.get(), busy.get()};
    const int32_t step[] = {t[0], t[20]};
    ASSERT_TRUE(e->decode_batch(both, step).ok());
    expect_same(snap(*fresh), snap(*fresh_ref), "fresh");
    expect_same(snap(*busy), snap(*busy_ref), "busy");
}

TEST(BatchDecode, V41SessionsAreEvaluatedOneAfterAnother) {
    const std::unique_ptr<Engine> e = load(test::tiny_model("v41-tiny", "lossless"), true);
    const std::vector<int32_t> t = test::test_tokens(5, 60, e->info().n_vocab);
    auto a = session(*e, 256, false), b = session(*e, 256, false);
    auto a_ref = session(*e, 256, false), b_ref = session(*e, 256, false);
    for (Session* s : {a.get(), a_ref.get()})
        ASSERT_TRUE(s->eval(std::span<const int32_t>(t.data(), 30)).ok());
    for (Session* s : {b.get(), b_ref.get()})
        ASSERT_TRUE(s->eval(std::span<const int32_t>(t.data() + 5, 17)).ok());
    for (int k = 0; k < 3; ++k) {
        const int32_t x = t[static_cast<size_t>(30 + k)], y = t[static_cast<size_t>(40 + k)];
        ASSERT_TRUE(a_ref->eval(std::span<const int32_t>(&x, 1)).ok());
        ASSERT_TRUE(b_ref->eval(std::span<const int32_t>(&y, 1)).ok());
        Session* pair[] = {a.get(), b.get()};
        const int32_t step[] = {x, y};
        ASSERT_TRUE(e->decode_batch(pair, step).ok());
        expect_same(snap(*a), snap(*a_ref), "a");
        expect_same(snap(*b), snap(*b_ref), "b");
    }
}

TEST(BatchDecode, AWrongArgumentEvaluatesNothing) {
    const std::unique_ptr<Engine> e = load(test::tiny_model("tiny-mtp", "f32"), true);
    const std::unique_ptr<Engine> other = load(test::tiny_model("tiny-mtp", "f32"), true);
    auto a = session(*e, 8), b = session(*e, 8);
    auto foreign = session(*other, 8);
    const int32_t one[] = {1, 2, 3, 4, 5, 6, 7, 8};
    ASSERT_TRUE(a->eval(std::span<const int32_t>(one, 3)).ok());
    ASSERT_TRUE(b->eval(std::span<const int32_t>(one, 8)).ok());  // full
    auto c = session(*e, 8);
    ASSERT_TRUE(c->eval(std::span<const int32_t>(one, 2)).ok());
    const auto expect = [&](std::vector<Session*> ss, std::vector<int32_t> toks, status_code code,
                            const std::string& says) {
        const status st = e->decode_batch(ss, toks);
        EXPECT_EQ(st.code(), code) << st.message();
        EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
        EXPECT_EQ(a->n_past(), 3);
        EXPECT_EQ(c->n_past(), 2);
    };
    expect({a.get(), c.get()}, {1}, status_code::invalid_argument, "2 sessions but 1 tokens");
    expect({}, {}, status_code::invalid_argument, "no sessions");
    expect({a.get(), a.get()}, {1, 2}, status_code::invalid_argument, "appears twice");
    expect({c.get(), a.get(), b.get()}, {1, 2, 3}, status_code::context_full, "session 2 is full");
    expect({a.get(), c.get()}, {1, -4}, status_code::invalid_argument, "token 1 has id -4");
    expect({a.get(), foreign.get()}, {1, 2}, status_code::invalid_argument, "another engine");
    expect({a.get(), nullptr}, {1, 2}, status_code::invalid_argument, "session 1 is null");
}

}  // namespace
}  // namespace magnetar
