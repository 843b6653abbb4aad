// Request validation (tools/server/request_schema.h) and client-visible ids: the schema
// tables in isolation (errors name the field, valid tool-loop requests pass), the bounded
// JSON parser, the id generator, and the malformed-request corpus
// (tests/server/data/malformed_requests.jsonl) posted to a live server on loopback.
//
// Corpus lines: {"name", "path", "method"? (default POST), "body" (a string, may be invalid
// JSON) or "parts" ([[text, count], ...]: text repeated count times, "%" in a repeated text
// replaced by the repetition index), "latin1"? (code points below 256 become single bytes,
// for non-UTF-8 bodies), "expect" (the status), "param"? (OpenAI error param),
// "message_has"? (a substring of the error message)}.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "chat/tool_id.h"
#include "magnetar/engine.h"
#include "server/http_util.h"
#include "server/request_schema.h"
#include "server/server.h"
#include "support/default_engine.h"

namespace magnetar::server {
namespace {

using json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// Schema tables without a server
// ---------------------------------------------------------------------------------------------

// The error of validating `body` (empty when it passes).
api_error* validation_error(api_endpoint ep, const json& body) {
    static thread_local std::unique_ptr<api_error> last;
    last.reset();
    try {
        validate_request(ep, body);
    } catch (const api_error& e) {
        last = std::make_unique<api_error>(e);
    }
    return last.get();
}

TEST(RequestValidation, ErrorsNameTheField) {
    json chat = json::parse(R"({"messages":[{"role":"user","content":"a"},
        {"role":"assistant","content":"b"},{"role":"wizard","content":"c"}],"max_tokens":4})");
    api_error* e = validation_error(api_endpoint::chat_completions, chat);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_STREQ(e->what(), "messages[2].role: unknown role \"wizard\"");
    EXPECT_EQ(e->param, "messages[2].role");

    chat["messages"][2]["role"] = "user";
    EXPECT_FALSE(validation_error(api_endpoint::chat_completions, chat));
    chat["max_tokens"] = -1;
    e = validation_error(api_endpoint::chat_completions, chat);
    ASSERT_TRUE(e);
    EXPECT_STREQ(e->what(), "max_tokens: must be an integer in [1, 1073741824]");
    EXPECT_EQ(e->param, "max_tokens");

    chat["max_tokens"] = 4;
    chat["messages"][0]["content"] =
        json::parse(R"([{"type":"text","text":"see"},{"type":"image_url","image_url":{}}])");
    e = validation_error(api_endpoint::chat_completions, chat);
    ASSERT_TRUE(e);
    EXPECT_STREQ(e->what(),
                 "messages[0].content[1]: image content is not supported: the model is text-only");

    json anthropic = json::parse(R"({"messages":[{"role":"user","content":"hi"}]})");
    e = validation_error(api_endpoint::messages, anthropic);
    ASSERT_TRUE(e);
    EXPECT_STREQ(e->what(), "missing max_tokens");
    EXPECT_FALSE(validation_error(api_endpoint::count_tokens, anthropic));  // not required there

    json responses = json::parse(R"({"input":[{"role":"user","content":[
        {"type":"input_text","text":"x"},{"type":"input_image","image_url":"u"}]}]})");
    e = validation_error(api_endpoint::responses, responses);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "input[0].content[1]");
}

