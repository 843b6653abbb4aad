// tool_choice that requires a call, on the three APIs: Chat "required" / a named function,
// Anthropic "any" / "tool", Responses "required" / a named function. The reply starts inside a
// tool-call block (after </think> in thinking mode): the forced output of the test hook is only
// the rest of the block, so a call is parsed only when the server opened it. Refusals: no tools
// offered, an unknown name, a malformed choice.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/server_fixture.h"

namespace magnetar::server {
namespace {

using json = nlohmann::ordered_json;
using namespace server_fixture;

const json kSchema = {{"type", "object"},
                      {"properties", {{"city", {{"type", "string"}}}}},
                      {"required", json::array({"city"})}};

json chat_tools() {
    json out = json::array();
    for (const char* name : {"get_time", "get_weather"}) {
        out.push_back(
            json{{"type", "function"}, {"function", {{"name", name}, {"parameters", kSchema}}}});
    }
    return out;
}

// The rest of a call of get_weather after its invoke opening, and after the block opening.
const std::string kAfterInvoke =
    "<｜DSML｜parameter name=\"city\" string=\"true\">Oslo</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
const std::string kAfterBlock = "<｜DSML｜invoke name=\"get_weather\">\n" + kAfterInvoke;

json chat_request(const json& choice, const std::string& forced, bool thinking = false) {
    return json{{"messages", json::array({json{{"role", "user"}, {"content", "Weather?"}}})},
                {"max_tokens", 200},
                {"thinking", thinking},
                {"tools", chat_tools()},
                {"tool_choice", choice},
                {"x_magnetar_forced_output", forced}};
}

void expect_weather_call(const json& message) {
    ASSERT_TRUE(message.contains("tool_calls")) << message.dump();
    ASSERT_EQ(message["tool_calls"].size(), 1u) << message.dump();
    const json& fn = message["tool_calls"][0]["function"];
    EXPECT_EQ(fn["name"], "get_weather");
    EXPECT_EQ(json::parse(fn["arguments"].get<std::string>()), json({{"city", "Oslo"}}));
}

TEST(ToolChoice, ChatRequiredAndNamed) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    int st = 0;
    json a = post_json(port, "/v1/chat/completions", chat_request("required", kAfterBlock), &st);
    ASSERT_EQ(st, 200) << a.dump();
    EXPECT_EQ(a["choices"][0]["finish_reason"], "tool_calls");
    expect_weather_call(a["choices"][0]["message"]);
    // The reply starts with the call: no text before it.
    EXPECT_TRUE(a["choices"][0]["message"]["content"].is_null() ||
                a["choices"][0]["message"]["content"] == "")
        << a.dump();

    const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
    json b = post_json(port, "/v1/chat/completions", chat_request(named, kAfterInvoke), &st);
    ASSERT_EQ(st, 200) << b.dump();
    expect_weather_call(b["choices"][0]["message"]);

    // Thinking: the call opens once the reasoning is closed.
    json c = post_json(port, "/v1/chat/completions",
                       chat_request(named, "ponder</think>" + kAfterInvoke, true), &st);
    ASSERT_EQ(st, 200) << c.dump();
    EXPECT_EQ(c["choices"][0]["message"]["reasoning_content"], "ponder");
    expect_weather_call(c["choices"][0]["message"]);

    // A stop sequence is matched in the model's text, not in the forced opening (a stop
    // "\n\n" would otherwise end the reply before the call).
    json stopped = chat_request("required", kAfterBlock);
    stopped["stop"] = json::array({"\n\n"});
    json s = post_json(port, "/v1/chat/completions", stopped, &st);
    ASSERT_EQ(st, 200) << s.dump();
    expect_weather_call(s["choices"][0]["message"]);

