// The Responses API (/v1/responses) of the HTTP server on loopback against the tiny model:
// non-streaming and streaming shapes, event order, function calls and their outputs,
// previous_response_id continuation and validation errors. Tool-call and reasoning shapes use
// the forced-output test hook (server_options::test_hooks).
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "server/response_store.h"
#include "server/server.h"
#include "server/server_fixture.h"

namespace magnetar::server {
namespace {

using json = nlohmann::ordered_json;
using namespace server_fixture;

json responses_tools() {
    return json::array(
        {json{{"type", "function"},
              {"name", "get_weather"},
              {"description", "Weather of a city"},
              {"parameters",
               {{"type", "object"},
                {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
                {"required", json::array({"city"})}}}}});
}

json responses_body(const json& input, int max_tokens = 4) {
    return json{{"model", "deepseek-v4-flash"},
                {"input", input},
                {"max_output_tokens", max_tokens},
                {"reasoning", {{"effort", "none"}}},
                {"seed", 42}};
}

// The events of a Responses stream: every one is a data line with type and consecutive
// sequence numbers from 0.
std::vector<json> responses_events(const std::string& sse) {
    std::vector<json> out;
    for (const auto& e : parse_sse(sse)) {
        EXPECT_TRUE(e.event.empty()) << e.event;
        const json d = json::parse(e.data, nullptr, false);
        EXPECT_FALSE(d.is_discarded()) << e.data;
        if (d.is_discarded()) continue;
        auto it = d.begin();
        EXPECT_EQ(it.key(), "type");
        ++it;
        EXPECT_EQ(it.key(), "sequence_number");
        EXPECT_EQ(d["sequence_number"].get<size_t>(), out.size());
        out.push_back(d);
    }
    return out;
}

void expect_usage(const json& u) {
    ASSERT_TRUE(u.is_object()) << u.dump();
    EXPECT_GT(u["input_tokens"].get<int>(), 0);
    EXPECT_TRUE(u["input_tokens_details"]["cached_tokens"].is_number());
    EXPECT_TRUE(u["output_tokens_details"]["reasoning_tokens"].is_number());
    EXPECT_EQ(u["total_tokens"].get<int>(),
              u["input_tokens"].get<int>() + u["output_tokens"].get<int>());
}

TEST(Server, ResponsesNonStreamingShape) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    int st = 0;
    json body = responses_body("Hello there");
    body["instructions"] = "Be brief.";
    const json a = post_json(port, "/v1/responses", body, &st);
    ASSERT_EQ(st, 200) << a.dump();
    EXPECT_EQ(a["id"].get<std::string>().rfind("resp_", 0), 0u);
    EXPECT_EQ(a["id"].get<std::string>().size(), 5u + 24u);
    EXPECT_EQ(a["object"], "response");
    EXPECT_EQ(a["model"], "deepseek-v4-flash");
    EXPECT_EQ(a["instructions"], "Be brief.");
    EXPECT_TRUE(a["status"] == "completed" || a["status"] == "incomplete") << a.dump();
    expect_usage(a["usage"]);
    EXPECT_LE(a["usage"]["output_tokens"].get<int>(), 4);
    EXPECT_EQ(a["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
    for (const auto& item : a["output"]) EXPECT_EQ(item["type"], "message");
    if (a["status"] == "incomplete") {
        EXPECT_EQ(a["incomplete_details"]["reason"], "max_output_tokens");
    }

    // Thinking with a summary: a reasoning item, then the message.
    body = responses_body("Hi", 40);
    body["reasoning"] = {{"effort", "high"}, {"summary", "auto"}};
    body["x_magnetar_forced_output"] = "ponder</think>Hello.";
    const json b = post_json(port, "/v1/responses", body, &st);
    ASSERT_EQ(st, 200) << b.dump();
    EXPECT_EQ(b["status"], "completed");
    ASSERT_EQ(b["output"].size(), 2u) << b.dump();
    const json& rs = b["output"][0];
    EXPECT_EQ(rs["type"], "reasoning");
    EXPECT_EQ(rs["id"].get<std::string>().rfind("rs_", 0), 0u);
    EXPECT_EQ(rs["summary"][0]["type"], "summary_text");
    EXPECT_EQ(rs["summary"][0]["text"], "ponder");
    const json& msg = b["output"][1];
    EXPECT_EQ(msg["type"], "message");
    EXPECT_EQ(msg["id"].get<std::string>().rfind("msg_", 0), 0u);
    EXPECT_EQ(msg["role"], "assistant");
    EXPECT_EQ(msg["status"], "completed");
    EXPECT_EQ(msg["content"][0]["type"], "output_text");
    EXPECT_EQ(msg["content"][0]["text"], "Hello.");
    EXPECT_TRUE(msg["content"][0]["annotations"].is_array());
    EXPECT_GT(b["usage"]["output_tokens_details"]["reasoning_tokens"].get<int>(), 0);
    EXPECT_LT(b["usage"]["output_tokens_details"]["reasoning_tokens"].get<int>(),
              b["usage"]["output_tokens"].get<int>());
    // Without a summary the reasoning is generated but not shown.
    body["reasoning"].erase("summary");
    const json c = post_json(port, "/v1/responses", body, &st);
    ASSERT_EQ(st, 200) << c.dump();
    ASSERT_EQ(c["output"].size(), 1u);
    EXPECT_EQ(c["output"][0]["type"], "message");
}

TEST(Server, ResponsesStreamingEventOrder) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    json body = responses_body("Hi", 40);
    body["reasoning"] = {{"effort", "high"}, {"summary", "detailed"}};
    body["x_magnetar_forced_output"] = "ponder more</think>Hello there.";
    body["stream"] = true;
    int st = 0;
    const auto events = responses_events(post_stream(port, "/v1/responses", body, &st));
    ASSERT_EQ(st, 200);
    std::vector<std::string> types;
    std::string reasoning, text;
    for (const auto& e : events) {
        const std::string t = e["type"];
        if (types.empty() || types.back() != t) types.push_back(t);  // collapse delta runs
        if (t == "response.reasoning_summary_text.delta") {
            reasoning += e["delta"].get<std::string>();
        }
        if (t == "response.output_text.delta") {
            EXPECT_EQ(e["output_index"], 1);
            EXPECT_EQ(e["content_index"], 0);
            text += e["delta"].get<std::string>();
        }
    }
    const std::vector<std::string> expected = {"response.created",
                                               "response.in_progress",
                                               "response.output_item.added",
                                               "response.reasoning_summary_part.added",
                                               "response.reasoning_summary_text.delta",
                                               "response.reasoning_summary_text.done",
                                               "response.reasoning_summary_part.done",
                                               "response.output_item.done",
                                               "response.output_item.added",
                                               "response.content_part.added",
                                               "response.output_text.delta",
                                               "response.output_text.done",
                                               "response.content_part.done",
                                               "response.output_item.done",
                                               "response.completed"};
    EXPECT_EQ(types, expected);
    EXPECT_EQ(reasoning, "ponder more");
    EXPECT_EQ(text, "Hello there.");
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events[0]["response"]["status"], "in_progress");
    EXPECT_TRUE(events[0]["response"]["output"].empty());
    const json& fin = events.back()["response"];
    EXPECT_EQ(fin["id"], events[0]["response"]["id"]);
    EXPECT_EQ(fin["status"], "completed");
    ASSERT_EQ(fin["output"].size(), 2u);
    EXPECT_EQ(fin["output"][0]["summary"][0]["text"], "ponder more");
    EXPECT_EQ(fin["output"][1]["content"][0]["text"], "Hello there.");
    expect_usage(fin["usage"]);
    // The done events carry the full texts and the final items.
    for (const auto& e : events) {
        if (e["type"] == "response.output_text.done") {
            EXPECT_EQ(e["text"], "Hello there.");
        }
        if (e["type"] == "response.output_item.done") {
            EXPECT_EQ(e["item"]["status"], "completed");
            EXPECT_EQ(e["item"], fin["output"][e["output_index"].get<size_t>()]);
        }
    }
}

TEST(Server, ResponsesFunctionCallsAndOutputRoundTrip) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    const json expected_args = json::parse(R"({"city":"Paris & Lyon","days":3})");
    json body = responses_body("Weather in Paris?", 200);
    body["tools"] = responses_tools();
    body["x_magnetar_forced_output"] = kToolDsml;
    int st = 0;
    const json a = post_json(port, "/v1/responses", body, &st);
    ASSERT_EQ(st, 200) << a.dump();
    EXPECT_EQ(a["status"], "completed");
    ASSERT_EQ(a["output"].size(), 2u) << a.dump();
    EXPECT_EQ(a["output"][0]["content"][0]["text"], "Let me check.");
    const json& fc = a["output"][1];
    EXPECT_EQ(fc["type"], "function_call");
    EXPECT_EQ(fc["id"].get<std::string>().rfind("fc_", 0), 0u);
    EXPECT_EQ(fc["call_id"].get<std::string>().rfind("call_", 0), 0u);
    EXPECT_EQ(fc["name"], "get_weather");
    EXPECT_EQ(fc["status"], "completed");
    EXPECT_EQ(json::parse(fc["arguments"].get<std::string>()), expected_args);

