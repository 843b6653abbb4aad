// Speculative decoding in the server (--mtp-draft): on the trained default model, a server that
// speculates answers every request exactly as one that does not (greedy and seeded sampled
// chat, stop sequences, log-probabilities, tool calls with greedy DSML syntax, completions,
// Anthropic messages), keeps the same KV timeline (a second turn reuses as much), reports its
// drafts in usage.magnetar_speculation and in /metrics.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/server.h"
#include "server/server_fixture.h"

namespace magnetar::server {
namespace {

using namespace server_fixture;

server& server_with(int mtp_draft) {
    static std::unique_ptr<server> servers[8];
    std::unique_ptr<server>& s = servers[mtp_draft];
    if (!s) {
        server_options o = test_options();
        o.mtp_draft = mtp_draft;
        s = std::make_unique<server>(*shared_engine(), o);
        EXPECT_TRUE(s->start());
    }
    return *s;
}

json chat(const std::string& user, int max_tokens, const json& extra = json::object()) {
    json b{{"model", "deepseek-v4-flash"},
           {"messages", json::array({json{{"role", "user"}, {"content", user}}})},
           {"max_tokens", max_tokens},
           {"thinking", false},
           {"seed", 42},
           {"temperature", 0}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
}

// The response without the fields that differ between runs of any server.
json stable(json r) {
    r.erase("id");
    r.erase("created");
    if (r.contains("usage")) r["usage"].erase("magnetar_speculation");
    if (r.contains("choices")) {
        for (auto& c : r["choices"]) {
            if (!c.contains("message") || !c["message"].contains("tool_calls")) continue;
            for (auto& call : c["message"]["tool_calls"]) call.erase("id");
        }
    }
    if (r.contains("content") && r["content"].is_array()) {
        for (auto& part : r["content"]) part.erase("id");
    }
    return r;
}

TEST(ServerSpeculation, SameAnswersAsWithout) {
    REQUIRE_MODEL();
    const json tools = json::array({json{{"type", "function"},
                                         {"function",
                                          {{"name", "read_file"},
                                           {"description", "Read a file of the project"},
                                           {"parameters",
                                            {{"type", "object"},
                                             {"properties", {{"path", {{"type", "string"}}}}},
                                             {"required", json::array({"path"})}}}}}}});
    const std::vector<std::pair<std::string, json>> cases = {
        {"/v1/chat/completions", chat("What is a magnetar?", 80)},
        {"/v1/chat/completions", chat("Tell me about neutron stars.", 80, {{"temperature", 0.8}})},
        {"/v1/chat/completions",
         chat("What is a magnetar?", 80, {{"stop", json::array({"field"})}})},
        // Penalties: the look-ahead's choices enter the history in the order the loop takes them.
        {"/v1/chat/completions",
         chat("What is a magnetar?", 80, {{"frequency_penalty", 2}, {"presence_penalty", 2}})},
        {"/v1/chat/completions", chat("Tell me about neutron stars.", 80,
                                      {{"temperature", 0.8}, {"frequency_penalty", -2}})},
        {"/v1/chat/completions",
         chat("What is a magnetar?", 40, {{"logprobs", true}, {"top_logprobs", 3}})},
        {"/v1/chat/completions",
         chat("Open the file notes/todo.md and tell me what is left.", 120, {{"tools", tools}})},
        {"/v1/completions",
         json{{"model", "m"}, {"prompt", "Magnetars are"}, {"max_tokens", 60}, {"seed", 3}}},
        // Thinking off: in thinking mode the server samples at its own temperature with a fresh
        // seed, which no two servers share.
        {"/v1/messages",
         json{{"model", "m"},
              {"max_tokens", 60},
              {"temperature", 0},
              {"thinking", {{"type", "disabled"}}},
              {"messages",
               json::array({json{{"role", "user"}, {"content", "Why do stars spin?"}}})}}},
    };
    int64_t drafted = 0;
    for (const auto& [path, body] : cases) {
        int st = 0;
        const json plain = post_json(server_with(0).port(), path, body, &st);
        ASSERT_EQ(st, 200) << plain.dump();
        for (int draft : {2, 4}) {
            const json spec = post_json(server_with(draft).port(), path, body, &st);
            ASSERT_EQ(st, 200) << spec.dump();
            EXPECT_EQ(stable(plain), stable(spec)) << path << " " << body.dump();
            EXPECT_FALSE(plain["usage"].contains("magnetar_speculation"));
            if (spec["usage"].contains("magnetar_speculation")) {
                const json& x = spec["usage"]["magnetar_speculation"];
                EXPECT_GE(x["drafted_tokens"].get<int64_t>(), x["accepted_tokens"].get<int64_t>());
                EXPECT_GE(x["mean_tokens_per_step"].get<double>(), 1.0);
                drafted += x["drafted_tokens"].get<int64_t>();
            }
        }
    }
    EXPECT_GT(drafted, 100);
    const std::string m = server_with(2).metrics_text();
    EXPECT_NE(m.find("magnetar_mtp_accepted_tokens_total "), std::string::npos) << m;
    EXPECT_EQ(
        server_with(0).metrics_text().find("magnetar_mtp_steps_total 0\n") != std::string::npos,
        true);
}

// A second turn reuses exactly as much of the KV as without speculation: the kept drafts never
// run past the tokens the reply ends with.
TEST(ServerSpeculation, SecondTurnReusesTheSameTokens) {
    REQUIRE_MODEL();
    int cached[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
        const int port = server_with(k == 0 ? 0 : 3).port();
        int st = 0;
        json body = chat("Describe the sky of a magnetar.", 50, {{"stop", json::array({"."})}});
        const json a = post_json(port, "/v1/chat/completions", body, &st);
        ASSERT_EQ(st, 200);
        body["messages"].push_back(
            json{{"role", "assistant"}, {"content", a["choices"][0]["message"]["content"]}});
        body["messages"].push_back(json{{"role", "user"}, {"content", "And its surface?"}});
        const json b = post_json(port, "/v1/chat/completions", body, &st);
        ASSERT_EQ(st, 200);
        cached[k] = b["usage"]["prompt_tokens_details"]["cached_tokens"];
    }
    EXPECT_EQ(cached[0], cached[1]);
}

}  // namespace
}  // namespace magnetar::server
