// DeepSeek V4.1 through the public Engine / Session API on the generated `v41-tiny` model:
// decode, prefill and chunked prefill (chunks that split ratio-2 pairs) agree bit for bit, sync
// and rewind reuse checkpoints, a cancelled prefill rolls back, two sessions of one engine keep
// their own attention state, memory() reports the spec's global KV bytes per token, payloads
// (in memory and through the disk KV store) continue bit-identically, and what V4.1 does not
// support answers a clear status. Plus `magnetar run --tokens` / `eval-logits` on the model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "forward_fixtures.h"
#include "kvstore/kv_file.h"
#include "kvstore/kv_store.h"
#include "magnetar/engine.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

constexpr int kLen = 120;  // wraps the W = 8 windows many times, fills top-k and the pools

const std::string& v41_model() {
    return test::tiny_model("v41-tiny", "lossless");
}

// One engine per process (ctest runs every case as its own process).
Engine& v41_engine() {
    static std::unique_ptr<Engine> e = [] {
        engine_options eo;
        eo.model_path = v41_model();
        eo.n_threads = 2;
        std::unique_ptr<Engine> out;
        const status st = Engine::load(eo, &out);
        EXPECT_TRUE(st.ok()) << st.message();
        return out;
    }();
    return *e;
}

std::vector<int32_t> tokens(int n, uint64_t seed = 7) {
    Rng rng(seed);
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(rng.below(512)));
    return t;
}

std::unique_ptr<Session> session(session_options so) {
    std::unique_ptr<Session> s;
    const status st = v41_engine().create_session(so, &s);
    EXPECT_TRUE(st.ok()) << st.message();
    return s;
}

session_options opts(int64_t chunk, bool all_logits = false, int64_t n_ctx = 256) {
    session_options so;
    so.n_ctx = n_ctx;
    so.chunk_size = chunk;
    so.all_logits = all_logits;
    so.checkpoint_interval = 16;
    return so;
}