TEST(RequestValidation, ToolLoopRequestsOfRealClientsPass) {
    // What the SDKs and agents send in tool loops (tests/server/sdk_clients.mjs, Claude Code,
    // Codex): every part / block / item type the normalisation understands.
    const json chat = json::parse(R"({
        "model":"deepseek-v4-flash","max_tokens":200,"max_completion_tokens":null,
        "temperature":0.7,"top_p":1,"top_k":0,"min_p":0,"seed":-3,"n":1,"stop":["\n\n"],
        "logprobs":false,"stream":true,"stream_options":{"include_usage":true},
        "tool_choice":{"type":"function","function":{"name":"get_weather"}},
        "response_format":{"type":"json_object"},"reasoning_effort":"high","thinking":false,
        "parallel_tool_calls":true,"user":"u","metadata":{},"frequency_penalty":0,
        "tools":[{"type":"function","function":{"name":"mcp__srv__get.weather","strict":false,
            "description":"d","parameters":{"type":"object","properties":{}}}}],
        "messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},
            {"role":"user","content":[{"type":"text","text":"hi"},"plain"]},
            {"role":"assistant","content":null,"refusal":null,"reasoning_content":"r",
             "tool_calls":[{"id":"call_1","type":"function",
                            "function":{"name":"get_weather","arguments":"{}"}},
                           {"id":"call_2","type":"function",
                            "function":{"name":"get_weather","arguments":{"city":"P"}}}]},
            {"role":"tool","tool_call_id":"call_1","content":"sunny"},
            {"role":"function","name":"get_weather","content":"sunny"},
            {"role":"assistant","content":[{"type":"refusal","refusal":"no"}]},
            {"content":"role defaults to user"}]})");
    EXPECT_FALSE(validation_error(api_endpoint::chat_completions, chat))
        << validation_error(api_endpoint::chat_completions, chat)->what();

    const json completions = json::parse(
        R"({"prompt":["Once"],"max_tokens":3,"logprobs":2,"stream":false,"echo":false})");
    EXPECT_FALSE(validation_error(api_endpoint::completions, completions));

    const json responses = json::parse(R"({
        "model":"gpt-5-codex","instructions":"be brief","max_output_tokens":200,
        "reasoning":{"effort":"high","summary":"auto"},"store":false,"stream":true,
        "include":["reasoning.encrypted_content"],"tool_choice":"auto","parallel_tool_calls":false,
        "text":{"format":{"type":"text"}},"prompt_cache_key":"k",
        "tools":[{"type":"function","name":"shell","parameters":{"type":"object"},"strict":false},
                 {"type":"custom","name":"apply_patch","format":{"type":"grammar"}},
                 {"type":"web_search"},{"type":"local_shell"}],
        "input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"x"}]},
            {"role":"user","content":"hi"},
            {"type":"reasoning","summary":[{"type":"summary_text","text":"t"}],
             "content":null,"encrypted_content":"e"},
            {"type":"message","role":"assistant","status":"completed",
             "content":[{"type":"output_text","text":"ok","annotations":[]}]},
            {"type":"function_call","call_id":"call_1","name":"shell","arguments":"{}"},
            {"type":"function_call_output","call_id":"call_1","output":"done"},
            {"type":"custom_tool_call","call_id":"call_2","name":"apply_patch","input":"p"},
            {"type":"custom_tool_call_output","call_id":"call_2","output":"ok"},
            {"type":"local_shell_call","call_id":"call_3","action":{}},
            {"type":"local_shell_call_output","call_id":"call_3","output":"ok"},
            {"type":"compaction","encrypted_content":"c"}]})");
    EXPECT_FALSE(validation_error(api_endpoint::responses, responses))
        << validation_error(api_endpoint::responses, responses)->what();

    const json messages = json::parse(R"({
        "model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,"temperature":1,
        "system":[{"type":"text","text":"x-anthropic-billing"},
                  {"type":"text","text":"You are Claude Code",
                   "cache_control":{"type":"ephemeral"}}],
        "thinking":{"type":"enabled","budget_tokens":1024},"metadata":{"user_id":"u"},
        "tool_choice":{"type":"auto"},"stop_sequences":["</x>"],
        "tools":[{"name":"Bash","description":"run","input_schema":{"type":"object"}},
                 {"type":"web_search_20250305","name":"web_search","max_uses":5}],
        "messages":[{"role":"user","content":[{"type":"text","text":"hi",
                                              "cache_control":{"type":"ephemeral"}}]},
            {"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},
                {"type":"redacted_thinking","data":"d"},{"type":"text","text":"ok"},
                {"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1",
                "content":[{"type":"text","text":"a.txt"}],"is_error":false},
                {"type":"tool_result","tool_use_id":"toolu_2","content":"plain"},
                {"type":"text","text":"continue"}]}]})");
    EXPECT_FALSE(validation_error(api_endpoint::messages, messages))
        << validation_error(api_endpoint::messages, messages)->what();
}

TEST(RequestValidation, ParserLimitsAndDuplicateKeys) {
    EXPECT_EQ(parse_request_json(R"({"a":1,"b":{"c":2},"a":3})").dump(), R"({"a":3,"b":{"c":2}})");
    // Order of first appearance is kept (tool schemas are rendered in client order).
    EXPECT_EQ(parse_request_json(R"({"z":1,"y":2,"x":3})").begin().key(), "z");
    const std::string ok_depth = "{\"a\":" + std::string(255, '[') + std::string(255, ']') + "}";
    EXPECT_NO_THROW(parse_request_json(ok_depth));
    const std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
    EXPECT_THROW(parse_request_json(deep), api_error);
    std::string many = "[";
    for (size_t i = 0; i <= k_max_json_values; ++i) many += "0,";
    many += "0]";
    EXPECT_THROW(parse_request_json("{\"a\":" + many + "}"), api_error);
    for (const char* bad : {"", "[]", "null", "{", "{\"a\":1} x", "{\"a\":\"\\ud800\"}",
                            "{\"a\":1e400}", "{\"a\":\"\xff\"}"}) {
        EXPECT_THROW(parse_request_json(bad), api_error) << bad;
    }
}

// ---------------------------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------------------------

