// The V4.1 session payload (kv/payload41) on the generated `v41-tiny` model, driven through
// graph::forward41: a timeline saved after n tokens (a ratio-2 pair pending or not, the W = 8
// rings partly filled or wrapped) and loaded into a fresh cache of any context continues
// bit-identically, DSpark drafts included, and so does the official-compatible index-key slot;
// the size formula is exact; and every malformed payload is refused with a message naming the
// field, leaving the cache empty.
#include "kv/payload41.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/null_backend.h"
#include "core/arena.h"
#include "core/error.h"
#include "core/rng.h"
#include "graph/forward41.h"
#include "kv/cache41.h"
#include "kv/v41_rig.h"
#include "model/forward_fixtures.h"
#include "model/hparams.h"
#include "model/model.h"

namespace magnetar {
namespace {

constexpr int64_t kMaxCtx = 128;
constexpr int64_t kMaxChunk = 8;
constexpr int64_t kDecode = 12;  // tokens decoded after the restore point

std::vector<int32_t> tokens_of(int n) {
    Rng rng(11);
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(rng.below(512)));
    return t;
}

// The model, a CPU backend and scratch for any cache up to kMaxCtx tokens.
struct rig : test::v41_rig {
    explicit rig(const std::string& weights) : v41_rig(weights, kMaxCtx, kMaxChunk, false) {}

    // Evaluates positions [p0, p1) in chunks of `chunk`; returns the logits after each chunk,
    // concatenated.
    std::vector<float> eval(kv::cache41& c, const std::vector<int32_t>& toks, int64_t p0,
                            int64_t p1, int64_t chunk, bool official = false) {
        return v41_rig::eval(c, toks, p0, p1, chunk, official, false);
    }

    std::vector<uint8_t> save(const kv::cache41& c, const std::vector<int32_t>& toks, int64_t n,
                              const std::vector<float>& logits, int64_t chunk = 5) {
        std::vector<uint8_t> bytes;
        const byte_sink sink = [&](const void* p, size_t k) {
            const auto* b = static_cast<const uint8_t*>(p);
            bytes.insert(bytes.end(), b, b + k);
            return true;
        };
        kv::write_payload41(
            *be, hp(), c, chunk, std::span<const int32_t>(toks.data(), static_cast<size_t>(n)),
            std::span<const float>(logits.data() + logits.size() - hp().n_vocab, hp().n_vocab),
            sink);
        return bytes;
    }

