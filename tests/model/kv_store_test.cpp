// Disk KV cache files and directory on the tiny model: save -> load continues bit-identically,
// longest-prefix lookup, and faults: flipped bytes, truncation, foreign version, leftovers of
// killed writers, a full disk (file-size limit) — nothing corrupt is ever loaded and every bad
// file is removed. Hostile directories: another model's entries (left alone), FIFOs / links /
// directories under our names (skipped, never opened in a blocking way or followed), planted
// temp names, unsafe directory modes and owners. Plus the eviction score and budget of §6.7.
#include "kvstore/kv_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kvstore/kv_file.h"
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
        return store(o, id,
                     [](const std::string& l) { std::fprintf(stderr, "  [log] %s\n", l.c_str()); });
    }
};

const std::vector<int32_t>& seq() {
    static const std::vector<int32_t> t = test::test_tokens(test::kTokenSeed, test::kSeqLen);
    return t;
}
std::vector<int32_t> head(size_t n) {
    return {seq().begin(), seq().begin() + static_cast<long>(n)};
}
std::vector<float> logits_of(const Session& s) {
    return {s.logits().begin(), s.logits().end()};
}

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
    EXPECT_TRUE(verify_file(fi.path).ok());         // and the checksum still holds
    // A text that does not extend the key finds nothing.
    auto c = e.session();
    EXPECT_FALSE(again.load_longest_prefix("zzz" + key_for(250), *c, nullptr));
    EXPECT_EQ(c->n_past(), 0);
}

// The tool-id map alone (what a restarting server preloads for exact replay): read without the
// payload, the same entries as a full load, oldest-used file first across files; a file without
// a map gives none; a damaged map is an error naming it, and stored_tools() skips that file.
TEST(KvFile, ToolMapsAreReadWithoutThePayload) {
    env e;
    store st = e.open();
    auto a = e.session();
    ASSERT_TRUE(a->eval(head(120)).ok());
    const tool_map first = {{"call_1", "<dsml>one</dsml>"}, {"call_2", "<dsml>one</dsml>"}};
    ASSERT_TRUE(st.save(*a, key_for(120), save_reason::cold, 0, &first));
    ASSERT_TRUE(a->eval(std::vector<int32_t>(seq().begin() + 120, seq().begin() + 160)).ok());
    ASSERT_TRUE(st.save(*a, key_for(160), save_reason::continued));  // no map
    ASSERT_TRUE(a->eval(std::vector<int32_t>(seq().begin() + 160, seq().begin() + 200)).ok());
    const tool_map second = {{"toolu_9", "<dsml>nine</dsml>"}};
    ASSERT_TRUE(st.save(*a, key_for(200), save_reason::continued, 0, &second));

    std::string p120, p160, p200;
    for (const file_info& fi : st.entries()) {
        if (fi.header.tokens == 120) p120 = fi.path;
        if (fi.header.tokens == 160) p160 = fi.path;
        if (fi.header.tokens == 200) p200 = fi.path;
    }
    tool_map got;
    ASSERT_TRUE(read_tool_map(p120, &got).ok());
    EXPECT_EQ(got, first);
    ASSERT_TRUE(read_tool_map(p160, &got).ok());
    EXPECT_TRUE(got.empty());
    ASSERT_TRUE(read_tool_map(p200, &got).ok());
    EXPECT_EQ(got, second);

    // A restart sees both maps; the file used last comes last.
    ASSERT_TRUE(touch_file(p120, unix_now() + 100).ok());
    store again = e.open();
    auto stored = [](const store& s) {
        tool_map all;
        s.stored_tools([&all](tool_map& m) { all.insert(all.end(), m.begin(), m.end()); });
        return all;
    };
    tool_map all = stored(again);
    tool_map want = second;
    want.insert(want.end(), first.begin(), first.end());
    EXPECT_EQ(all, want);

    // A count beyond the section: refused by name, skipped by the store.
    {
        std::fstream f(p200, std::ios::in | std::ios::out | std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        const size_t at = bytes.rfind("KTM\x01");
        ASSERT_NE(at, std::string::npos);
        f.seekp(static_cast<std::streamoff>(at + 4));
        const char big[4] = {0x10, 0, 0, 0};
        f.write(big, 4);
    }
    const status bad = read_tool_map(p200, &got);
    EXPECT_FALSE(bad.ok());
    EXPECT_NE(bad.message().find("damaged tool-id map"), std::string::npos) << bad.message();
    EXPECT_EQ(stored(again), first);
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
        } while (at >= 12 && at < 16);     // hits: mutable by design
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

TEST(KvFile, ForeignVersionIsRemoved) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(100)).ok());
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

