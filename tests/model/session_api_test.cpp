// The session API of protocol §6.1 on the tiny model: sync reuses the longest usable prefix
// (counted by a tap on the embedding rows, not only by what sync reports), checkpoints and
// rewind, payload snapshot / restore bit-identical, payload rejection, cancellation that leaves
// a usable session, and the payload size of the spec's cross-implementation example.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kv/payload.h"
#include "magnetar/engine.h"
#include "model/forward_fixtures.h"
#include "model/hparams.h"

namespace magnetar {
namespace {

const std::vector<int32_t>& seq() {
    static const std::vector<int32_t> t = test::test_tokens(test::kTokenSeed, test::kSeqLen);
    return t;
}

std::vector<int32_t> head(size_t n) {
    return {seq().begin(), seq().begin() + static_cast<std::ptrdiff_t>(n)};
}

// The same first `keep` tokens, then `extra` different ones.
std::vector<int32_t> diverging(size_t keep, size_t extra) {
    std::vector<int32_t> t = head(keep);
    const std::vector<int32_t> other = test::test_tokens(99, static_cast<int>(extra) + 1);
    t.insert(t.end(), other.begin() + 1, other.end());
    return t;
}

struct fixture {
    std::unique_ptr<Engine> engine;
    explicit fixture(const std::string& preset = "tiny") {
        engine_options eo;
        eo.model_path = test::tiny_model(preset, "f32");
        eo.n_threads = 2;
        const status st = Engine::load(eo, &engine);
        EXPECT_TRUE(st.ok()) << st.message();
    }
    std::unique_ptr<Session> session(int64_t interval = 64, int64_t chunk = 2048) const {
        session_options so;
        so.n_ctx = 512;
        so.chunk_size = chunk;
        so.checkpoint_interval = interval;
        std::unique_ptr<Session> s;
        const status st = engine->create_session(so, &s);
        EXPECT_TRUE(st.ok()) << st.message();
        return s;
    }
    // Next-token logits of a cold evaluation of `t`.
    std::vector<float> cold(const std::vector<int32_t>& t) const {
        auto s = session(0);
        const status st = s->eval(t);
        EXPECT_TRUE(st.ok()) << st.message();
        return {s->logits().begin(), s->logits().end()};
    }
};

std::vector<float> logits_of(const Session& s) {
    return {s.logits().begin(), s.logits().end()};
}

// Counts the token rows the forward pass really evaluates.
struct row_counter {
    int64_t rows = 0;
    void attach(Session& s) {
        s.set_dump({"embd"}, [this](const std::string&, int64_t, int64_t n, int64_t, const float*) {
            rows += n;
        });
    }
};

TEST(SessionSync, ExtendsALivePrefixEvaluatingOnlyTheSuffix) {
    fixture f;
    auto s = f.session();
    row_counter rc;
    rc.attach(*s);
    sync_result r;
    ASSERT_TRUE(s->sync(head(200), {}, &r).ok());
    EXPECT_EQ(r.reused, 0);
    EXPECT_EQ(r.evaluated, 200);
    EXPECT_EQ(rc.rows, 200);
    ASSERT_TRUE(s->sync(head(320), {}, &r).ok());
    EXPECT_EQ(r.reused, 200);
    EXPECT_EQ(r.evaluated, 120);
    EXPECT_FALSE(r.from_checkpoint);
    EXPECT_EQ(rc.rows, 320);
    EXPECT_EQ(s->n_past(), 320);
    EXPECT_EQ(logits_of(*s), f.cold(head(320)));  // bit-identical to a cold prefill
    // The same list again evaluates nothing.
    ASSERT_TRUE(s->sync(head(320), {}, &r).ok());
    EXPECT_EQ(r.evaluated, 0);
    EXPECT_EQ(rc.rows, 320);
}

TEST(SessionSync, DivergingListResumesFromTheLatestCheckpointInTheCommonPrefix) {
    fixture f;
    auto s = f.session(64);
    row_counter rc;
    rc.attach(*s);
    ASSERT_TRUE(s->sync(head(300)).ok());
    EXPECT_EQ(s->checkpoint_positions(), (std::vector<int64_t>{64, 128, 192, 256}));
    const std::vector<int32_t> b = diverging(150, 100);
    sync_result r;
    ASSERT_TRUE(s->sync(b, {}, &r).ok());
    EXPECT_TRUE(r.from_checkpoint);
    EXPECT_EQ(r.reused, 128);
    EXPECT_EQ(r.evaluated, 250 - 128);
    EXPECT_EQ(rc.rows, 300 + 122);
    EXPECT_EQ(logits_of(*s), f.cold(b));
    std::vector<int32_t> got(s->tokens().begin(), s->tokens().end());
    EXPECT_EQ(got, b);
    // A strict prefix that ends on a checkpoint needs no evaluation at all.
    ASSERT_TRUE(s->sync(head(128), {}, &r).ok());
    EXPECT_EQ(r.evaluated, 0);
    EXPECT_EQ(logits_of(*s), f.cold(head(128)));
}

TEST(SessionSync, WithoutCheckpointsADivergingListIsEvaluatedFromScratch) {
    fixture f;
    auto s = f.session(0);
    ASSERT_TRUE(s->sync(head(100)).ok());
    sync_result r;
    const std::vector<int32_t> b = diverging(50, 30);
    ASSERT_TRUE(s->sync(b, {}, &r).ok());
    EXPECT_EQ(r.reused, 0);
    EXPECT_EQ(r.evaluated, 80);
    EXPECT_EQ(logits_of(*s), f.cold(b));
}

TEST(SessionSync, RejectsEmptyOversizedAndOutOfVocabularyLists) {
    fixture f;
    auto s = f.session();
    EXPECT_EQ(s->sync({}).code(), status_code::invalid_argument);
    std::vector<int32_t> big(513, 1);
    EXPECT_EQ(s->sync(big).code(), status_code::context_full);
    std::vector<int32_t> bad = head(10);
    bad[5] = 1 << 30;
    const status st = s->sync(bad);
    EXPECT_EQ(st.code(), status_code::invalid_argument);
    EXPECT_NE(st.message().find("token 5"), std::string::npos) << st.message();
    EXPECT_EQ(s->n_past(), 0);
}

TEST(SessionRewind, ReturnsToCheckpointsOnly) {
    fixture f;
    auto s = f.session(100);
    ASSERT_TRUE(s->eval(head(300)).ok());
    const std::vector<float> at300 = logits_of(*s);
    EXPECT_EQ(s->checkpoint_positions(), (std::vector<int64_t>{100, 200, 300}));
    ASSERT_TRUE(s->rewind(200).ok());
    EXPECT_EQ(s->n_past(), 200);
    EXPECT_EQ(s->checkpoint_positions(), (std::vector<int64_t>{100, 200}));
    EXPECT_EQ(logits_of(*s), f.cold(head(200)));
    const std::vector<int32_t> rest(seq().begin() + 200, seq().begin() + 300);
    ASSERT_TRUE(s->eval(rest).ok());
    EXPECT_EQ(logits_of(*s), at300);
    const status st = s->rewind(150);
    EXPECT_EQ(st.code(), status_code::invalid_argument);
    EXPECT_NE(st.message().find("no checkpoint at position 150"), std::string::npos);
    EXPECT_EQ(s->n_past(), 300);  // unchanged by the refusal
    // An explicit checkpoint at an arbitrary position.
    ASSERT_TRUE(s->rewind(100).ok());
    const std::vector<int32_t> next(seq().begin() + 100, seq().begin() + 137);
    ASSERT_TRUE(s->eval(next).ok());
    ASSERT_TRUE(s->checkpoint().ok());
    EXPECT_EQ(s->checkpoint_positions(), (std::vector<int64_t>{100, 137}));
    ASSERT_TRUE(s->eval(std::vector<int32_t>(seq().begin() + 137, seq().begin() + 180)).ok());
    ASSERT_TRUE(s->rewind(137).ok());
    EXPECT_EQ(logits_of(*s), f.cold(head(137)));
    ASSERT_TRUE(s->rewind(0).ok());
    EXPECT_EQ(s->n_past(), 0);
    EXPECT_TRUE(s->checkpoint_positions().empty());
}

TEST(SessionPayload, SnapshotRestoreContinuesBitIdentically) {
    fixture f("tiny-mtp");
    auto a = f.session();
    ASSERT_TRUE(a->eval(head(203)).ok());  // not a multiple of any ratio or the window
    std::vector<uint8_t> snap;
    ASSERT_TRUE(a->save_payload(&snap).ok());
    EXPECT_EQ(snap.size(), a->payload_size());
    uint32_t magic = 0;
    std::memcpy(&magic, snap.data(), 4);
    EXPECT_EQ(magic, kv::k_payload_magic);
    const std::vector<int32_t> rest(seq().begin() + 203, seq().end());
    ASSERT_TRUE(a->eval(rest).ok());
    const std::vector<float> want = logits_of(*a);

    // Into a fresh session, and back into the same session after it moved on.
    auto b = f.session();
    ASSERT_TRUE(b->load_payload(snap).ok());
    EXPECT_EQ(b->n_past(), 203);
    EXPECT_EQ(std::vector<int32_t>(b->tokens().begin(), b->tokens().end()), head(203));
    EXPECT_EQ(logits_of(*b), f.cold(head(203)));  // the logits travel with the payload
    ASSERT_TRUE(b->eval(rest).ok());
    EXPECT_EQ(logits_of(*b), want);
    ASSERT_TRUE(a->load_payload(snap).ok());
    ASSERT_TRUE(a->eval(rest).ok());
    EXPECT_EQ(logits_of(*a), want);
    // The payload of the restored-and-continued session equals the original's.
    std::vector<uint8_t> s1, s2;
    ASSERT_TRUE(a->save_payload(&s1).ok());
    ASSERT_TRUE(b->save_payload(&s2).ok());
    EXPECT_EQ(s1, s2);
}

TEST(SessionPayload, RejectsForeignTruncatedAndCorruptPayloadsAndStaysUsable) {
    fixture f;
    auto a = f.session();
    ASSERT_TRUE(a->eval(head(150)).ok());
    std::vector<uint8_t> snap;
    ASSERT_TRUE(a->save_payload(&snap).ok());
    auto b = f.session();
    struct bad_case {
        const char* name;
        std::vector<uint8_t> bytes;
        const char* message;
    };
    std::vector<bad_case> cases;
    cases.push_back({"truncated", {snap.begin(), snap.end() - 1}, "bytes, expected"});
    cases.push_back({"empty", {}, "truncated"});
    auto flipped = [&](size_t at, uint32_t v) {
        std::vector<uint8_t> c = snap;
        std::memcpy(c.data() + at, &v, 4);
        return c;
    };
    cases.push_back({"magic", flipped(0, 0x12345678u), "magic"});
    cases.push_back({"version", flipped(4, 7), "version"});
    cases.push_back({"layers", flipped(32, 99), "layer count"});
    cases.push_back({"vocab", flipped(44, 1000), "vocabulary"});
    cases.push_back({"tokens beyond ctx", flipped(28, 100000), "do not fit"});
    cases.push_back({"token id", flipped(52 + 4 * 7, 0x7fffffffu), "outside the vocabulary"});
    const size_t counts = 52 + 4 * 150 + 4 * 129280;
    cases.push_back({"row count", flipped(counts + 4 * 2, 999), "compressed rows"});
    std::vector<uint8_t> longer = snap;
    longer.push_back(0);
    cases.push_back({"trailing byte", longer, "bytes, expected"});
    for (const bad_case& c : cases) {
        ASSERT_TRUE(b->eval(head(10)).ok());
        const status st = b->load_payload(c.bytes);
        EXPECT_EQ(st.code(), status_code::bad_payload) << c.name;
        EXPECT_NE(st.message().find(c.message), std::string::npos)
            << c.name << ": " << st.message();
        EXPECT_EQ(b->n_past(), 0) << c.name;
        b->reset();
    }
    // Still usable: a good payload loads and continues like the original.
    ASSERT_TRUE(b->load_payload(snap).ok());
    EXPECT_EQ(logits_of(*b), logits_of(*a));
    // A payload larger than the session's context is refused.
    session_options small;
    small.n_ctx = 100;
    std::unique_ptr<Session> c;
    ASSERT_TRUE(f.engine->create_session(small, &c).ok());
    EXPECT_EQ(c->load_payload(snap).code(), status_code::bad_payload);
}

TEST(SessionPayload, SizeMatchesTheSpecExampleForFlash) {
    const hparams hp = preset_flash();
    EXPECT_EQ(kv::payload_size(hp, 2048), 52184460u);
    EXPECT_EQ(kv::payload_size(hp, 4096) - kv::payload_size(hp, 2048), 28188672u);
}

TEST(SessionCancel, StopsWithinAChunkAndLeavesAUsableSession) {
    fixture f;
    auto s = f.session(0, 64);  // chunks of 64
    std::atomic<int> polls{0};
    eval_options o;
    // Let the first chunk finish (polled once per layer plus once per chunk), stop the second
    // in the middle of its layers.
    int64_t chunks_done = 0;
    o.progress = [&](int64_t, int64_t) { ++chunks_done; };
    o.cancel = [&]() { return chunks_done >= 1 && ++polls > 2; };
    const status st = s->eval(head(300), o);
    EXPECT_EQ(st.code(), status_code::cancelled);
    EXPECT_EQ(s->n_past(), 64);
    EXPECT_EQ(logits_of(*s), f.cold(head(64)));
    sync_result r;
    ASSERT_TRUE(s->sync(head(300), {}, &r).ok());
    EXPECT_EQ(r.reused, 64);
    EXPECT_EQ(logits_of(*s), f.cold(head(300)));
}

TEST(SessionLogits, TopLogprobsArgmaxAndSampling) {
    fixture f;
    auto s = f.session();
    ASSERT_TRUE(s->eval(head(20)).ok());
    const std::vector<token_logprob> top = s->top_logprobs(5);
    ASSERT_EQ(top.size(), 5u);
    EXPECT_EQ(top[0].id, s->argmax());
    EXPECT_DOUBLE_EQ(s->logprob_of(top[0].id), top[0].logprob);
    for (size_t i = 1; i < top.size(); ++i) EXPECT_GE(top[i - 1].logprob, top[i].logprob);
    sampling_params p;
    p.temperature = 0;
    sampler greedy(p);
    EXPECT_EQ(s->sample(greedy), s->argmax());
}

}  // namespace
}  // namespace magnetar