    // Round trip with the full history: the sampled block is replayed byte for byte, so
    // everything before the tool output comes from the live KV.
    const int p1 = a["usage"]["input_tokens"];
    const int c1 = a["usage"]["output_tokens"];
    json next = body;
    next.erase("x_magnetar_forced_output");
    next["max_output_tokens"] = 2;
    next["input"] = json::array({json{{"role", "user"}, {"content", "Weather in Paris?"}}});
    for (const auto& item : a["output"]) next["input"].push_back(item);
    next["input"].push_back(
        json{{"type", "function_call_output"}, {"call_id", fc["call_id"]}, {"output", "sunny"}});
    const json b = post_json(port, "/v1/responses", next, &st);
    ASSERT_EQ(st, 200) << b.dump();
    EXPECT_GE(b["usage"]["input_tokens_details"]["cached_tokens"].get<int>(), p1 + c1);

    // Thinking with reasoning summaries: the replayed summary restores the reasoning of the
    // tool-call turn, so the re-render still matches the live KV (what Codex relies on).
    json think = body;
    think["reasoning"] = {{"effort", "high"}, {"summary", "detailed"}};
    think["x_magnetar_forced_output"] = std::string("ponder</think>") + kToolDsml;
    const json ta = post_json(port, "/v1/responses", think, &st);
    ASSERT_EQ(st, 200) << ta.dump();
    ASSERT_EQ(ta["output"].size(), 3u) << ta.dump();
    EXPECT_EQ(ta["output"][0]["type"], "reasoning");
    json think_next = think;
    think_next.erase("x_magnetar_forced_output");
    think_next["max_output_tokens"] = 2;
    think_next["input"] = json::array({json{{"role", "user"}, {"content", "Weather in Paris?"}}});
    for (const auto& item : ta["output"]) think_next["input"].push_back(item);
    think_next["input"].push_back(json{{"type", "function_call_output"},
                                       {"call_id", ta["output"][2]["call_id"]},
                                       {"output", "sunny"}});
    const json tb = post_json(port, "/v1/responses", think_next, &st);
    ASSERT_EQ(st, 200) << tb.dump();
    EXPECT_GE(tb["usage"]["input_tokens_details"]["cached_tokens"].get<int>(),
              ta["usage"]["input_tokens"].get<int>() + ta["usage"]["output_tokens"].get<int>());