// Two models on one directory: each store indexes, budgets and evicts only its own model's
// entries and leaves the other's in place, at the scan, at a save under the same name and at a
// lookup that finds its entry replaced by the other model's.
TEST(KvStore, TwoModelsShareADirectory) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(100)).ok());
    std::string a_path;
    {
        store a = e.open();
        ASSERT_TRUE(a.save(*s, key_for(100), save_reason::cold));
        a_path = a.entries()[0].path;
    }
    ASSERT_TRUE(s->eval(std::vector<int32_t>(seq().begin() + 100, seq().begin() + 120)).ok());
    // Another model (the MTP variant has other tensors) sees a foreign file.
    const model_identity other = identity_of_model(test::tiny_model("tiny-mtp", "f32"));
    ASSERT_NE(other.fingerprint, e.id.fingerprint);
    std::vector<std::string> lines;
    store_options o;
    o.dir = e.dir;
    o.min_tokens = 16;
    {
        store b(o, other, [&](const std::string& l) { lines.push_back(l); });
        EXPECT_TRUE(b.entries().empty());
        EXPECT_TRUE(fs::exists(a_path));
        bool said = false;
        for (const std::string& l : lines)
            said |= l.find("left alone 1 entries") != std::string::npos;
        EXPECT_TRUE(said) << "the start-up log says how many foreign entries it left";
        // The same key text has the same name: model A's entry is not replaced.
        EXPECT_FALSE(b.save(*s, key_for(100), save_reason::cold));
        ASSERT_TRUE(b.save(*s, key_for(120), save_reason::cold));  // its own
        EXPECT_EQ(b.entries().size(), 1u);
    }
    // B with a budget below one file evicts its own entry, never A's.
    {
        store_options tiny = o;
        tiny.budget_bytes = 1;
        store b(tiny, other);
        EXPECT_TRUE(b.entries().empty());
        EXPECT_TRUE(fs::exists(a_path));
    }
    // A still finds and loads its entry.
    {
        store a = e.open();
        ASSERT_EQ(a.entries().size(), 1u);
        auto b = e.session();
        store::hit h;
        ASSERT_TRUE(a.load_longest_prefix(key_for(110), *b, &h));
        EXPECT_EQ(h.tokens, 100u);
        // Model B replaces the file after A's scan: A's lookup forgets it and removes nothing.
        write_request req;
        const std::string key = key_for(100);
        req.key_text = key;
        ASSERT_TRUE(write_file(e.dir, *s, other, req).ok());
        auto c = e.session();
        EXPECT_FALSE(a.load_longest_prefix(key_for(110), *c, nullptr));
        EXPECT_TRUE(a.entries().empty());
        EXPECT_TRUE(fs::exists(a_path));
        file_info fi;
        ASSERT_TRUE(inspect_file(a_path, &fi).ok());
        EXPECT_EQ(fi.fingerprint, other.fingerprint);
    }
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
                const std::string key = key_for(300);
                req.key_text = key;
                ASSERT_TRUE(write_file(e.dir, *s, e.id, req).ok());
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
        const std::string key = key_for(200);
        req.key_text = key;
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