TEST(RequestIds, ShapeAndUniqueness) {
    const std::regex hex24("[0-9a-f]{24}");
    const std::regex call("call_[0-9a-f]{32}"), toolu("toolu_[0-9a-f]{32}");
    std::set<std::string> seen;
    for (int i = 0; i < 20000; ++i) {
        const std::string h = random_hex(12);
        ASSERT_TRUE(std::regex_match(h, hex24)) << h;
        seen.insert(h);
    }
    EXPECT_EQ(seen.size(), 20000u);
    EXPECT_TRUE(std::regex_match(chat::make_tool_id(chat::id_style::openai), call));
    EXPECT_TRUE(std::regex_match(chat::make_tool_id(chat::id_style::anthropic), toolu));
    // Every byte value occurs: the digits are not biased towards a few values.
    std::set<std::string> pairs;
    for (int i = 0; i < 4000; ++i) {
        const std::string h = random_hex(1);
        pairs.insert(h);
    }
    EXPECT_EQ(pairs.size(), 256u);
}

TEST(RequestIds, ForkedProcessesDrawDifferentIds) {
    // A user-space generator (seeded once per thread) repeats its sequence in a forked child;
    // ids come from the kernel instead, so parent and child never share them.
    (void)random_hex(12);
    (void)chat::make_tool_id(chat::id_style::openai);
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        const std::string ids = random_hex(12) + chat::make_tool_id(chat::id_style::openai);
        const ssize_t n = write(fds[1], ids.data(), ids.size());
        _exit(n == static_cast<ssize_t>(ids.size()) ? 0 : 1);
    }
    close(fds[1]);
    const std::string mine = random_hex(12) + chat::make_tool_id(chat::id_style::openai);
    std::string theirs(mine.size(), '\0');
    size_t got = 0;
    while (got < theirs.size()) {
        const ssize_t n = read(fds[0], theirs.data() + got, theirs.size() - got);
        if (n <= 0) break;
        got += static_cast<size_t>(n);
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_EQ(got, mine.size());
    EXPECT_NE(mine.substr(0, 24), theirs.substr(0, 24));
    EXPECT_NE(mine.substr(24), theirs.substr(24));
}

// ---------------------------------------------------------------------------------------------
// A live server
// ---------------------------------------------------------------------------------------------

const Engine* engine() {
    return test::default_engine();
}

server_options options() {
    server_options o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.n_ctx = 1024;
    o.default_max_tokens = 8;
    o.max_body_bytes = 1 << 20;
    o.keepalive_s = 1;
    return o;
}

server* live_server() {
    static std::unique_ptr<server> s = []() -> std::unique_ptr<server> {
        if (!engine()) return nullptr;
        auto p = std::make_unique<server>(*engine(), options());
        if (!p->start()) return nullptr;
        return p;
    }();
    return s.get();
}

#define REQUIRE_SERVER()                                                    \
    do {                                                                    \
        if (!engine()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing"; \
        ASSERT_NE(live_server(), nullptr);                                  \
    } while (0)

httplib::Client client(int port) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    c.set_connection_timeout(5, 0);
    return c;
}

json post(int port, const std::string& path, const json& body, int* status) {
    auto c = client(port);
    auto r = c.Post(path, body.dump(), "application/json");
    *status = r ? r->status : -1;
    return r ? json::parse(r->body, nullptr, false) : json();
}

TEST(RequestValidation, MaxTokensDefaultAndRequired) {
    EXPECT_EQ(server_options{}.default_max_tokens, 32768);  // documented in docs/server.md
    REQUIRE_SERVER();
    const int port = live_server()->port();
    int st = 0;
    // OpenAI without max_tokens: the server default (8 here), never more.
    const json a = post(port, "/v1/chat/completions",
                        json::parse(R"({"messages":[{"role":"user","content":"Talk."}],
                                        "thinking":false,"seed":1})"),
                        &st);
    ASSERT_EQ(st, 200) << a.dump();
    EXPECT_LE(a["usage"]["completion_tokens"].get<int>(), 8);
    EXPECT_TRUE(std::regex_match(a["id"].get<std::string>(), std::regex("chatcmpl-[0-9a-f]{24}")));
    // Above the free context: clamped, not refused (clients send their model's maximum).
    const json b = post(port, "/v1/chat/completions",
                        json::parse(R"({"messages":[{"role":"user","content":"Hi"}],
                                        "thinking":false,"max_tokens":100000,
                                        "x_magnetar_forced_output":"ok"})"),
                        &st);
    EXPECT_EQ(st, 200) << b.dump();
    // Anthropic requires max_tokens, as the real API does.
    const json m = post(port, "/v1/messages",
                        json::parse(R"({"messages":[{"role":"user","content":"Hi"}]})"), &st);
    EXPECT_EQ(st, 400);
    EXPECT_EQ(m["type"], "error");
    EXPECT_EQ(m["error"]["type"], "invalid_request_error");
    EXPECT_EQ(m["error"]["message"], "missing max_tokens");
    const json ok =
        post(port, "/v1/messages", json::parse(R"({"messages":[{"role":"user","content":"Hi"}],
                                         "max_tokens":2})"),
             &st);
    ASSERT_EQ(st, 200) << ok.dump();
    EXPECT_TRUE(std::regex_match(ok["id"].get<std::string>(), std::regex("msg_[0-9a-f]{24}")));
}

