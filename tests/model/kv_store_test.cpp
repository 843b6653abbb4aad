// Disk KV cache files and directory on the tiny model: save -> load continues bit-identically,
// longest-prefix lookup, and faults: flipped bytes, truncation, foreign version / model,
// leftovers of killed writers, a full disk (file-size limit) — nothing corrupt is ever loaded
// and every bad file is removed. Plus the eviction score and budget of protocol §6.7.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvstore/kv_file.h"
#include "kvstore/kv_store.h"
#include "magnetar/engine.h"
#include "model/forward_fixtures.h"

namespace fs = std::filesystem;

namespace magnetar::kvstore {
namespace {

struct env {
    std::unique_ptr<Engine> engine;
    std::string model;
    model_identity id;
    std::string dir;

    explicit env(const std::string& preset = "tiny") {
        model = test::tiny_model(preset, "f32");
        engine_options eo;
        eo.model_path = model;
        eo.n_threads = 2;
        const status st = Engine::load(eo, &engine);
        EXPECT_TRUE(st.ok()) << st.message();
        id = identity_of_model(model);
        dir = (fs::temp_directory_path() /
               ("magnetar-kv-" + std::to_string(::getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                  .string();
        fs::remove_all(dir);
    }
    ~env() { fs::remove_all(dir); }

    std::unique_ptr<Session> session(int64_t n_ctx = 512) const {
        session_options so;
        so.n_ctx = n_ctx;
        std::unique_ptr<Session> s;
        EXPECT_TRUE(engine->create_session(so, &s).ok());
        return s;
    }
    store open(uint64_t budget = 1ull << 30, uint32_t min_tokens = 16) const {
        store_options o;
        o.dir = dir;
        o.budget_bytes = budget;
        o.min_tokens = min_tokens;
        return store(o, id, [](const std::string& l) { std::fprintf(stderr, "  [log] %s\n", l.c_str()); });
    }
};

const std::vector<int32_t>& seq() {
    static const std::vector<int32_t> t = test::test_tokens(test::kTokenSeed, test::kSeqLen);
    return t;
}
std::vector<int32_t> head(size_t n) { return {seq().begin(), seq().begin() + static_cast<long>(n)}; }
std::vector<float> logits_of(const Session& s) { return {s.logits().begin(), s.logits().end()}; }

// Key text standing in for a rendered prefix: one letter per token.
std::string key_for(size_t n) {
    std::string k;
    for (size_t i = 0; i < n; ++i) k += static_cast<char>('a' + seq()[i] % 26);
    return k;
}

size_t file_count(const std::string& dir) {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
    return n;
}

TEST(KvFile, SaveLoadContinuesBitIdentically) {
    env e;
    store st = e.open();
    auto a = e.session();
    ASSERT_TRUE(a->eval(head(200)).ok());
    tool_map tools = {{"call_1", "<dsml>one</dsml>"}, {"call_2", "<dsml>two</dsml>"}};
    ASSERT_TRUE(st.save(*a, key_for(200), save_reason::cold, 0, &tools));
    ASSERT_EQ(st.entries().size(), 1u);
    const file_info fi = st.entries()[0];
    EXPECT_EQ(fi.name, sha1_hex(key_for(200)));
    EXPECT_EQ(fi.header.tokens, 200u);
    EXPECT_EQ(fi.header.reason, save_reason::cold);
    EXPECT_EQ(fi.header.hits, 0u);
    EXPECT_TRUE(verify_file(fi.path).ok());
    const std::vector<int32_t> rest(seq().begin() + 200, seq().end());
    ASSERT_TRUE(a->eval(rest).ok());

    // A new store instance (a restart) finds it by prefix of a longer text.
    store again = e.open();
    auto b = e.session();
    store::hit h;
    ASSERT_TRUE(again.load_longest_prefix(key_for(300), *b, &h));
    EXPECT_EQ(h.tokens, 200u);
    EXPECT_EQ(h.key_text, key_for(200));
    EXPECT_EQ(h.tools, tools);
    EXPECT_EQ(b->n_past(), 200);
    ASSERT_TRUE(b->eval(rest).ok());
    EXPECT_EQ(logits_of(*b), logits_of(*a));
    EXPECT_EQ(again.entries()[0].header.hits, 1u);  // the hit was recorded in place
    EXPECT_TRUE(verify_file(fi.path).ok());          // and the checksum still holds
    // A text that does not extend the key finds nothing.
    auto c = e.session();
    EXPECT_FALSE(again.load_longest_prefix("zzz" + key_for(250), *c, nullptr));
    EXPECT_EQ(c->n_past(), 0);
}

TEST(KvFile, LongestPrefixWinsAndShortOnesAreIgnored) {
    env e;
    store st = e.open(1ull << 30, 64);
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(40)).ok());
    EXPECT_FALSE(st.save(*s, key_for(40), save_reason::cold));  // below min_tokens
    ASSERT_TRUE(s->eval(std::vector<int32_t>(seq().begin() + 40, seq().begin() + 100)).ok());
    ASSERT_TRUE(st.save(*s, key_for(100), save_reason::continued));
    ASSERT_TRUE(s->eval(std::vector<int32_t>(seq().begin() + 100, seq().begin() + 180)).ok());
    ASSERT_TRUE(st.save(*s, key_for(180), save_reason::continued));
    auto b = e.session();
    store::hit h;
    ASSERT_TRUE(st.load_longest_prefix(key_for(250), *b, &h));
    EXPECT_EQ(h.tokens, 180u);
    ASSERT_TRUE(st.load_longest_prefix(key_for(150), *b, &h));
    EXPECT_EQ(h.tokens, 100u);
}

// Every single-byte corruption outside the mutable header fields is detected at load, the file
// removed, and the session left empty; the store keeps working.
TEST(KvFile, FlippedBytesAreNeverLoaded) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(150)).ok());
    std::mt19937 rng(7);
    for (int round = 0; round < 12; ++round) {
        store st = e.open();
        ASSERT_TRUE(st.save(*s, key_for(150), save_reason::cold));
        const std::string path = st.entries()[0].path;
        const uint64_t size = fs::file_size(path);
        uint64_t at;
        do {
            at = std::uniform_int_distribution<uint64_t>(0, size - 1)(rng);
        } while (at >= 12 && at < 16) ;  // hits: mutable by design
        if (at >= 32 && at < 40) at = 50;  // last-used: mutable by design
        {
            std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
            f.seekg(static_cast<std::streamoff>(at));
            char c = 0;
            f.read(&c, 1);
            c = static_cast<char>(c ^ (1 << (round % 8)));
            f.seekp(static_cast<std::streamoff>(at));
            f.write(&c, 1);
        }
        auto b = e.session();
        bool loaded = false;
        try {
            store again = e.open();  // the scan may already reject it
            loaded = again.load_longest_prefix(key_for(150), *b, nullptr);
        } catch (...) {
            FAIL() << "store threw";
        }
        EXPECT_FALSE(loaded) << "byte " << at;
        EXPECT_EQ(b->n_past(), 0) << "byte " << at;
        EXPECT_FALSE(fs::exists(path)) << "byte " << at;
    }
}