    void load(kv::cache41& c, const std::vector<uint8_t>& bytes, std::vector<int32_t>* toks,
              std::vector<float>* logits, const hparams* other = nullptr) {
        size_t at = 0;
        const byte_source source = [&](void* p, size_t k) {
            if (at + k > bytes.size()) return false;
            std::memcpy(p, bytes.data() + at, k);
            at += k;
            return true;
        };
        kv::read_payload41(*be, other ? *other : hp(), c, source, bytes.size(), toks, logits);
    }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Saves after n tokens, restores into fresh caches of several contexts and decodes kDecode
// more tokens: the same bits as the uninterrupted run.
void expect_round_trip(const std::string& weights, int64_t n, bool official) {
    rig r(weights);
    const std::vector<int32_t> toks = tokens_of(static_cast<int>(n + kDecode));
    const int64_t chunk = official ? 1 : 5;
    kv::cache41 a(*r.be, r.hp(), 64, false);
    const std::vector<float> pre = r.eval(a, toks, 0, n, chunk, official);
    const std::vector<uint8_t> bytes = r.save(a, toks, n, pre);
    EXPECT_EQ(bytes.size(), kv::payload41_size(r.hp(), a, n));
    const int32_t slot = a.runtime().published_index_k;
    if (official) {
        // The ratio-1 source publishes on every token: the slot is held at the restore point.
        ASSERT_NE(slot, -1);
    }
    const std::vector<float> want = r.eval(a, toks, n, n + kDecode, 1, official);

    for (int64_t ctx : {n + kDecode, int64_t{64}, kMaxCtx}) {
        SCOPED_TRACE("n " + std::to_string(n) + ", restored into a context of " +
                     std::to_string(ctx));
        kv::cache41 b(*r.be, r.hp(), ctx, false);
        std::vector<int32_t> got_toks;
        std::vector<float> got_logits;
        r.load(b, bytes, &got_toks, &got_logits);
        EXPECT_EQ(got_toks, std::vector<int32_t>(toks.begin(), toks.begin() + n));
        EXPECT_TRUE(
            same_bits(got_logits, std::vector<float>(pre.end() - r.hp().n_vocab, pre.end())));
        EXPECT_EQ(b.runtime().published_index_k, slot);
        // The payload of the restored timeline is the same bytes, but for the context field.
        std::vector<uint8_t> again = r.save(b, toks, n, got_logits);
        ASSERT_EQ(again.size(), bytes.size());
        const uint32_t ctx32 = static_cast<uint32_t>(ctx);
        EXPECT_EQ(std::memcmp(again.data() + 8, &ctx32, 4), 0);
        std::memcpy(again.data() + 8, bytes.data() + 8, 4);
        EXPECT_EQ(again, bytes);
        const std::vector<float> got = r.eval(b, toks, n, n + kDecode, 1, official);
        EXPECT_TRUE(same_bits(got, want)) << "continuation after the restore differs";
    }
}

TEST(Payload41, RoundTripContinuesBitIdenticalLossless) {
    for (int64_t n : {5, 21, 22}) expect_round_trip("lossless", n, false);
}

TEST(Payload41, RoundTripContinuesBitIdenticalPublished) {
    for (int64_t n : {7, 21, 22}) expect_round_trip("published", n, false);
}

TEST(Payload41, OfficialIndexKeySlotSurvives) {
    for (int64_t n : {21, 22}) expect_round_trip("lossless", n, true);
    // The slot matters: restored with it cleared, the continuation takes another path (at the
    // even position 22 the ratio-2 sources emit no latent, so layer 1 reads the slot's keys).
    rig r("lossless");
    const int64_t n = 22;
    const std::vector<int32_t> toks = tokens_of(static_cast<int>(n + kDecode));
    kv::cache41 a(*r.be, r.hp(), 64, false);
    const std::vector<float> pre = r.eval(a, toks, 0, n, 1, true);
    const std::vector<uint8_t> bytes = r.save(a, toks, n, pre);
    const std::vector<float> want = r.eval(a, toks, n, n + kDecode, 1, true);
    kv::cache41 b(*r.be, r.hp(), 64, false);
    std::vector<int32_t> t;
    std::vector<float> l;
    r.load(b, bytes, &t, &l);
    ASSERT_NE(b.runtime().published_index_k, -1);
    b.runtime().published_index_k = -1;
    EXPECT_FALSE(same_bits(r.eval(b, toks, n, n + kDecode, 1, true), want));
}

TEST(Payload41, SizeIsExact) {
    rig r("lossless");
    const hparams& hp = r.hp();
    const std::vector<int32_t> toks = tokens_of(24);
    for (bool dspark : {false, true}) {
        kv::cache41 c(*r.be, hp, 64, dspark);
        int64_t p = 0;
        for (int64_t n : {1, 2, 3, 8, 9, 21, 24}) {
            const std::vector<float> lg = r.eval(c, toks, p, n, 4);
            p = n;
            const std::vector<uint8_t> bytes = r.save(c, toks, n, lg);
            EXPECT_EQ(bytes.size(), kv::payload41_size(hp, c, n)) << "n " << n;
        }
    }
    // By hand for v41-tiny at n = 21 without DSpark rings: 19 fields and 3 x 5 source fields,
    // 21 token ids, 512 logits, 21 history entries; 8 blocks x 8 window rows of 66 B; sources
    // 1 and 3 (r = 2): 10 rows of 36 + 34 B and one pending pair row of 2 x 64 floats each;
    // source 4 (r = 1): 21 rows of 70 B.
    kv::cache41 c(*r.be, hp, 64, false);
    const uint64_t want = 4 * 19 + 4 * 15 + 4 * 21 + 4 * 512 + 8 * 21 + 8 * 8 * 66 +
                          2 * (10 * 70 + 2 * 64 * 4) + 21 * 70;
    EXPECT_EQ(kv::payload41_size(hp, c, 21), want);
    // DSpark adds its 2 stages' rings.
    kv::cache41 d(*r.be, hp, 64, true);
    EXPECT_EQ(kv::payload41_size(hp, d, 21), want + 2 * 8 * 66);

    // The released V4.1 Flash shape at 2048 tokens: 156 bytes of fields, 8,192 of token ids,
    // 517,120 of logits, 16,384 of history, 43 rings of 128 x 528 B (2,906,112), and 3 x 1024
    // ratio-2 plus 2048 ratio-1 entries of 288 + 68 B (1,822,720). An odd count adds a pending
    // row pair for each ratio-2 source (3 x 2 x 512 floats); without DSpark 3 rings go.
    backend::null_backend nb;
    const hparams flash = preset_v41_flash();
    kv::cache41 fd(nb, flash, 4096, true);
    kv::cache41 fp(nb, flash, 4096, false);
    EXPECT_EQ(kv::payload41_size(flash, fd, 2048), 5270684u);
    EXPECT_EQ(kv::payload41_size(flash, fd, 2049), 5283340u);
    EXPECT_EQ(kv::payload41_size(flash, fp, 2048), 5067932u);
}

TEST(Payload41, DSparkDraftAfterRestoreIsTheSame) {
    rig r("lossless");
    const hparams& hp = r.hp();
    ASSERT_GT(hp.n_dspark(), 0u);
    const int64_t n = 21;
    const std::vector<int32_t> toks = tokens_of(static_cast<int>(n + kDecode + 1));
    kv::cache41 a(*r.be, hp, 64, true);
    const std::vector<float> pre = r.eval(a, toks, 0, n, 5);
    const std::vector<uint8_t> bytes = r.save(a, toks, n, pre);
    EXPECT_EQ(bytes.size(), kv::payload41_size(hp, a, n));
    // Uninterrupted: a draft after every position from n - 1 on.
    std::vector<graph::draft41> want;
    std::vector<float> want_logits;
    for (int64_t p = n; p <= n + kDecode; ++p) {
        want.push_back(r.fwd->draft(p - 1, toks[static_cast<size_t>(p)], a, *r.ar));
        if (p < n + kDecode) {
            const std::vector<float> lg = r.eval(a, toks, p, p + 1, 1);
            want_logits.insert(want_logits.end(), lg.begin(), lg.end());
        }
    }
    kv::cache41 b(*r.be, hp, 40, true);
    std::vector<int32_t> t;
    std::vector<float> l;
    r.load(b, bytes, &t, &l);
    std::vector<float> got_logits;
    for (int64_t p = n; p <= n + kDecode; ++p) {
        const graph::draft41 d = r.fwd->draft(p - 1, toks[static_cast<size_t>(p)], b, *r.ar);
        const graph::draft41& w = want[static_cast<size_t>(p - n)];
        EXPECT_EQ(d.tokens, w.tokens) << "draft after position " << p - 1;
        EXPECT_TRUE(same_bits(d.logits, w.logits)) << "draft after position " << p - 1;
        EXPECT_TRUE(same_bits(d.confidence, w.confidence)) << "draft after position " << p - 1;
        if (p < n + kDecode) {
            const std::vector<float> lg = r.eval(b, toks, p, p + 1, 1);
            got_logits.insert(got_logits.end(), lg.begin(), lg.end());
        }
    }
    EXPECT_TRUE(same_bits(got_logits, want_logits));

    // Without the DSpark rings, the restored rings would be empty: the draft would read zeros.
    // The check that this test can fail: a cleared stage ring changes the draft.
    {
        kv::cache41 e(*r.be, hp, 64, true);
        r.load(e, bytes, &t, &l);
        const tensor& ring = e.layer(hp.n_layer).ring;  // [W, Dh + Dh/32] I8
        const std::vector<uint8_t> zeros(tensor_bytes(ring.type, ring.ne[0], ring.ne[1]), 0);
        r.be->upload(ring, zeros.data());
        const graph::draft41 d = r.fwd->draft(n - 1, toks[static_cast<size_t>(n)], e, *r.ar);
        EXPECT_FALSE(same_bits(d.logits, want[0].logits));
    }

    // A payload with the rings loads into a session without DSpark (the rings are skipped) and
    // the backbone continues bit-identically.
    kv::cache41 c(*r.be, hp, 64, false);
    r.load(c, bytes, &t, &l);
    EXPECT_TRUE(same_bits(r.eval(c, toks, n, n + kDecode, 1), want_logits));

    // One without them is refused by a session that drafts, naming the field.
    kv::cache41 plain(*r.be, hp, 64, false);
    const std::vector<float> pre2 = r.eval(plain, toks, 0, n, 7);
    const std::vector<uint8_t> no_rings = r.save(plain, toks, n, pre2);
    EXPECT_EQ(no_rings.size() + 2 * 8 * 66, bytes.size());
    kv::cache41 f(*r.be, hp, 64, true);
    try {
        r.load(f, no_rings, &t, &l);
        ADD_FAILURE() << "a payload without DSpark rings loaded into a DSpark cache";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("DSpark stages is 0"), std::string::npos) << e.what();
    }
}

// ---- malformed payloads ----

struct refusal_fixture {
    rig r{"lossless"};
    int64_t n = 21;
    std::vector<int32_t> toks = tokens_of(static_cast<int>(n + kDecode));
    std::vector<uint8_t> bytes;
    std::vector<float> want;  // continuation after n