std::string corpus_body(const json& entry) {
    std::string body;
    if (auto b = entry.find("body"); b != entry.end()) {
        body = b->get<std::string>();
    } else if (auto parts = entry.find("parts"); parts != entry.end()) {
        for (const auto& part : *parts) {
            const std::string text = part.at(0).get<std::string>();
            const int64_t count = part.at(1).get<int64_t>();
            const bool indexed = text.find('%') != std::string::npos;
            for (int64_t i = 0; i < count; ++i) {
                if (!indexed) {
                    body += text;
                    continue;
                }
                for (char c : text) {
                    if (c == '%')
                        body += std::to_string(i);
                    else
                        body += c;
                }
            }
        }
    }
    if (entry.value("latin1", false)) {
        // UTF-8 code points below 256 -> single bytes.
        std::string raw;
        for (size_t i = 0; i < body.size(); ++i) {
            const auto c = static_cast<unsigned char>(body[i]);
            if ((c == 0xC2 || c == 0xC3) && i + 1 < body.size()) {
                raw += static_cast<char>(((c & 0x03) << 6) |
                                         (static_cast<unsigned char>(body[i + 1]) & 0x3F));
                ++i;
            } else {
                raw += body[i];
            }
        }
        body = std::move(raw);
    }
    return body;
}

TEST(RequestValidation, MalformedCorpusIsAnswered4xxFast) {
    REQUIRE_SERVER();
    std::ifstream in(std::string(MAGNETAR_SOURCE_DIR) +
                     "/tests/server/data/malformed_requests.jsonl");
    ASSERT_TRUE(in) << "tests/server/data/malformed_requests.jsonl missing";
    server& srv = *live_server();
    const int port = srv.port();
    std::set<std::string> paths;
    size_t n = 0;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        const json entry = json::parse(line);
        const std::string name = entry.at("name");
        const std::string path = entry.at("path");
        const std::string body = corpus_body(entry);
        paths.insert(path);
        ++n;
        auto c = client(port);
        const auto t0 = std::chrono::steady_clock::now();
        auto r = entry.value("method", std::string("POST")) == "GET"
                     ? c.Get(path)
                     : c.Post(path, body, "application/json");
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ASSERT_TRUE(r) << name << ": " << httplib::to_string(r.error());
        EXPECT_GE(r->status, 400) << name << ": " << r->body;
        EXPECT_LT(r->status, 500) << name << ": " << r->body;
        EXPECT_EQ(r->status, entry.value("expect", 400)) << name << ": " << r->body;
        EXPECT_LT(s, 1.0) << name;
        json e = json::parse(r->body, nullptr, false);
        ASSERT_TRUE(e.is_object()) << name << ": " << r->body;
        // OpenAI {"error":{message,type,param,code}}, Anthropic {"type":"error","error":{...}}.
        if (path.rfind("/v1/messages", 0) == 0) {
            EXPECT_EQ(e["type"], "error") << name;
        }
        json err = e["error"];
        ASSERT_TRUE(err.is_object()) << name << ": " << r->body;
        ASSERT_TRUE(err["message"].is_string()) << name;
        EXPECT_TRUE(err["type"].is_string()) << name;
        if (r->status == 400) {
            EXPECT_EQ(err["type"], "invalid_request_error") << name;
        }
        if (auto p = entry.find("param"); p != entry.end()) {
            EXPECT_EQ(err["param"], *p) << name << ": " << r->body;
        }
        if (auto h = entry.find("message_has"); h != entry.end()) {
            EXPECT_NE(err["message"].get<std::string>().find(h->get<std::string>()),
                      std::string::npos)
                << name << ": " << r->body;
        }
    }
    EXPECT_GE(n, 100u);
    for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/responses",
                          "/v1/messages", "/v1/messages/count_tokens"}) {
        EXPECT_TRUE(paths.count(p)) << p;
    }
    // None reached the worker as a 5xx, and the server still serves.
    const std::string metrics = srv.metrics_text();
    EXPECT_NE(metrics.find("magnetar_http_errors_5xx_total 0"), std::string::npos);
    int st = 0;
    post(port, "/v1/chat/completions",
         json::parse(R"({"messages":[{"role":"user","content":"still there?"}],"max_tokens":1})"),
         &st);
    EXPECT_EQ(st, 200);
}

}  // namespace
}  // namespace magnetar::server
