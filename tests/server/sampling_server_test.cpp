// The server's sampling defaults (serve --temp, the penalties) and the OpenAI penalty fields, on
// the tiny model: a completion equals the penalised greedy reference decoded over the public
// Session API (support/reference_decode.h); thinking modes keep the operator's defaults and
// ignore the client's knobs.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat_tokens.h"
#include "server/prompt.h"
#include "server/server_fixture.h"
#include "support/reference_decode.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::server {
namespace {

using namespace server_fixture;

constexpr int kTokens = 24;

// A server whose requests default to greedy with a repeat penalty over the whole reply.
server& penalised_server() {
    static std::unique_ptr<server> s = [] {
        server_options o = test_options();
        o.sampling.temperature = 0.0f;
        o.sampling.repeat_penalty = 1.6f;
        o.sampling.penalty_last_n = -1;
        auto p = std::make_unique<server>(*shared_engine(), o);
        if (!p->start()) return std::unique_ptr<server>();
        return p;
    }();
    return *s;
}

std::string reference(const std::string& text, chat::think_mode mode, const test::penalties& pen) {
    const Engine& e = *shared_engine();
    const tokenizer& tok = *e.vocab();
    const special_literals lits(tok);
    const prompt p = build_completion_prompt(tok, lits, text, mode, 1024);
    std::string out;
    for (int32_t id : test::penalised_greedy(e, p.tokens, kTokens, 1024, pen)) {
        out += e.token_bytes(id);
    }
    return out;
}

std::string complete(int port, json body) {
    body["max_tokens"] = kTokens;
    int st = 0;
    const json r = post_json(port, "/v1/completions", body, &st);
    EXPECT_EQ(st, 200) << r.dump();
    return r.is_object() ? r["choices"][0]["text"].get<std::string>() : std::string();
}

TEST(ServerSampling, OperatorDefaultsAndClientPenalties) {
    REQUIRE_MODEL();
    const int port = penalised_server().port();
    const std::string text = "What are magnetars?";
    const std::string plain = reference(text, chat::think_mode::nothink, {1.0, 0.0, 0.0, 64});
    const std::string operator_only =
        reference(text, chat::think_mode::nothink, {1.6, 0.0, 0.0, -1});
    EXPECT_NE(operator_only, plain)
        << "the repeat penalty changed nothing: the test proves nothing";
    // No temperature in the request: the operator's greedy default, whatever the seed.
    for (const int seed : {1, 2}) {
        EXPECT_EQ(complete(port, {{"prompt", text}, {"think", false}, {"seed", seed}}),
                  operator_only);
    }
    // The client's penalties add to the operator's.
    const std::string both = reference(text, chat::think_mode::nothink, {1.6, 0.5, 1.5, -1});
    EXPECT_NE(both, operator_only);
    EXPECT_EQ(complete(port, {{"prompt", text},
                              {"think", false},
                              {"frequency_penalty", 1.5},
                              {"presence_penalty", 0.5}}),
              both);
    EXPECT_EQ(complete(port, {{"prompt", text}, {"think", false}, {"presence_penalty", -2}}),
              reference(text, chat::think_mode::nothink, {1.6, -2.0, 0.0, -1}));
    // Thinking: the client's knobs are ignored, the operator's defaults stay.
    EXPECT_EQ(
        complete(
            port,
            {{"prompt", text}, {"think", true}, {"temperature", 1.5}, {"frequency_penalty", 2}}),
        reference(text, chat::think_mode::think, {1.6, 0.0, 0.0, -1}));
}

TEST(ServerSampling, PenaltiesAreRangeChecked) {
    REQUIRE_MODEL();
    const int port = shared_server().port();
    for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
             {"frequency_penalty", 2.5}, {"presence_penalty", -3}, {"frequency_penalty", "x"}}) {
        int st = 0;
        const json r = post_json(port, "/v1/completions", {{"prompt", "hi"}, {field, value}}, &st);
        EXPECT_EQ(st, 400) << field << " " << value.dump();
        EXPECT_EQ(r["error"]["param"], field) << r.dump();
    }
}

}  // namespace
}  // namespace magnetar::server