    // Streaming: the call is announced when its invoke tag is complete, its arguments stream
    // as deltas, and the done events carry the authoritative arguments.
    body["stream"] = true;
    const auto events = responses_events(post_stream(port, "/v1/responses", body, &st));
    std::string args, text, call_id;
    int fc_index = -1;
    bool done_seen = false;
    for (const auto& e : events) {
        const std::string t = e["type"];
        if (t == "response.output_text.delta") text += e["delta"].get<std::string>();
        if (t == "response.output_item.added" && e["item"]["type"] == "function_call") {
            fc_index = e["output_index"];
            call_id = e["item"]["call_id"];
            EXPECT_EQ(e["item"]["arguments"], "");
            EXPECT_EQ(e["item"]["status"], "in_progress");
        }
        if (t == "response.function_call_arguments.delta") {
            EXPECT_EQ(e["output_index"], fc_index);
            args += e["delta"].get<std::string>();
        }
        if (t == "response.function_call_arguments.done") {
            done_seen = true;
            EXPECT_EQ(e["name"], "get_weather");
            EXPECT_EQ(json::parse(e["arguments"].get<std::string>()), expected_args);
        }
    }
    EXPECT_TRUE(done_seen);
    EXPECT_EQ(fc_index, 1);
    EXPECT_EQ(text, "Let me check.");
    EXPECT_EQ(call_id.rfind("call_", 0), 0u);
    EXPECT_EQ(json::parse(args), expected_args);
    const json& fin = events.back()["response"];
    EXPECT_EQ(events.back()["type"], "response.completed");
    ASSERT_EQ(fin["output"].size(), 2u);
    EXPECT_EQ(fin["output"][1]["call_id"], call_id);
}

TEST(Server, ResponsesPreviousResponseId) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    int st = 0;
    json body = responses_body("Tell me about Paris", 40);
    body["x_magnetar_forced_output"] = "Paris is nice.";
    const json a = post_json(port, "/v1/responses", body, &st);
    ASSERT_EQ(st, 200) << a.dump();
    const std::string id1 = a["id"];

