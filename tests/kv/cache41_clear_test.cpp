// kv::cache41::clear_small on the generated `v41-tiny` model: a cache whose every byte is
// garbage (NaN patterns in the rings, packed rows, pending rows; a stale history and runtime
// slot), or one that ran another timeline, evaluates bit-identically to a fresh cache after
// clear_small, in chunked prefill and decode, in the official-compatible index-key mode and for
// DSpark drafts; its small state equals a fresh cache's; the garbage does reach the logits when
// written rows are poisoned (so the comparison can fail); and Session::reset / a sync without a
// usable checkpoint (which use clear_small) give a fresh session's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/arena.h"
#include "core/rng.h"
#include "graph/forward41.h"
#include "kv/cache41.h"
#include "kv/v41_rig.h"
#include "magnetar/engine.h"
#include "model/forward_fixtures.h"
#include "model/hparams.h"
#include "model/model.h"

namespace magnetar {
namespace {

constexpr int64_t kCtx = 96;
constexpr int64_t kMaxChunk = 8;

std::vector<int32_t> tokens_of(int n, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(rng.below(512)));
    return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Every byte of a tensor set to `byte` (0xFF: NaN as F32, as E4M3 codes and as UE8M0 scales).
void poison(backend::backend& be, const tensor& t, uint8_t byte, int64_t row0 = 0,
            int64_t rows = -1) {
    if (!t) return;
    if (rows < 0) rows = t.n_rows() - row0;
    const tensor v = view_rows(t, row0, rows);
    const std::vector<uint8_t> junk(tensor_bytes(v.type, v.ne[0], v.n_rows()), byte);
    be.upload(v, junk.data());
}

// The whole cache buffer and the host state as garbage.
void fill_garbage(backend::backend& be, kv::cache41& c) {
    for (uint32_t b = 0; b < c.n_blocks(); ++b) {
        const kv::layer41_state& s = c.layer(b);
        poison(be, s.ring, 0xFF);
        poison(be, s.comp_rows, 0xFF);
        poison(be, s.idx_rows, 0xFF);
        poison(be, s.state_a, 0xFF);
        poison(be, s.state_b, 0xFF);
    }
    c.engram_history().assign(17, 5);
    c.runtime().published_index_k = 3;
}

struct rig : test::v41_rig {
    rig() : v41_rig("lossless", kCtx, kMaxChunk, true) {}

    // Logits of every position of [p0, p1), in chunks of `chunk`.
    std::vector<float> eval(kv::cache41& c, const std::vector<int32_t>& toks, int64_t p0,
                            int64_t p1, int64_t chunk, bool official = false) {
        return v41_rig::eval(c, toks, p0, p1, chunk, official, true);
    }