    refusal_fixture() {
        kv::cache41 a(*r.be, r.hp(), 64, false);
        const std::vector<float> pre = r.eval(a, toks, 0, n, 8);
        bytes = r.save(a, toks, n, pre);
        want = r.eval(a, toks, n, n + kDecode, 1);
    }

    // Loads `b` (size = b.size()) into a fresh cache (context ctx, or of `other` hparams) that
    // first holds a valid timeline: must throw an Error containing `needle` and leave the cache
    // empty.
    void expect_refused(const std::vector<uint8_t>& b, const std::string& needle, int64_t ctx = 64,
                        const hparams* other = nullptr) {
        SCOPED_TRACE("expecting \"" + needle + "\"");
        const hparams& hp = other ? *other : r.hp();
        kv::cache41 c(*r.be, hp, ctx, false);
        std::vector<int32_t> t;
        std::vector<float> l;
        if (!other && ctx >= n) r.load(c, bytes, &t, &l);  // some state to clear
        try {
            r.load(c, b, &t, &l, other);
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            const std::string msg = e.what();
            EXPECT_EQ(msg.rfind("session payload: ", 0), 0u) << msg;
            EXPECT_NE(msg.find(needle), std::string::npos) << msg;
        }
        EXPECT_TRUE(c.engram_history().empty());
        EXPECT_EQ(c.runtime().published_index_k, -1);
    }