// store::save under a file-size limit, as `magnetar serve` runs it (SIGXFSZ ignored by the CLI
// at start-up): the save returns false with one log line, leaves no temp file, and the store
// goes on (the next save without the limit works).
TEST(KvStore, SaveUnderAFileSizeLimitFailsCleanly) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(200)).ok());
    store st = e.open();
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::signal(SIGXFSZ, SIG_IGN);
        rlimit rl{100000, 100000};
        ::setrlimit(RLIMIT_FSIZE, &rl);
        std::vector<std::string> lines;
        store_options o = st.options();
        store limited(o, e.id, [&](const std::string& l) { lines.push_back(l); });
        const bool saved = limited.save(*s, key_for(200), save_reason::cold);
        const bool one_line = lines.size() == 1 &&
                              lines[0].find("save failed") != std::string::npos &&
                              lines[0].find("File too large") != std::string::npos;
        ::_exit(saved ? 2 : !limited.entries().empty() ? 3 : !one_line ? 4 : 0);
    }
    int wst = 0;
    ::waitpid(pid, &wst, 0);
    ASSERT_TRUE(WIFEXITED(wst)) << "killed by signal " << WTERMSIG(wst);
    EXPECT_EQ(WEXITSTATUS(wst), 0);
    EXPECT_EQ(file_count(e.dir), 0u);
    for (const auto& f : fs::directory_iterator(e.dir))
        EXPECT_EQ(f.path().string().find(".tmp."), std::string::npos) << f.path();
    ASSERT_TRUE(st.save(*s, key_for(200), save_reason::cold));
    EXPECT_EQ(st.entries().size(), 1u);
}

// Runs `body` in a child that must finish within `limit_s` (a FIFO opened for reading blocks
// forever without a writer): returns the child's exit status, or -1 when it hung or crashed.
template <class F>
int in_child(F body, unsigned limit_s = 20) {
    const pid_t pid = ::fork();
    if (pid < 0) return -2;
    if (pid == 0) {
        ::alarm(limit_s);
        ::_exit(body());
    }
    int wst = 0;
    ::waitpid(pid, &wst, 0);
    return WIFEXITED(wst) ? WEXITSTATUS(wst) : -1;
}

// A FIFO, a directory and symbolic links named like entries: the scan and every reader skip
// them without blocking or following them, and nothing of them is removed.
TEST(KvStore, NonRegularFilesNamedLikeEntriesAreSkipped) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(100)).ok());
    std::string good;
    {
        store st = e.open();
        ASSERT_TRUE(st.save(*s, key_for(100), save_reason::cold));
        good = st.entries()[0].path;
    }
    const std::string outside = e.dir + "-outside";
    fs::create_directories(outside);
    const std::string target = outside + "/" + fs::path(good).filename().string();
    fs::copy_file(good, target, fs::copy_options::overwrite_existing);
    const std::string fifo = e.dir + "/" + file_name_for("fifo");
    const std::string sub = e.dir + "/" + file_name_for("dir");
    const std::string link = e.dir + "/" + file_name_for("link");
    const std::string dangling = e.dir + "/" + file_name_for("dangling");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    fs::create_directories(sub);
    fs::create_symlink(target, link);
    fs::create_symlink(outside + "/none", dangling);
    const int rc = in_child([&] {
        std::vector<std::string> lines;
        store_options o;
        o.dir = e.dir;
        o.min_tokens = 16;
        store st(o, e.id, [&](const std::string& l) { lines.push_back(l); });
        if (st.entries().size() != 1 || st.entries()[0].path != good) return 2;
        size_t skipped = 0;
        for (const std::string& l : lines) skipped += l.find("skipped") != std::string::npos;
        if (skipped != 4) return 3;
        file_info fi;
        std::string text;
        for (const std::string& p : {fifo, link}) {
            if (inspect_file(p, &fi).code() != status_code::invalid_argument) return 4;
            if (verify_file(p).code() != status_code::invalid_argument) return 5;
            if (read_key_text(p, &text).ok() || touch_file(p).ok()) return 6;
        }
        return 0;
    });
    EXPECT_EQ(rc, 0) << "-1: hung (or crashed) on a FIFO";
    EXPECT_TRUE(fs::is_fifo(fifo));
    EXPECT_TRUE(fs::is_directory(sub));
    EXPECT_TRUE(fs::is_symlink(link));
    EXPECT_TRUE(fs::is_symlink(dangling));
    EXPECT_TRUE(verify_file(target).ok());  // the link's target untouched
    fs::remove_all(outside);
}