namespace magnetar {
namespace {

TEST(EngineText, TokenizeRenderAndDetokenizeThroughTheEngine) {
    fixture f;
    const model_info& mi = f.engine->info();
    ASSERT_TRUE(mi.has_tokenizer);
    EXPECT_GE(mi.special.bos, 0);
    EXPECT_GE(mi.special.eos, 0);
    const std::string prompt = Engine::render_chat(
        {{"system", "Be brief.", ""}, {"user", "Hello <｜User｜>", ""}}, think_mode::off, 4096);
    std::vector<int32_t> rendered, plain, chat;
    ASSERT_TRUE(f.engine->tokenize(prompt, true, &rendered).ok());
    ASSERT_TRUE(f.engine->tokenize(prompt, false, &plain).ok());
    std::string text;
    ASSERT_TRUE(f.engine
                    ->tokenize_chat({{"system", "Be brief.", ""}, {"user", "Hello <｜User｜>", ""}},
                                    think_mode::off, 4096, &chat, &text)
                    .ok());
    EXPECT_EQ(text, prompt);
    ASSERT_FALSE(chat.empty());
    EXPECT_EQ(chat.front(), mi.special.bos);
    EXPECT_EQ(chat.back(), mi.special.think_end);  // non-thinking turns open with </think>
    auto count = [](const std::vector<int32_t>& v, int32_t id) {
        return std::count(v.begin(), v.end(), id);
    };
    // Whole-string rendered tokenization turns the typed literal into a control token;
    // tokenize_chat keeps it text, plain tokenization never yields one.
    EXPECT_EQ(count(rendered, mi.special.user), 2);
    EXPECT_EQ(count(chat, mi.special.user), 1);
    EXPECT_EQ(count(plain, mi.special.bos), 0);
    EXPECT_EQ(f.engine->detokenize(chat), prompt);
    // Without literals in client text, tokenize_chat equals rendered tokenization.
    const std::vector<chat_turn> clean = {{"user", "What is 2+2?", ""}};
    std::vector<int32_t> a, b;
    ASSERT_TRUE(f.engine->tokenize_chat(clean, think_mode::on, 4096, &a).ok());
    ASSERT_TRUE(
        f.engine->tokenize(Engine::render_chat(clean, think_mode::on, 4096), true, &b).ok());
    EXPECT_EQ(a, b);
    EXPECT_EQ(f.engine->token_bytes(-1), "");
}

}  // namespace
}  // namespace magnetar