TEST(KvFile, TruncatedFilesAreRemovedAtScan) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(120)).ok());
    for (uint64_t keep : {0ull, 10ull, 48ull, 60ull, 5000ull}) {
        store st = e.open();
        ASSERT_TRUE(st.save(*s, key_for(120), save_reason::cold));
        const std::string path = st.entries()[0].path;
        const uint64_t size = fs::file_size(path);
        fs::resize_file(path, std::min(keep, size - 1));
        store again = e.open();
        EXPECT_TRUE(again.entries().empty()) << keep;
        EXPECT_FALSE(fs::exists(path)) << keep;
    }
}

TEST(KvFile, ForeignModelAndVersionAreRemoved) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(100)).ok());
    {
        store st = e.open();
        ASSERT_TRUE(st.save(*s, key_for(100), save_reason::cold));
    }
    // Another model (the MTP variant has other tensors) sees a foreign file.
    const model_identity other = identity_of_model(test::tiny_model("tiny-mtp", "f32"));
    ASSERT_NE(other.fingerprint, e.id.fingerprint);
    store_options o;
    o.dir = e.dir;
    o.min_tokens = 16;
    { store foreign(o, other); EXPECT_TRUE(foreign.entries().empty()); }
    EXPECT_EQ(file_count(e.dir), 0u);
    // A future version byte.
    {
        store st = e.open();
        ASSERT_TRUE(st.save(*s, key_for(100), save_reason::cold));
        std::fstream f(st.entries()[0].path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(3);
        f.put(2);
    }
    store again = e.open();
    EXPECT_TRUE(again.entries().empty());
    EXPECT_EQ(file_count(e.dir), 0u);
}