    std::vector<uint8_t> with_u32(size_t offset, uint32_t v) const {
        std::vector<uint8_t> b = bytes;
        std::memcpy(b.data() + offset, &v, 4);
        return b;
    }
    std::vector<uint8_t> with_i64(size_t offset, int64_t v) const {
        std::vector<uint8_t> b = bytes;
        std::memcpy(b.data() + offset, &v, 8);
        return b;
    }
};

constexpr size_t field(int i) {
    return 4u * static_cast<size_t>(i);
}
constexpr size_t source_field(int s, int j) {
    return 4u * (19u + 5u * s + j);
}
constexpr size_t kTokensAt = 4u * (19u + 15u);

TEST(Payload41, HeaderAndCountsAreChecked) {
    refusal_fixture f;
    ASSERT_EQ(f.bytes.size(),
              kv::payload41_size(f.r.hp(), kv::cache41(*f.r.be, f.r.hp(), 64, false), f.n));
    f.expect_refused(f.with_u32(field(0), 0x34565344u), "magic is 878072644, expected 825512772");
    f.expect_refused(f.with_u32(field(1), 2), "version is 2, expected 1");
    f.expect_refused(f.with_u32(field(3), 0), "prefill chunk is 0");
    f.expect_refused(f.with_u32(field(2), 20),
                     "context is 20, expected at least the token count 21");
    f.expect_refused(f.with_u32(field(4), 0), "token count is 0");
    // A token count that disagrees with the other fields.
    f.expect_refused(f.with_u32(field(4), 22), "Engram history length is 21, expected 22");
    f.expect_refused(f.with_u32(field(4), 20), "Engram history length is 21, expected 20");
    f.expect_refused(f.with_u32(field(5), 9), "layer count is 9, expected 8");
    f.expect_refused(f.with_u32(field(6), 1), "DSpark stages is 1, expected 0 or 2");
    f.expect_refused(f.with_u32(field(7), 10), "block count is 10, expected 8");
    f.expect_refused(f.with_u32(field(9), 7), "window rows is 7, expected 8");
    f.expect_refused(f.with_u32(field(12), 65), "window row bytes is 65, expected 66");
    f.expect_refused(f.with_u32(field(15), 4), "KV source count is 4, expected 3");
    f.expect_refused(f.with_u32(field(17), 0), "Engram history length is 0, expected 21");
    f.expect_refused(f.with_u32(field(18), 2), "runtime slot is 2");  // layer 2 is no KV source
    f.expect_refused(f.with_u32(field(18), 77), "runtime slot is 77");
    f.expect_refused(f.with_u32(source_field(0, 0), 2),
                     "KV source 0 (block 1) block is 2, expected 1");
    f.expect_refused(f.with_u32(source_field(1, 1), 1),
                     "KV source 1 (block 3) ratio is 1, expected 2");
    f.expect_refused(f.with_u32(source_field(1, 2), 11),
                     "KV source 1 (block 3) compressed-row count is 11, expected 10");
    f.expect_refused(f.with_u32(source_field(2, 3), 20),
                     "KV source 2 (block 4) index-row count is 20, expected 21");
    f.expect_refused(f.with_u32(source_field(0, 4), 2),
                     "KV source 0 (block 1) pending-row count is 2, expected 1");
    f.expect_refused(f.with_u32(kTokensAt + 4 * 3, 512),
                     "token 3 has id 512, outside the vocabulary");
    f.expect_refused(f.with_u32(kTokensAt + 4 * 5, 0xffffffffu), "token 5 has id 4294967295");
    const size_t hist_at = kTokensAt + 4 * 21 + 4 * 512;
    f.expect_refused(f.with_i64(hist_at + 8 * 4, 300), "Engram history entry 4 is 300, expected");
    f.expect_refused(f.with_i64(hist_at + 8 * 20, -2), "Engram history entry 20 is -2");
}

TEST(Payload41, TruncatedAndOversizedPayloadsAreRefused) {
    refusal_fixture f;
    const size_t full = f.bytes.size();
    for (size_t cut :
         {size_t{0}, size_t{3}, size_t{40}, size_t{100}, kTokensAt + 10, full / 2, full - 1}) {
        std::vector<uint8_t> b(f.bytes.begin(), f.bytes.begin() + static_cast<int64_t>(cut));
        f.expect_refused(b, cut < 4u * 19     ? "truncated in"
                            : cut < kTokensAt ? "truncated in KV source table"
                                              : "bytes, expected");
    }
    std::vector<uint8_t> longer = f.bytes;
    longer.push_back(0);
    f.expect_refused(longer, "bytes, expected " + std::to_string(full) + " for 21 tokens");
    // A source that fails part way, with the right size announced: the rows already uploaded
    // are cleared again.
    kv::cache41 c(*f.r.be, f.r.hp(), 64, false);
    size_t at = 0;
    const byte_source failing = [&](void* p, size_t k) {
        if (at + k > full - 100) return false;
        std::memcpy(p, f.bytes.data() + at, k);
        at += k;
        return true;
    };
    std::vector<int32_t> t;
    std::vector<float> l;
    try {
        kv::read_payload41(*f.r.be, f.r.hp(), c, failing, full, &t, &l);
        ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("read failed in"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(c.engram_history().empty());
    // The cache is usable after a refusal: a valid payload loads and continues exactly.
    f.r.load(c, f.bytes, &t, &l);
    EXPECT_TRUE(same_bits(f.r.eval(c, f.toks, f.n, f.n + kDecode, 1), f.want));
}

TEST(Payload41, EveryBitFlipInTheHeadIsRefusedOrHarmless) {
    refusal_fixture f;
    kv::cache41 c(*f.r.be, f.r.hp(), 64, false);
    std::vector<int32_t> t;
    std::vector<float> l;
    int refused = 0;
    for (size_t i = 0; i < kTokensAt; ++i) {
        for (int bit = 0; bit < 8; ++bit) {
            std::vector<uint8_t> b = f.bytes;
            b[i] ^= static_cast<uint8_t>(1u << bit);
            try {
                f.r.load(c, b, &t, &l);
                // Only the recorded context (when it still holds n) and prefill chunk are free.
                EXPECT_TRUE(i / 4 == 2 || i / 4 == 3) << "byte " << i << " bit " << bit;
            } catch (const Error& e) {
                ++refused;
                EXPECT_EQ(std::string(e.what()).rfind("session payload: ", 0), 0u) << e.what();
                EXPECT_TRUE(c.engram_history().empty());
            }
        }
    }
    EXPECT_GT(refused, static_cast<int>(kTokensAt * 8 - 64));
}

TEST(Payload41, OtherShapesAndShortContextsAreRefused) {
    refusal_fixture f;
    f.expect_refused(f.bytes, "token count is 21, expected 1 to 16 (this session's context)", 16);
    hparams wider = f.r.hp();
    wider.n_swa = 16;
    f.expect_refused(f.bytes, "window is 8, expected 16", 64, &wider);
    hparams vocab = f.r.hp();
    vocab.n_vocab = 600;
    vocab.v41.engram.token_map.resize(600, 0);
    f.expect_refused(f.bytes, "vocabulary is 512, expected 600", 64, &vocab);
    hparams dims = f.r.hp();
    dims.n_head_dim = 128;
    f.expect_refused(f.bytes, "head dim is 64, expected 128", 64, &dims);
    hparams sources = f.r.hp();
    sources.v41.kv_sources = {1, 4};
    f.expect_refused(f.bytes, "KV source count is 3, expected 2", 64, &sources);
    hparams ratios = f.r.hp();
    ratios.compress_ratios[3] = 4;
    f.expect_refused(f.bytes, "KV source 1 (block 3) ratio is 2, expected 4", 64, &ratios);
    hparams no_engram = f.r.hp();
    no_engram.v41.engram.layer_ids.clear();
    f.expect_refused(f.bytes, "Engram history length is 21, expected 0", 64, &no_engram);
    hparams more_layers = f.r.hp();
    more_layers.n_layer = 9;
    more_layers.compress_ratios.insert(more_layers.compress_ratios.begin() + 8, 0);
    f.expect_refused(f.bytes, "layer count is 8, expected 9", 64, &more_layers);
}

}  // namespace
}  // namespace magnetar