// Temp files are new files (O_EXCL | O_NOFOLLOW, mode 0600): a symbolic link planted at the
// temp name is never followed (another name is used, or the save fails when all are taken), and
// one planted at the final name is replaced by the rename, its target untouched.
TEST(KvFile, PlantedLinksAreNeverFollowed) {
    env e;
    auto s = e.session();
    ASSERT_TRUE(s->eval(head(100)).ok());
    fs::create_directories(e.dir);
    const std::string victim = e.dir + "-victim";
    { std::ofstream(victim) << "precious"; }
    auto victim_intact = [&] {
        std::ifstream f(victim);
        std::string t;
        std::getline(f, t);
        return t == "precious";
    };
    const std::string path = e.dir + "/" + file_name_for(key_for(100));
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    fs::create_symlink(victim, tmp);
    write_request req;
    const std::string key = key_for(100);
    req.key_text = key;
    const status st = write_file(e.dir, *s, e.id, req);
    EXPECT_TRUE(st.ok()) << st.message();
    EXPECT_TRUE(victim_intact());
    EXPECT_TRUE(fs::is_symlink(tmp));
    EXPECT_TRUE(verify_file(path).ok());
    EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write);
    // Every candidate temp name taken: the save fails, nothing followed, no file left behind.
    fs::remove(path);
    for (int k = 1; k < 16; ++k) fs::create_symlink(victim, tmp + "." + std::to_string(k));
    EXPECT_FALSE(write_file(e.dir, *s, e.id, req).ok());
    EXPECT_TRUE(victim_intact());
    EXPECT_FALSE(fs::exists(fs::symlink_status(path)));
    for (const auto& f : fs::directory_iterator(e.dir)) EXPECT_TRUE(f.is_symlink()) << f.path();
    // A link at the final name: the rename replaces the link itself.
    for (const auto& f : fs::directory_iterator(e.dir)) fs::remove(f.path());
    fs::create_symlink(victim, path);
    ASSERT_TRUE(write_file(e.dir, *s, e.id, req).ok());
    EXPECT_FALSE(fs::is_symlink(path));
    EXPECT_TRUE(verify_file(path).ok());
    EXPECT_TRUE(victim_intact());
    fs::remove(victim);
}