    json next = responses_body("And Lyon?", 2);
    next["previous_response_id"] = id1;
    const json b = post_json(port, "/v1/responses", next, &st);
    ASSERT_EQ(st, 200) << b.dump();
    EXPECT_EQ(b["previous_response_id"], id1);
    // The remembered history re-renders the first turn, so it comes from the live KV.
    EXPECT_GE(b["usage"]["input_tokens_details"]["cached_tokens"].get<int>(),
              a["usage"]["input_tokens"].get<int>());
    EXPECT_GT(b["usage"]["input_tokens"].get<int>(), a["usage"]["input_tokens"].get<int>());

    // A tool-call turn continued with only the function_call_output.
    json t = responses_body("Weather in Paris?", 200);
    t["tools"] = responses_tools();
    t["x_magnetar_forced_output"] = kToolDsml;
    const json c = post_json(port, "/v1/responses", t, &st);
    ASSERT_EQ(st, 200) << c.dump();
    json t2 = responses_body(json::array({json{{"type", "function_call_output"},
                                               {"call_id", c["output"][1]["call_id"]},
                                               {"output", "sunny"}}}),
                             2);
    t2["tools"] = responses_tools();
    t2["previous_response_id"] = c["id"];
    const json d = post_json(port, "/v1/responses", t2, &st);
    ASSERT_EQ(st, 200) << d.dump();
    EXPECT_GE(d["usage"]["input_tokens_details"]["cached_tokens"].get<int>(),
              c["usage"]["input_tokens"].get<int>() + c["usage"]["output_tokens"].get<int>());

    // GET returns the stored object.
    auto cl = client(port);
    auto g = cl.Get("/v1/responses/" + id1);
    ASSERT_TRUE(g);
    EXPECT_EQ(g->status, 200);
    EXPECT_EQ(json::parse(g->body)["id"], id1);
    auto g404 = cl.Get("/v1/responses/resp_missing");
    ASSERT_TRUE(g404);
    EXPECT_EQ(g404->status, 404);

    // Unknown ids and store:false responses cannot be continued.
    next["previous_response_id"] = "resp_000000000000000000000000";
    const json e = post_json(port, "/v1/responses", next, &st);
    EXPECT_EQ(st, 400);
    EXPECT_EQ(e["error"]["code"], "previous_response_not_found");
    EXPECT_EQ(e["error"]["param"], "previous_response_id");
    body["store"] = false;
    const json ns = post_json(port, "/v1/responses", body, &st);
    ASSERT_EQ(st, 200);
    EXPECT_EQ(ns["store"], false);
    next["previous_response_id"] = ns["id"];
    post_json(port, "/v1/responses", next, &st);
    EXPECT_EQ(st, 400);
}

