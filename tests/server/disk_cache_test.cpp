// The server with a disk KV cache (--kv-disk-dir) on the tiny model: a long conversation
// survives a server restart (the extended request evaluates only its suffix, seen in usage and
// /metrics), the same answer comes back as without the cache, and a corrupt cache file is
// skipped, removed and never loaded while the server keeps serving.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvstore/kv_file.h"
#include "magnetar/engine.h"
#include "server/server.h"
#include "support/default_engine.h"

namespace fs = std::filesystem;

namespace magnetar::server {
namespace {

using json = nlohmann::ordered_json;

const Engine* engine() {
    return test::default_engine();
}

struct temp_dir {
    std::string path;
    explicit temp_dir(const std::string& tag = "cache") {
        path = (fs::temp_directory_path() /
                ("magnetar-srv-kv-" + std::to_string(::getpid()) + "-" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" + tag))
                   .string();
        fs::remove_all(path);
    }
    ~temp_dir() { fs::remove_all(path); }
};

server_options options(const std::string& dir) {
    server_options o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.n_ctx = 2048;
    o.default_max_tokens = 4;
    o.disk.dir = dir;
    o.disk.min_tokens = 64;
    o.disk.cold_max_tokens = 4096;
    o.disk.continued_interval = 0;
    o.disk.boundary_trim = 8;
    o.disk.boundary_align = 64;
    return o;
}

// A long user message: enough tokens for the cache's minimum.
std::string long_text() {
    std::string s;
    for (int i = 0; i < 60; ++i) s += "Record " + std::to_string(i) + ": the quick brown fox. ";
    return s;
}

json request(const std::vector<json>& messages) {
    return json{{"model", "deepseek-v4-flash"},
                {"messages", messages},
                {"max_tokens", 4},
                {"thinking", false},
                {"temperature", 0}};
}

json post(int port, const json& body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
}

std::string metrics(int port) {
    httplib::Client c("127.0.0.1", port);
    auto r = c.Get("/metrics");
    return r ? r->body : std::string();
}

double metric(const std::string& text, const std::string& name) {
    const size_t at = text.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + name.size() + 2));
}

TEST(ServerDiskCache, ConversationSurvivesARestart) {
    if (!engine()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    temp_dir dir;
    const json first = json{{"role", "user"}, {"content", long_text()}};
    json answer1;
    int64_t prompt1 = 0;
    {
        server srv(*engine(), options(dir.path));
        ASSERT_TRUE(srv.start());
        answer1 = post(srv.port(), request({first}));
        prompt1 = answer1["usage"]["prompt_tokens"];
        ASSERT_GT(prompt1, 64);
        EXPECT_EQ(answer1["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        srv.stop();  // clean exit: the live session is saved ("shutdown")
    }
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(dir.path)) files += e.path().extension() == ".kv";
    EXPECT_GE(files, 1u);

    // A new server process state: the same conversation, extended by one turn.
    const std::string reply = answer1["choices"][0]["message"]["content"];
    const json extended = request({first, json{{"role", "assistant"}, {"content", reply}},
                                   json{{"role", "user"}, {"content", "And the next record?"}}});
    json cold_answer;
    {
        temp_dir none("none");  // reference: the same request without any cache
        server_options o = options(none.path);
        o.disk.dir.clear();
        server srv(*engine(), o);
        ASSERT_TRUE(srv.start());
        cold_answer = post(srv.port(), extended);
        srv.stop();
    }
    server srv(*engine(), options(dir.path));
    ASSERT_TRUE(srv.start());
    const json answer2 = post(srv.port(), extended);
    const int64_t cached = answer2["usage"]["prompt_tokens_details"]["cached_tokens"];
    const int64_t prompt2 = answer2["usage"]["prompt_tokens"];
    EXPECT_GE(cached, prompt1 - 8) << "the restored prefix covers the first turn";
    EXPECT_LT(prompt2 - cached, prompt2 - prompt1 + 16) << "only the new suffix is evaluated";
    EXPECT_EQ(answer2["choices"][0]["message"]["content"],
              cold_answer["choices"][0]["message"]["content"]);
    const std::string m = metrics(srv.port());
    EXPECT_EQ(metric(m, "magnetar_disk_cache_hits_total"), 1) << m;
    EXPECT_GE(metric(m, "magnetar_disk_cache_loaded_tokens_total"), prompt1 - 8);
    srv.stop();
}

// A tool-call turn saved to disk keeps its call ids with the sampled DSML (the file's tool map):
// after a restart the client's replayed history re-renders the sampled bytes (here "&amp;",
// which the canonical writer would spell "&"), so everything up to the tool result is restored
// instead of stopping where the canonical block differs.
TEST(ServerDiskCache, ToolCallReplaySurvivesARestart) {
    if (!engine()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    temp_dir dir;
    const json tools = json::array(
        {json{{"type", "function"},
              {"function",
               {{"name", "get_weather"},
                {"parameters",
                 {{"type", "object"},
                  {"properties",
                   {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}}}}}}}});
    const std::string dsml =
        "Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Paris &amp; Lyon</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    const json first = json{{"role", "user"}, {"content", long_text()}};
    json body = request({first});
    body["tools"] = tools;
    body["max_tokens"] = 200;
    body["x_magnetar_forced_output"] = dsml;
    server_options o = options(dir.path);
    o.test_hooks = true;
    json a;
    {
        server srv(*engine(), o);
        ASSERT_TRUE(srv.start());
        a = post(srv.port(), body);
        srv.stop();  // the live session, tool call included, is saved ("shutdown")
    }
    const json& msg = a["choices"][0]["message"];
    ASSERT_EQ(a["choices"][0]["finish_reason"], "tool_calls") << a.dump();
    const int64_t p1 = a["usage"]["prompt_tokens"], c1 = a["usage"]["completion_tokens"];
    json next = request({first, msg,
                         json{{"role", "tool"},
                              {"tool_call_id", msg["tool_calls"][0]["id"]},
                              {"content", "sunny"}}});
    next["tools"] = tools;
    next["max_tokens"] = 2;
    server srv(*engine(), o);
    ASSERT_TRUE(srv.start());
    const json b = post(srv.port(), next);
    EXPECT_GE(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), p1 + c1)
        << b.dump();
    srv.stop();
}

// Continued saves go on during a long reply: with an interval of 64 tokens, a short prompt
// and a 200-token reply leave files at the multiples of 64 that the reply crossed.
TEST(ServerDiskCache, ContinuedSavesDuringALongReply) {
    if (!engine()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    temp_dir dir;
    server_options o = options(dir.path);
    o.test_hooks = true;
    o.disk.continued_interval = 64;
    o.disk.boundary_align = 0;
    o.disk.cold_max_tokens = 0;
    std::string words;
    for (int i = 0; i < 120; ++i) words += " w" + std::to_string(i);
    json body = request({json{{"role", "user"}, {"content", "Count."}}});
    body["max_tokens"] = 200;
    body["x_magnetar_forced_output"] = words;
    server srv(*engine(), o);
    ASSERT_TRUE(srv.start());
    const json a = post(srv.port(), body);
    const int64_t p = a["usage"]["prompt_tokens"], c = a["usage"]["completion_tokens"];
    ASSERT_LT(p, 64);
    ASSERT_GT(p + c, 192) << a.dump();
    std::vector<uint32_t> saved;
    for (const auto& e : fs::directory_iterator(dir.path)) {
        kvstore::file_info fi;
        if (e.path().extension() == ".kv" && kvstore::inspect_file(e.path(), &fi).ok()) {
            EXPECT_EQ(fi.header.reason, kvstore::save_reason::continued);
            saved.push_back(fi.header.tokens);
        }
    }
    std::sort(saved.begin(), saved.end());
    EXPECT_EQ(saved, (std::vector<uint32_t>{64, 128, 192})) << a.dump();
    srv.stop();
}

// Two live sessions, three conversations: the third takes the least recently used session,
// which is saved to disk first, so the first conversation's next turn loads its prefix from
// the disk, and the second one's still finds its session in memory.
TEST(ServerDiskCache, TheLeastRecentlyUsedSessionIsSavedBeforeItIsReused) {
    if (!engine()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    temp_dir dir;
    server_options o = options(dir.path);
    o.parallel = 2;
    o.disk.cold_max_tokens = 0;  // no cold saves: a disk hit can only come from the evict save
    server srv(*engine(), o);
    ASSERT_TRUE(srv.start());
    std::vector<json> firsts, answers;
    for (const char* tag : {"Alpha", "Beta", "Gamma"}) {
        firsts.push_back(
            json{{"role", "user"}, {"content", std::string(tag) + ". " + long_text()}});
        answers.push_back(post(srv.port(), request({firsts.back()})));
    }
    const auto next = [&](size_t i) {
        const std::string reply = answers[i]["choices"][0]["message"]["content"];
        return request({firsts[i], json{{"role", "assistant"}, {"content", reply}},
                        json{{"role", "user"}, {"content", "Go on."}}});
    };
    const json beta = post(srv.port(), next(1));  // in memory
    const int64_t beta_prompt = answers[1]["usage"]["prompt_tokens"];
    EXPECT_GE(beta["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
              beta_prompt - 1);
    EXPECT_EQ(metric(metrics(srv.port()), "magnetar_disk_cache_hits_total"), 0);
    const json alpha = post(srv.port(), next(0));  // saved when Gamma took its session
    const int64_t alpha_prompt = answers[0]["usage"]["prompt_tokens"];
    EXPECT_GE(alpha["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
              alpha_prompt - 8);
    EXPECT_EQ(metric(metrics(srv.port()), "magnetar_disk_cache_hits_total"), 1);
    srv.stop();
}

TEST(ServerDiskCache, CorruptFileIsRemovedAndTheServerKeepsServing) {
    if (!engine()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    temp_dir dir;
    const json req = request({json{{"role", "user"}, {"content", long_text()}}});
    {
        server srv(*engine(), options(dir.path));
        ASSERT_TRUE(srv.start());
        post(srv.port(), req);
        srv.stop();
    }
    // Flip one byte in the middle of every payload.
    for (const auto& e : fs::directory_iterator(dir.path)) {
        if (e.path().extension() != ".kv") continue;
        std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
        const auto mid = static_cast<std::streamoff>(fs::file_size(e.path()) / 2);
        f.seekg(mid);
        char c = 0;
        f.read(&c, 1);
        f.seekp(mid);
        c = static_cast<char>(c ^ 0x10);
        f.write(&c, 1);
    }
    server srv(*engine(), options(dir.path));
    ASSERT_TRUE(srv.start());
    const json a = post(srv.port(), req);
    EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(metric(metrics(srv.port()), "magnetar_disk_cache_hits_total"), 0);
    srv.stop();
}

}  // namespace
}  // namespace magnetar::server