bool same(const std::vector<float>& a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Logits of every position, from one all-logits prefill of the whole sequence.
std::vector<std::vector<float>> prefill_rows(const std::vector<int32_t>& t) {
    auto s = session(opts(static_cast<int64_t>(t.size()), true));
    EXPECT_TRUE(s->eval(t).ok());
    std::vector<std::vector<float>> rows;
    for (int64_t i = 0; i < s->n_logit_rows(); ++i) {
        rows.emplace_back(s->logits_at(i).begin(), s->logits_at(i).end());
    }
    return rows;
}

TEST(V41Session, EngineInfo) {
    const model_info& i = v41_engine().info();
    EXPECT_EQ(i.arch, "deepseek41");
    EXPECT_FALSE(i.has_mtp);
    EXPECT_FALSE(i.has_tokenizer);  // v41-tiny's vocabulary is not DeepSeek's
    EXPECT_EQ(i.n_vocab, 512u);
    EXPECT_EQ(i.n_swa, 8u);
}

TEST(V41Session, DecodePrefillAndChunkedAgree) {
    const std::vector<int32_t> t = tokens(kLen);
    const auto rows = prefill_rows(t);
    ASSERT_EQ(rows.size(), static_cast<size_t>(kLen));

    // Chunks of 7 split ratio-2 pairs and cross the window.
    auto c = session(opts(7, true));
    ASSERT_TRUE(c->eval(t).ok());
    for (int i = 0; i < kLen; ++i) {
        ASSERT_TRUE(same(rows[static_cast<size_t>(i)], c->logits_at(i)))
            << "chunk 7, position " << i;
    }
    // Decode: one eval() per token.
    auto d = session(opts(64));
    for (int i = 0; i < kLen; ++i) {
        ASSERT_TRUE(d->eval(std::span<const int32_t>(&t[static_cast<size_t>(i)], 1)).ok());
        ASSERT_TRUE(same(rows[static_cast<size_t>(i)], d->logits())) << "decode, position " << i;
    }
    // eval() calls of odd lengths, each cut again at absolute multiples of 5.
    auto m = session(opts(5));
    size_t at = 0;
    for (size_t len : {3u, 1u, 11u, 2u, 40u, 63u}) {
        ASSERT_TRUE(m->eval(std::span<const int32_t>(t.data() + at, len)).ok());
        at += len;
        ASSERT_TRUE(same(rows[at - 1], m->logits())) << "after " << at << " tokens";
    }
    EXPECT_EQ(m->n_past(), kLen);
}

TEST(V41Session, SyncReusesCheckpointsAndRewindContinues) {
    const std::vector<int32_t> a = tokens(kLen);
    std::vector<int32_t> b(a.begin(), a.begin() + 40);  // diverges at position 40
    for (int32_t v : tokens(50, 99)) b.push_back(v);
    const auto rows_b = prefill_rows(b);

    auto s = session(opts(13));
    ASSERT_TRUE(s->eval(a).ok());
    EXPECT_EQ(s->checkpoint_positions(), (std::vector<int64_t>{16, 32, 48, 64, 80, 96, 112}));
    // Appending reuses the whole timeline.
    sync_result r;
    std::vector<int32_t> a2 = a;
    a2.push_back(5);
    ASSERT_TRUE(s->sync(a2, {}, &r).ok());
    EXPECT_EQ(r.reused, kLen);
    EXPECT_EQ(r.evaluated, 1);
    EXPECT_FALSE(r.from_checkpoint);
    // A list that diverges at 40 restarts from the checkpoint at 32.
    ASSERT_TRUE(s->sync(b, {}, &r).ok());
    EXPECT_TRUE(r.from_checkpoint);
    EXPECT_EQ(r.reused, 32);
    EXPECT_EQ(r.evaluated, static_cast<int64_t>(b.size()) - 32);
    EXPECT_TRUE(same(rows_b.back(), s->logits()));

    // Rewind to a checkpoint, then continue: the same bits as one prefill.
    auto w = session(opts(13));
    ASSERT_TRUE(w->eval(b).ok());
    ASSERT_TRUE(w->rewind(48).ok());
    EXPECT_EQ(w->n_past(), 48);
    EXPECT_TRUE(same(rows_b[47], w->logits()));
    ASSERT_TRUE(w->eval(std::span<const int32_t>(b.data() + 48, b.size() - 48)).ok());
    EXPECT_TRUE(same(rows_b.back(), w->logits()));
    // Sync within the checkpoints: back to 32, then the rest.
    std::vector<int32_t> c(b.begin(), b.begin() + 35);
    c.push_back(1);
    c.push_back(2);
    const auto rows_c = prefill_rows(c);
    ASSERT_TRUE(w->sync(c, {}, &r).ok());
    EXPECT_TRUE(r.from_checkpoint);
    EXPECT_EQ(r.reused, 32);
    EXPECT_TRUE(same(rows_c.back(), w->logits()));
    const status bad = w->rewind(20);
    EXPECT_EQ(bad.code(), status_code::invalid_argument);
    EXPECT_NE(bad.message().find("no checkpoint"), std::string::npos) << bad.message();
}

TEST(V41Session, CancelledPrefillRollsBackAndContinues) {
    const std::vector<int32_t> t = tokens(kLen);
    const auto rows = prefill_rows(t);
    session_options so = opts(50);
    so.checkpoint_interval = 0;  // chunks end at multiples of 50 only
    auto s = session(so);
    int polls = 0;
    eval_options eo;
    // Polled once per chunk by the session and before each of the 8 layers: the 13th poll is the
    // third layer of the second chunk.
    eo.cancel = [&] { return ++polls > 12; };
    const status st = s->eval(t, eo);
    ASSERT_EQ(st.code(), status_code::cancelled) << st.message();
    EXPECT_EQ(s->n_past(), 50);
    EXPECT_TRUE(same(rows[49], s->logits()));
    const size_t done = static_cast<size_t>(s->n_past());
    ASSERT_TRUE(s->eval(std::span<const int32_t>(t.data() + done, t.size() - done)).ok());
    EXPECT_TRUE(same(rows.back(), s->logits()));
}

TEST(V41Session, InterleavedSessionsKeepTheirOwnState) {
    const std::vector<int32_t> a = tokens(64, 1);
    const std::vector<int32_t> b = tokens(64, 2);
    const auto ra = prefill_rows(a);
    const auto rb = prefill_rows(b);
    auto sa = session(opts(16));
    auto sb = session(opts(9));
    for (size_t i = 0; i < a.size(); i += 4) {
        ASSERT_TRUE(sa->eval(std::span<const int32_t>(a.data() + i, 4)).ok());
        ASSERT_TRUE(sb->eval(std::span<const int32_t>(b.data() + i, 4)).ok());
        ASSERT_TRUE(same(ra[i + 3], sa->logits())) << "A at " << i + 3;
        ASSERT_TRUE(same(rb[i + 3], sb->logits())) << "B at " << i + 3;
    }
}

TEST(V41Session, MemoryReportsGlobalKvBytesPerToken) {
    auto s = session(opts(32, false, 256));
    const session_memory m = s->memory();
    // spec v41.md §5.4 at the tiny shape: (36 + 34) B x (1/2 + 1/2 + 1) = 140 B per token.
    EXPECT_DOUBLE_EQ(m.kv_bytes_per_token(), 140.0);
    EXPECT_EQ(m.growing_bytes, 256u * 140u);
    EXPECT_EQ(m.raw_window_bytes, 8u * 8u * 66u);  // 8 blocks x W 8 x 66 B rows
    EXPECT_GT(m.pending_bytes, 0u);
    EXPECT_EQ(m.history_bytes, 256u * 8u);
    EXPECT_EQ(m.frontier_bytes, 0u);
    EXPECT_EQ(m.cache_bytes(),
              m.growing_bytes + m.raw_window_bytes + m.pending_bytes + m.history_bytes);
    EXPECT_GT(m.scratch_bytes, 0u);
    // Checkpoints at 16 and 32, each the small state (rings, pending rows, the 4-byte runtime
    // slot) and the logits row.
    ASSERT_TRUE(s->eval(tokens(40)).ok());
    EXPECT_EQ(s->memory().checkpoint_bytes,
              2 * (m.raw_window_bytes + m.pending_bytes + 4 + 512 * 4));
}

TEST(V41Session, UnsupportedFeaturesAnswerClearly) {
    session_options so = opts(16);
    so.mtp_logits = true;
    std::unique_ptr<Session> s;
    status st = v41_engine().create_session(so, &s);
    EXPECT_EQ(st.code(), status_code::unsupported);
    EXPECT_NE(st.message().find("V4.1"), std::string::npos) << st.message();

    auto t = session(opts(16));
    ASSERT_TRUE(t->eval(tokens(20)).ok());
    std::vector<float> data;
    int64_t width = 0;
    st = t->read_state("blk.0.comp_rows", &data, &width);
    EXPECT_EQ(st.code(), status_code::unsupported);
    EXPECT_NE(st.message().find("V4.1"), std::string::npos) << st.message();
    EXPECT_EQ(t->n_mtp_rows(), 0);
    // Out-of-vocabulary ids are refused before anything runs.
    const int32_t bad = 512;
    EXPECT_EQ(t->eval(std::span<const int32_t>(&bad, 1)).code(), status_code::invalid_argument);
    EXPECT_EQ(t->n_past(), 20);
}

TEST(V41Session, DumpTapsTheForwardPass) {
    auto s = session(opts(16));
    std::vector<std::string> seen;
    int64_t rows = 0;
    s->set_dump({"blk.1.*", "result_norm"},
                [&](const std::string& name, int64_t, int64_t n, int64_t, const float*) {
                    if (std::find(seen.begin(), seen.end(), name) == seen.end())
                        seen.push_back(name);
                    if (name == "result_norm") rows += n;
                });
    ASSERT_TRUE(s->eval(tokens(20)).ok());
    EXPECT_NE(std::find(seen.begin(), seen.end(), "blk.1.attn_norm"), seen.end());
    EXPECT_NE(std::find(seen.begin(), seen.end(), "result_norm"), seen.end());
    for (const std::string& n : seen) {
        EXPECT_TRUE(n == "result_norm" || n.rfind("blk.1.", 0) == 0) << n;
    }
    EXPECT_EQ(rows, 2);  // the last row of each of the two chunks
}

TEST(V41Session, PayloadContinuesBitIdentically) {
    const std::vector<int32_t> t = tokens(kLen);
    const auto rows = prefill_rows(t);
    auto s = session(opts(13));
    ASSERT_TRUE(s->eval(std::span<const int32_t>(t.data(), 61)).ok());  // odd: a pending row
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(s->save_payload(&bytes).ok());
    EXPECT_EQ(bytes.size(), s->payload_size());
    // Into a session of another context and chunk size.
    auto r = session(opts(32, false, 200));
    const status st = r->load_payload(bytes);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(r->n_past(), 61);
    EXPECT_TRUE(same(rows[60], r->logits()));
    ASSERT_TRUE(r->eval(std::span<const int32_t>(t.data() + 61, t.size() - 61)).ok());
    EXPECT_TRUE(same(rows.back(), r->logits()));
    // A damaged payload is refused and leaves the session empty.
    std::vector<uint8_t> broken = bytes;
    broken.resize(broken.size() - 3);
    EXPECT_EQ(r->load_payload(broken).code(), status_code::bad_payload);
    EXPECT_EQ(r->n_past(), 0);
}

TEST(V41Session, PayloadRefusesTheOtherArchitecture) {
    engine_options eo;
    eo.model_path = test::tiny_model("tiny", "f32");
    eo.n_threads = 2;
    std::unique_ptr<Engine> v4;
    ASSERT_TRUE(Engine::load(eo, &v4).ok());
    EXPECT_EQ(v4->info().arch, "deepseek4");
    session_options so;
    so.n_ctx = 64;
    std::unique_ptr<Session> a;
    ASSERT_TRUE(v4->create_session(so, &a).ok());
    const std::vector<int32_t> ids = tokens(10);
    ASSERT_TRUE(a->eval(ids).ok());
    std::vector<uint8_t> v4_bytes;
    ASSERT_TRUE(a->save_payload(&v4_bytes).ok());
    auto b = session(opts(16));
    ASSERT_TRUE(b->eval(ids).ok());
    std::vector<uint8_t> v41_bytes;
    ASSERT_TRUE(b->save_payload(&v41_bytes).ok());
    EXPECT_EQ(b->load_payload(v4_bytes).code(), status_code::bad_payload);
    EXPECT_EQ(b->n_past(), 0);
    EXPECT_EQ(a->load_payload(v41_bytes).code(), status_code::bad_payload);
    EXPECT_EQ(a->n_past(), 0);
}

TEST(V41Session, DiskKvFileContinuesBitIdentically) {
    namespace fs = std::filesystem;
    const std::vector<int32_t> t = tokens(kLen);
    const auto rows = prefill_rows(t);
    const std::string dir = test::temp_dir() + "/kv-v41";
    fs::create_directories(dir);
    const kvstore::model_identity id = kvstore::identity_of_model(v41_model());
    auto s = session(opts(16));
    ASSERT_TRUE(s->eval(std::span<const int32_t>(t.data(), 75)).ok());
    std::string path;
    kvstore::write_request wr;
    const std::string key = "v41 prefix of 75 tokens";
    wr.key_text = key;
    wr.reason = kvstore::save_reason::cold;
    ASSERT_TRUE(kvstore::write_file(dir, *s, id, wr, &path).ok());
    ASSERT_TRUE(kvstore::verify_file(path).ok());

    auto r = session(opts(16));
    std::string got_key;
    const status st = kvstore::load_file(path, *r, id, &got_key);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(got_key, key);
    EXPECT_EQ(r->n_past(), 75);
    EXPECT_TRUE(same(rows[74], r->logits()));
    ASSERT_TRUE(r->eval(std::span<const int32_t>(t.data() + 75, t.size() - 75)).ok());
    EXPECT_TRUE(same(rows.back(), r->logits()));
    fs::remove_all(dir);
}

// `magnetar run --tokens` (greedy ids) and `magnetar eval-logits` on the V4.1 model give what
// the API gives. (v41-tiny has no tokenizer, so text prompts answer a clean error.)
TEST(V41Session, CliRunsTheModel) {
    const std::vector<int32_t> t = tokens(30);
    const std::string dir = test::temp_dir();
    const std::string tok_file = dir + "/v41-tokens.json";
    {
        std::ofstream f(tok_file);
        f << "[";
        for (size_t i = 0; i < t.size(); ++i) f << (i ? "," : "") << t[i];
        f << "]";
    }
    // Greedy continuation through the API (same threads; run uses the default fast products,
    // as the engine here does).
    auto s = session(opts(2048, false, 64));
    ASSERT_TRUE(s->eval(t).ok());
    std::string want;
    for (int i = 0; i < 8; ++i) {
        const int32_t next = s->argmax();
        want += (i ? " " : "") + std::to_string(next);
        if (i + 1 < 8) {
            ASSERT_TRUE(s->eval(std::span<const int32_t>(&next, 1)).ok());
        }
    }
    std::string out;
    int rc = test::run_command(
        test::magnetar_bin() + " run -m " + v41_model() + " -t 2 --tokens " + tok_file + " -n 8",
        &out);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(out.substr(0, out.find('\n')), want) << out;  // then the timing lines

    rc = test::run_command(
        test::magnetar_bin() + " eval-logits -m " + v41_model() + " -t 2 --tokens " + tok_file +
            " --mode chunked:7 --all-positions --out " + dir + "/v41-logits.f32 2>&1",
        &out);
    ASSERT_EQ(rc, 0) << out;
    const std::vector<float> got = test::read_f32(dir + "/v41-logits.f32");
    // eval-logits multiplies with float activations (exact_matmul).
    engine_options eo;
    eo.model_path = v41_model();
    eo.n_threads = 2;
    eo.exact_matmul = true;
    std::unique_ptr<Engine> exact;
    ASSERT_TRUE(Engine::load(eo, &exact).ok());
    session_options so = opts(64, true, 30);
    std::unique_ptr<Session> x;
    ASSERT_TRUE(exact->create_session(so, &x).ok());
    ASSERT_TRUE(x->eval(t).ok());
    ASSERT_EQ(got.size(), static_cast<size_t>(30 * 512));
    for (int64_t i = 0; i < 30; ++i) {
        EXPECT_EQ(std::memcmp(got.data() + i * 512, x->logits_at(i).data(), 512 * 4), 0)
            << "position " << i;
    }

    rc =
        test::run_command(test::magnetar_bin() + " run -m " + v41_model() + " -p hello 2>&1", &out);
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("tokenizer"), std::string::npos) << out;
    // The model walk needs a tokenizer too: the error points at what works without one.
    rc = test::run_command(
        test::magnetar_bin() + " bench -m " + v41_model() + " --prompt-file " + tok_file + " 2>&1",
        &out);
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("bench kv"), std::string::npos) << out;
}

}  // namespace
}  // namespace magnetar