// Writers killed at random points leave only temp files, which the next scan removes; the
// complete files that exist are always valid.
TEST(KvFile, KilledWritersNeverLeaveACorruptEntry) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(300)).ok());
    fs::create_directories(e.dir);
    std::mt19937 rng(3);
    for (int round = 0; round < 8; ++round) {
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            for (int i = 0;; ++i) {
                write_request req;
                req.key_text = key_for(300);
                write_file(e.dir, *s, e.id, req);
            }
        }
        ::usleep(std::uniform_int_distribution<int>(1000, 60000)(rng));
        ::kill(pid, SIGKILL);
        int wst = 0;
        ::waitpid(pid, &wst, 0);
        store st = e.open();
        for (const file_info& fi : st.entries()) EXPECT_TRUE(verify_file(fi.path).ok());
        for (const auto& f : fs::directory_iterator(e.dir))
            EXPECT_EQ(f.path().string().find(".tmp."), std::string::npos) << f.path();
    }
}

// A full disk (here: a file-size limit in a child) fails the write cleanly: no file, no temp.
TEST(KvFile, FullDiskFailsCleanly) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(200)).ok());
    fs::create_directories(e.dir);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::signal(SIGXFSZ, SIG_IGN);
        rlimit rl{100000, 100000};
        ::setrlimit(RLIMIT_FSIZE, &rl);
        write_request req;
        req.key_text = key_for(200);
        const status st = write_file(e.dir, *s, e.id, req);
        ::_exit(st.ok() ? 0 : 3);
    }
    int wst = 0;
    ::waitpid(pid, &wst, 0);
    ASSERT_TRUE(WIFEXITED(wst));
    EXPECT_EQ(WEXITSTATUS(wst), 3);
    EXPECT_EQ(file_count(e.dir), 0u);
    store st = e.open();
    EXPECT_TRUE(st.entries().empty());
}

TEST(KvStore, BudgetEvictsTheLowestScoreAndProtectsTheNewFile) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(100)).ok());
    store probe = e.open();
    ASSERT_TRUE(probe.save(*s, key_for(100), save_reason::cold));
    const uint64_t one = probe.entries()[0].file_size;
    fs::remove_all(e.dir);
    // Room for two files: the third save evicts the least valuable older one.
    store st = e.open(2 * one + one / 2);
    ASSERT_TRUE(st.save(*s, key_for(100), save_reason::cold));
    ASSERT_TRUE(st.save(*s, key_for(100) + "x", save_reason::cold));
    auto b = e.session();
    ASSERT_TRUE(st.load_longest_prefix(key_for(100) + "xyz", *b, nullptr));  // a hit for "x"
    ASSERT_TRUE(st.save(*s, key_for(100) + "y", save_reason::cold));
    std::vector<std::string> names;
    for (const file_info& fi : st.entries()) names.push_back(fi.name);
    EXPECT_EQ(names.size(), 2u);
    EXPECT_EQ(std::count(names.begin(), names.end(), sha1_hex(key_for(100))), 0);
    EXPECT_LE(st.total_bytes(), 2 * one + one / 2);
    // A file larger than the whole budget is not written at all.
    store tiny = e.open(one / 2);
    EXPECT_TRUE(tiny.entries().empty());  // the scan enforced the smaller budget
    EXPECT_FALSE(tiny.save(*s, key_for(100), save_reason::cold));
}

TEST(KvStore, EvictionScoreFollowsTheSpec) {
    file_info a;
    a.header.tokens = 1000;
    a.file_size = 1000000;
    a.header.hits = 4;
    a.header.last_used = 1000000;
    EXPECT_DOUBLE_EQ(eviction_score(a, 1000000), 5.0 * 1000 / 1000000);
    EXPECT_NEAR(eviction_score(a, 1000000 + 21600), 3.0 * 1000 / 1000000, 1e-15);
    a.header.last_used = 0;
    a.header.created = 0;
    EXPECT_DOUBLE_EQ(eviction_score(a, 1000000), 1.0 * 1000 / 1000000);
}

TEST(KvFile, Sha1MatchesTheSpecExample) {
    EXPECT_EQ(sha1_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
    EXPECT_EQ(file_name_for("abc").size(), 43u);
}

}  // namespace
}  // namespace magnetar::kvstore
