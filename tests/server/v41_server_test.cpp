// The HTTP server on a DeepSeek V4.1 model with a tokenizer (v41-tiny with the DeepSeek
// vocabulary, support/tiny_models.h): /v1/chat/completions answers greedy requests with the text
// that `magnetar run` prints for the same prompt, streams the same text, reuses the live session
// for a follow-up turn, and its disk KV cache restores a V4.1 conversation after a restart with
// the answer that a server holding the conversation in memory gives.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "magnetar/engine.h"
#include "server/server.h"
#include "support/test_support.h"
#include "support/tiny_v41_engine.h"

namespace fs = std::filesystem;

namespace magnetar::server {
namespace {

using json = nlohmann::ordered_json;

const std::string& v41_model() {
    return test::tiny_v41_model();
}
const Engine* v41_engine() {
    return test::tiny_v41_engine();
}

constexpr int64_t kCtx = 1024;

server_options base_options() {
    server_options o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.n_ctx = kCtx;
    o.default_max_tokens = 8;
    o.keepalive_s = 1;
    return o;
}

json chat_request(const std::vector<json>& messages, int max_tokens) {
    return json{{"model", "deepseek-v4-flash"},
                {"messages", messages},
                {"max_tokens", max_tokens},
                {"thinking", false},
                {"temperature", 0}};
}

json user(const std::string& text) {
    return json{{"role", "user"}, {"content", text}};
}

httplib::Result post(int port, const json& body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    c.set_connection_timeout(5, 0);
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
}

json post_json(int port, const json& body) {
    auto r = post(port, body);
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body, nullptr, false);
}

// `magnetar run` with the server's rendering of one user turn (no system prompt, thinking off).
std::string cli_greedy(const std::string& prompt, int n) {
    std::string out;
    const std::string cmd = "(" + test::magnetar_bin() + " run -m '" + v41_model() + "' -t 2 -p '" +
                            prompt + "' -sys '' --nothink --temp 0 -n " + std::to_string(n) +
                            " -c " + std::to_string(kCtx) + " 2>/dev/null)";
    EXPECT_EQ(test::run_command(cmd, &out), 0) << out;
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

TEST(V41Server, ChatCompletionEqualsCliAndStreamsTheSameText) {
    MAGNETAR_REQUIRE_V41_MODEL();
    const std::string prompt = "Tell me a story.";
    server srv(*v41_engine(), base_options());
    ASSERT_TRUE(srv.start());

    const json a = post_json(srv.port(), chat_request({user(prompt)}, 8));
    ASSERT_TRUE(a.is_object());
    EXPECT_EQ(a["object"], "chat.completion");
    const std::string text = a["choices"][0]["message"]["content"];
    EXPECT_EQ(a["usage"]["completion_tokens"], 8);
    EXPECT_GT(a["usage"]["prompt_tokens"].get<int>(), 4);
    EXPECT_EQ(text, cli_greedy(prompt, 8));

    json body = chat_request({user(prompt)}, 8);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto r = post(srv.port(), body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    std::string streamed;
    bool done = false;
    int n_chunks = 0;
    size_t pos = 0;
    while ((pos = r->body.find("data: ", pos)) != std::string::npos) {
        const size_t end = r->body.find("\n\n", pos);
        const std::string data = r->body.substr(pos + 6, end - pos - 6);
        pos = end;
        if (data == "[DONE]") {
            done = true;
            break;
        }
        const json chunk = json::parse(data);
        ASSERT_EQ(chunk["object"], "chat.completion.chunk");
        if (chunk["choices"].empty()) continue;  // the usage chunk
        const json& d = chunk["choices"][0]["delta"];
        if (d.contains("content") && d["content"].is_string()) {
            streamed += d["content"].get<std::string>();
            ++n_chunks;
        }
    }
    EXPECT_TRUE(done) << r->body;
    EXPECT_GE(n_chunks, 1);
    EXPECT_EQ(streamed, text);
    srv.stop();
}

TEST(V41Server, SecondTurnReusesTheSession) {
    MAGNETAR_REQUIRE_V41_MODEL();
    server srv(*v41_engine(), base_options());
    ASSERT_TRUE(srv.start());
    const json first = user("First question about the sea.");
    const json a = post_json(srv.port(), chat_request({first}, 6));
    const int p1 = a["usage"]["prompt_tokens"];
    const json b = post_json(
        srv.port(),
        chat_request(
            {first, json{{"role", "assistant"}, {"content", a["choices"][0]["message"]["content"]}},
             user("And the mountains?")},
            6));
    const int cached = b["usage"]["prompt_tokens_details"]["cached_tokens"];
    const int p2 = b["usage"]["prompt_tokens"];
    EXPECT_GE(cached, p1) << "first prompt " << p1 << ", second " << p2;
    EXPECT_LT(p2 - cached, 20);
    srv.stop();
}

struct temp_dir {
    std::string path;
    explicit temp_dir(const std::string& tag) {
        path = (fs::temp_directory_path() /
                ("magnetar-v41-srv-" + std::to_string(::getpid()) + "-" + tag))
                   .string();
        fs::remove_all(path);
    }
    ~temp_dir() { fs::remove_all(path); }
};

server_options disk_options(const std::string& dir) {
    server_options o = base_options();
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

TEST(V41Server, DiskCacheRestoresAConversationAfterARestart) {
    MAGNETAR_REQUIRE_V41_MODEL();
    temp_dir dir("cache");
    std::string text;
    for (int i = 0; i < 60; ++i) text += "Record " + std::to_string(i) + ": the quick brown fox. ";
    const json first = user(text);
    json answer1;
    int64_t prompt1 = 0;
    {
        server srv(*v41_engine(), disk_options(dir.path));
        ASSERT_TRUE(srv.start());
        answer1 = post_json(srv.port(), chat_request({first}, 4));
        prompt1 = answer1["usage"]["prompt_tokens"];
        ASSERT_GT(prompt1, 64);
        EXPECT_EQ(answer1["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        srv.stop();  // saves the live session
    }
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(dir.path)) files += e.path().extension() == ".kv";
    EXPECT_GE(files, 1u);

    const json extended = chat_request(
        {first,
         json{{"role", "assistant"}, {"content", answer1["choices"][0]["message"]["content"]}},
         user("And the next record?")},
        4);
    // Reference: the same two requests on one server without the disk cache, so the first
    // turn's generated tokens stay in its live session. (A server that never saw the first turn
    // re-tokenizes the reply text, which need not give the generated tokens back.)
    json live;
    {
        server_options o = disk_options("");
        o.disk.dir.clear();
        server srv(*v41_engine(), o);
        ASSERT_TRUE(srv.start());
        EXPECT_EQ(
            post_json(srv.port(), chat_request({first}, 4))["choices"][0]["message"]["content"],
            answer1["choices"][0]["message"]["content"]);
        live = post_json(srv.port(), extended);
        srv.stop();
    }
    server srv(*v41_engine(), disk_options(dir.path));
    ASSERT_TRUE(srv.start());
    const json warm = post_json(srv.port(), extended);
    const int64_t cached = warm["usage"]["prompt_tokens_details"]["cached_tokens"];
    const int64_t prompt2 = warm["usage"]["prompt_tokens"];
    EXPECT_GE(cached, prompt1 - 8) << "the restored prefix covers the first turn";
    EXPECT_LT(prompt2 - cached, prompt2 - prompt1 + 16) << "only the new suffix is evaluated";
    EXPECT_EQ(prompt2, live["usage"]["prompt_tokens"].get<int64_t>());
    EXPECT_EQ(warm["choices"][0]["message"]["content"], live["choices"][0]["message"]["content"]);
    srv.stop();
}

}  // namespace
}  // namespace magnetar::server