// The scan removes only unfinished writes it could have made: regular files named
// <40 hex>.kv.tmp.<pid>[.<k>], owned by this user, whose writer is gone (or untouched for an
// hour). Links, FIFOs, directories, other names and a live writer's file stay.
TEST(KvStore, ScanRemovesOnlyOurAbandonedTempFiles) {
    env e;
    fs::create_directories(e.dir);
    const std::string hex = sha1_hex("some prefix");
    const pid_t dead = ::fork();
    if (dead == 0) ::_exit(0);
    ASSERT_GT(dead, 0);
    ::waitpid(dead, nullptr, 0);
    const std::string live = std::to_string(::getppid());
    auto touch = [&](const std::string& n) {
        std::ofstream(e.dir + "/" + n) << "partial";
        return e.dir + "/" + n;
    };
    const std::string gone1 = touch(hex + ".kv.tmp." + std::to_string(dead));
    const std::string gone2 = touch(hex + ".kv.tmp." + std::to_string(dead) + ".3");
    const std::string old = touch(hex + ".kv.tmp." + live + ".1");
    fs::last_write_time(old, fs::file_time_type::clock::now() - std::chrono::hours(2));
    const std::string running = touch(hex + ".kv.tmp." + live);
    const std::string not_hex = touch(std::string(40, 'x') + ".kv.tmp.1");
    const std::string not_pid = touch(hex + ".kv.tmp.notes");
    const std::string fifo = e.dir + "/" + hex + ".kv.tmp.2";
    const std::string link = e.dir + "/" + hex + ".kv.tmp.4";
    const std::string sub = e.dir + "/" + hex + ".kv.tmp.5";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    fs::create_symlink(not_hex, link);
    fs::create_directories(sub);
    const int rc = in_child([&] {
        store st = e.open();
        return 0;
    });
    EXPECT_EQ(rc, 0);
    EXPECT_FALSE(fs::exists(gone1));
    EXPECT_FALSE(fs::exists(gone2));
    EXPECT_FALSE(fs::exists(old));
    EXPECT_TRUE(fs::exists(running)) << "a live writer's temp file";
    EXPECT_TRUE(fs::exists(not_hex));
    EXPECT_TRUE(fs::exists(not_pid));
    EXPECT_TRUE(fs::is_fifo(fifo));
    EXPECT_TRUE(fs::is_symlink(link));
    EXPECT_TRUE(fs::is_directory(sub));
}

// The directory must be the user's own and not world-writable: a clear error otherwise.
TEST(KvStore, UnsafeDirectoriesAreRefused) {
    env e;
    auto refused = [&](const std::string& dir, const std::string& says) {
        store_options o;
        o.dir = dir;
        try {
            store st(o, e.id);
        } catch (const Error& err) {
            EXPECT_NE(std::string(err.what()).find(says), std::string::npos) << err.what();
            return true;
        }
        return false;
    };
    fs::create_directories(e.dir);
    fs::permissions(e.dir, fs::perms::all);  // 0777
    EXPECT_TRUE(refused(e.dir, "writable by every user"));
    fs::permissions(e.dir, fs::perms::owner_all | fs::perms::group_all);  // 0770: a warning
    std::vector<std::string> lines;
    {
        store_options o;
        o.dir = e.dir;
        store st(o, e.id, [&](const std::string& l) { lines.push_back(l); });
    }
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines[0].find("group-writable"), std::string::npos) << lines[0];
    fs::permissions(e.dir, fs::perms::owner_all);
    const std::string file = e.dir + "/plain";
    { std::ofstream(file) << "x"; }
    EXPECT_TRUE(refused(file, "not a directory"));
    // Owned by someone else, directly or through a link.
    const std::string theirs = e.dir + "/theirs";
    fs::create_directories(theirs);
    const std::string link = e.dir + "/link";
    if (::geteuid() == 0) {
        ASSERT_EQ(::chown(theirs.c_str(), 4242, 4242), 0);
        fs::create_symlink(theirs, link);
    } else {
        fs::create_symlink("/", link);  // root's
    }
    if (::geteuid() == 0) {
        EXPECT_TRUE(refused(theirs, "belongs to uid 4242"));
    }
    EXPECT_TRUE(refused(link, "belongs to uid"));
    // A link of another user to our own directory.
    if (::geteuid() == 0) {
        const std::string mine = e.dir + "/mine";
        fs::create_directories(mine);
        const std::string their_link = e.dir + "/their-link";
        fs::create_symlink(mine, their_link);
        ASSERT_EQ(::lchown(their_link.c_str(), 4242, 4242), 0);
        EXPECT_TRUE(refused(their_link, "symbolic link owned by uid 4242"));
        store_options o;
        o.dir = e.dir + "/my-link";
        fs::create_symlink(mine, o.dir);
        EXPECT_NO_THROW(store(o, e.id));  // our own link to our own directory
    }
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