    // A prefill of n tokens in chunks of 5, then `decode` single-token steps (with a DSpark
    // draft after each when the cache holds the rings): every logit and draft output.
    std::vector<float> timeline(kv::cache41& c, const std::vector<int32_t>& toks, int64_t n,
                                int64_t decode, bool official) {
        std::vector<float> out = eval(c, toks, 0, n, 5, official);
        for (int64_t p = n; p < n + decode; ++p) {
            const std::vector<float> row = eval(c, toks, p, p + 1, 1, official);
            out.insert(out.end(), row.begin(), row.end());
            if (c.n_blocks() > hp().n_layer) {
                const graph::draft41 d = fwd->draft(p, toks[static_cast<size_t>(p + 1)], c, *ar);
                out.insert(out.end(), d.logits.begin(), d.logits.end());
                out.insert(out.end(), d.confidence.begin(), d.confidence.end());
            }
        }
        return out;
    }
};

TEST(Cache41ClearSmall, GarbageCacheMatchesFreshBitForBit) {
    rig r;
    const std::vector<int32_t> toks = tokens_of(80, 3);
    for (bool dspark : {false, true}) {
        for (bool official : {false, true}) {
            SCOPED_TRACE(std::string("dspark ") + (dspark ? "on" : "off") + ", official " +
                         (official ? "on" : "off"));
            kv::cache41 fresh(*r.be, r.hp(), kCtx, dspark);
            // 43 prefilled tokens (a ratio-2 pair pending, rings wrapped, more visible entries
            // than top-k and candidate blocks), then 30 decode steps.
            const std::vector<float> want = r.timeline(fresh, toks, 43, 30, official);

            kv::cache41 dirty(*r.be, r.hp(), kCtx, dspark);
            fill_garbage(*r.be, dirty);
            dirty.clear_small();
            EXPECT_TRUE(dirty.engram_history().empty());
            EXPECT_EQ(dirty.runtime().published_index_k, -1);
            const std::vector<float> got = r.timeline(dirty, toks, 43, 30, official);
            EXPECT_TRUE(same_bits(got, want)) << "garbage rows were read after clear_small";
        }
    }
}

TEST(Cache41ClearSmall, AnotherTimelineThenClearSmallMatchesFresh) {
    rig r;
    const std::vector<int32_t> other = tokens_of(90, 5);
    const std::vector<int32_t> toks = tokens_of(60, 6);
    kv::cache41 fresh(*r.be, r.hp(), kCtx, true);
    std::vector<uint8_t> empty_small;
    fresh.save_small(empty_small);
    const std::vector<float> want = r.timeline(fresh, toks, 21, 30, false);

    // The reused cache ran a longer timeline first (official mode: the slot is held).
    kv::cache41 reused(*r.be, r.hp(), kCtx, true);
    r.timeline(reused, other, 57, 30, true);
    ASSERT_NE(reused.runtime().published_index_k, -1);
    reused.clear_small();
    std::vector<uint8_t> small;
    reused.save_small(small);
    EXPECT_EQ(small, empty_small) << "the small state after clear_small is not a fresh one";
    EXPECT_TRUE(same_bits(r.timeline(reused, toks, 21, 30, false), want));
}

// The comparison above can fail: written rows that the attention reads, poisoned, change the
// logits (so unwritten garbage that was read would show).
TEST(Cache41ClearSmall, PoisonedWrittenRowsReachTheLogits) {
    rig r;
    const std::vector<int32_t> toks = tokens_of(40, 8);
    const int64_t n = 30;
    kv::cache41 a(*r.be, r.hp(), kCtx, false);
    r.eval(a, toks, 0, n, 5);
    std::vector<uint8_t> small;
    a.save_small(small);
    const std::vector<float> want = r.eval(a, toks, n, n + 1, 1);

    const int32_t src = r.hp().kv_source(r.hp().n_layer - 1);  // the ratio-1 group
    ASSERT_GE(src, 0);
    const int64_t written = n / r.hp().compress_ratio(static_cast<uint32_t>(src));
    for (const char* what : {"compressed rows", "index keys", "ring"}) {
        SCOPED_TRACE(what);
        kv::cache41 b(*r.be, r.hp(), kCtx, false);
        r.eval(b, toks, 0, n, 5);
        const kv::layer41_state& s = b.layer(static_cast<uint32_t>(src));
        if (std::string(what) == "compressed rows") poison(*r.be, s.comp_rows, 0xFF, 0, written);
        if (std::string(what) == "index keys") poison(*r.be, s.idx_rows, 0x77, 0, written);
        if (std::string(what) == "ring") poison(*r.be, s.ring, 0xFF);
        EXPECT_FALSE(same_bits(r.eval(b, toks, n, n + 1, 1), want));
    }
}

// Session::reset and a sync that keeps no prefix (no checkpoint to restore) clear the timeline
// with clear_small: the next tokens give a fresh session's logits.
TEST(Cache41ClearSmall, SessionResetAndSyncFromScratchMatchFresh) {
    engine_options eo;
    eo.model_path = test::tiny_model("v41-tiny", "lossless");
    eo.n_threads = 2;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::load(eo, &e).ok());
    session_options so;
    so.n_ctx = 128;
    so.chunk_size = 7;
    so.all_logits = true;
    so.checkpoint_interval = 0;
    auto make = [&] {
        std::unique_ptr<Session> s;
        EXPECT_TRUE(e->create_session(so, &s).ok());
        return s;
    };
    auto rows = [](const Session& s) {
        std::vector<float> out;
        for (int64_t i = 0; i < s.n_logit_rows(); ++i) {
            out.insert(out.end(), s.logits_at(i).begin(), s.logits_at(i).end());
        }
        return out;
    };
    const std::vector<int32_t> other = tokens_of(110, 12);
    const std::vector<int32_t> toks = tokens_of(70, 13);
    auto fresh = make();
    ASSERT_TRUE(fresh->eval(toks).ok());
    const std::vector<float> want = rows(*fresh);

    auto s = make();
    ASSERT_TRUE(s->eval(other).ok());
    s->reset();
    ASSERT_TRUE(s->eval(toks).ok());
    EXPECT_TRUE(same_bits(rows(*s), want)) << "after reset";

    auto t = make();
    ASSERT_TRUE(t->eval(other).ok());
    sync_result sr;
    ASSERT_TRUE(t->sync(toks, {}, &sr).ok());  // diverges at position 0
    EXPECT_EQ(sr.evaluated, static_cast<int64_t>(toks.size()));
    EXPECT_FALSE(sr.from_checkpoint);
    const std::vector<float> last(t->logits().begin(), t->logits().end());
    EXPECT_TRUE(same_bits(last, std::vector<float>(want.end() - t->n_vocab(), want.end())))
        << "after a sync from scratch";
}

}  // namespace
}  // namespace magnetar