// item_reference input items (the AI SDK's Responses provider sends them in tool loops) stand
// for the items of a stored response: the tool loop continues with the same prompt as when the
// items are replayed in full, so the tool-call turn comes from the live KV; an unknown id is a
// 400 naming it.
TEST(Server, ResponsesItemReferences) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    int st = 0;
    json body = responses_body("Weather in Lyon?", 200);
    body["tools"] = responses_tools();
    body["x_magnetar_forced_output"] = kToolDsml;
    const json a = post_json(port, "/v1/responses", body, &st);
    ASSERT_EQ(st, 200) << a.dump();
    ASSERT_EQ(a["output"].size(), 2u) << a.dump();
    const json& fc = a["output"][1];
    auto continued = [&](bool by_reference) {
        json next = body;
        next.erase("x_magnetar_forced_output");
        next["max_output_tokens"] = 2;
        next["input"] = json::array({json{{"role", "user"}, {"content", "Weather in Lyon?"}}});
        for (const auto& item : a["output"]) {
            next["input"].push_back(
                by_reference ? json{{"type", "item_reference"}, {"id", item["id"]}} : item);
        }
        next["input"].push_back(
            json{{"type", "function_call_output"}, {"call_id", fc["call_id"]}, {"output", "rain"}});
        return next;
    };
    const json full = post_json(port, "/v1/responses", continued(false), &st);
    ASSERT_EQ(st, 200) << full.dump();
    const std::vector<int32_t> full_prompt = shared_server().last_prompt_tokens();
    const json ref = post_json(port, "/v1/responses", continued(true), &st);
    ASSERT_EQ(st, 200) << ref.dump();
    EXPECT_EQ(shared_server().last_prompt_tokens(), full_prompt);
    EXPECT_GE(ref["usage"]["input_tokens_details"]["cached_tokens"].get<int>(),
              a["usage"]["input_tokens"].get<int>() + a["usage"]["output_tokens"].get<int>());

    json bad = continued(true);
    bad["input"][1]["id"] = "fc_unknown";
    const json e = post_json(port, "/v1/responses", bad, &st);
    EXPECT_EQ(st, 400);
    EXPECT_NE(e["error"]["message"].get<std::string>().find(
                  "item_reference: no stored item with id 'fc_unknown'"),
              std::string::npos)
        << e.dump();
    EXPECT_EQ(e["error"]["param"], "input");
    bad["input"][1] = json{{"type", "item_reference"}};
    post_json(port, "/v1/responses", bad, &st);
    EXPECT_EQ(st, 400);
}

// The item index of the response store: an id held by several responses (an item_reference
// resolved and stored again by the response that used it) stays until the last of them is
// evicted.
TEST(ResponseStore, SharedItemIdsLiveWithTheirLastHolder) {
    response_store st(2);
    const json fc = {{"type", "function_call"}, {"id", "fc_1"}, {"name", "f"}};
    st.put("resp_1", "", json::array(), json{{"output", json::array({fc})}});
    st.put("resp_2", "resp_1", json::array({fc}), json{{"output", json::array()}});
    json got;
    st.put("resp_3", "resp_2", json::array(), json{{"output", json::array()}});  // evicts resp_1
    ASSERT_TRUE(st.item("fc_1", &got));
    EXPECT_EQ(got, fc);
    st.put("resp_4", "resp_3", json::array(), json{{"output", json::array()}});  // evicts resp_2
    EXPECT_FALSE(st.item("fc_1", &got));
    // A repeated response id is not stored twice and takes nothing away.
    const json fc2 = {{"type", "function_call"}, {"id", "fc_2"}};
    st.put("resp_4", "", json::array({fc2}), json{{"output", json::array()}});
    EXPECT_FALSE(st.item("fc_2", &got));
    EXPECT_EQ(st.size(), 2u);
}

TEST(Server, ResponsesValidationErrors) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    int st = 0;
    const std::vector<std::pair<std::string, json>> cases = {
        {"input", 42},
        {"input", json::array({json{{"type", "bogus"}}})},
        {"input", json::parse(R"([{"role":"user","content":[{"type":"input_image"}]}])")},
        {"input", json::array({json{{"role", "wizard"}, {"content", "x"}}})},
        {"input",
         json::parse(R"([{"type":"function_call_output","call_id":"call_x","output":"y"}])")},
        {"input", json::parse(R"([{"role":"user","content":"x","status":"in_progress"}])")},
        {"tool_choice", "required"},
        {"tool_choice", json{{"type", "function"}, {"name", "f"}}},
        {"reasoning", json{{"effort", "extreme"}}},
        {"reasoning", "high"},
        {"max_output_tokens", "many"},
        {"conversation", "conv_1"},
        {"tools", json::object()},
    };
    for (const auto& [key, value] : cases) {
        json body = responses_body("x");
        body[key] = value;
        const json e = post_json(port, "/v1/responses", body, &st);
        EXPECT_EQ(st, 400) << key << " = " << value.dump();
        EXPECT_TRUE(e["error"]["message"].is_string()) << e.dump();
        EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    }
    json missing = responses_body("x");
    missing.erase("input");
    EXPECT_EQ(post_json(port, "/v1/responses", missing, &st)["error"]["message"], "missing input");
    EXPECT_EQ(st, 400);
}

}  // namespace
}  // namespace magnetar::server