    // Without the forced start the same continuation is no call at all.
    json d = post_json(port, "/v1/chat/completions", chat_request("auto", kAfterInvoke), &st);
    ASSERT_EQ(st, 200) << d.dump();
    EXPECT_FALSE(d["choices"][0]["message"].contains("tool_calls")) << d.dump();
}

TEST(ToolChoice, AnthropicAnyAndTool) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    json tools = json::array();
    for (const char* name : {"get_time", "get_weather"})
        tools.push_back(json{{"name", name}, {"input_schema", kSchema}});
    auto request = [&](const json& choice, const std::string& forced) {
        return json{{"max_tokens", 200},
                    {"thinking", {{"type", "disabled"}}},
                    {"messages", json::array({json{{"role", "user"}, {"content", "Weather?"}}})},
                    {"tools", tools},
                    {"tool_choice", choice},
                    {"x_magnetar_forced_output", forced}};
    };
    int st = 0;
    for (const auto& [choice, forced] :
         {std::pair{json{{"type", "any"}}, kAfterBlock},
          std::pair{json{{"type", "tool"}, {"name", "get_weather"}}, kAfterInvoke}}) {
        const json a = post_json(port, "/v1/messages", request(choice, forced), &st);
        ASSERT_EQ(st, 200) << a.dump();
        EXPECT_EQ(a["stop_reason"], "tool_use") << a.dump();
        ASSERT_FALSE(a["content"].empty());
        const json& use = a["content"].back();
        EXPECT_EQ(use["type"], "tool_use");
        EXPECT_EQ(use["name"], "get_weather");
        EXPECT_EQ(use["input"], json({{"city", "Oslo"}}));
        for (const auto& block : a["content"]) EXPECT_NE(block["type"], "text") << a.dump();
    }
    const json bad =
        post_json(port, "/v1/messages", request(json{{"type", "tool"}, {"name", "nope"}}, ""), &st);
    EXPECT_EQ(st, 400);
    EXPECT_NE(bad["error"]["message"].get<std::string>().find("names the tool 'nope'"),
              std::string::npos)
        << bad.dump();
}

TEST(ToolChoice, ResponsesRequiredAndNamed) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    json tools = json::array();
    for (const char* name : {"get_time", "get_weather"})
        tools.push_back(json{{"type", "function"}, {"name", name}, {"parameters", kSchema}});
    auto request = [&](const json& choice, const std::string& forced) {
        return json{{"input", "Weather?"},
                    {"max_output_tokens", 200},
                    {"tools", tools},
                    {"tool_choice", choice},
                    {"reasoning", {{"effort", "none"}}},
                    {"x_magnetar_forced_output", forced}};
    };
    int st = 0;
    for (const auto& [choice, forced] :
         {std::pair{json("required"), kAfterBlock},
          std::pair{json{{"type", "function"}, {"name", "get_weather"}}, kAfterInvoke}}) {
        const json a = post_json(port, "/v1/responses", request(choice, forced), &st);
        ASSERT_EQ(st, 200) << a.dump();
        ASSERT_FALSE(a["output"].empty()) << a.dump();
        const json& fc = a["output"].back();
        EXPECT_EQ(fc["type"], "function_call") << a.dump();
        EXPECT_EQ(fc["name"], "get_weather");
        EXPECT_EQ(json::parse(fc["arguments"].get<std::string>()), json({{"city", "Oslo"}}));
        EXPECT_EQ(a["tool_choice"], choice);
    }
}

TEST(ToolChoice, RefusalsNameTheProblem) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    int st = 0;
    json no_tools = chat_request("required", "");
    no_tools.erase("tools");
    json e = post_json(port, "/v1/chat/completions", no_tools, &st);
    EXPECT_EQ(st, 400);
    EXPECT_EQ(e["error"]["message"], "tool_choice requires a tool call, but no tools are offered")
        << e.dump();
    EXPECT_EQ(e["error"]["param"], "tool_choice");
    e = post_json(port, "/v1/chat/completions",
                  chat_request({{"type", "function"}, {"function", {{"name", "nope"}}}}, ""), &st);
    EXPECT_EQ(st, 400);
    EXPECT_EQ(e["error"]["message"],
              "tool_choice names the tool 'nope', which is not among the tools offered");
    e = post_json(port, "/v1/responses",
                  json{{"input", "x"}, {"tool_choice", {{"type", "function"}}}}, &st);
    EXPECT_EQ(st, 400) << e.dump();
}

}  // namespace
}  // namespace magnetar::server
