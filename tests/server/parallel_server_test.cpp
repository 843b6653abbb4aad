// Several live sessions (--parallel): concurrent greedy and seeded streams give each the text
// of running it alone while their decode steps are batched (the metrics count the shared
// steps); each conversation keeps its own session between requests (the continuation reuses
// its whole prompt); a long prompt is prefilled in pieces with decode steps of a running
// stream in between; the KV budget caps the sessions; /metrics has one gauge row per slot.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "raw_http.h"
#include "server/server.h"
#include "server_fixture.h"

namespace magnetar::server {
namespace {

using namespace server_fixture;
using namespace raw_http;
using clock_type = std::chrono::steady_clock;

// A streaming request on a raw connection: the arrival time of every SSE delta with content
// text (the opening one has an empty content).
std::vector<clock_type::time_point> delta_times(int port, const json& body,
                                                std::atomic<bool>* started = nullptr) {
    std::vector<clock_type::time_point> out;
    const int fd = connect_from(port);
    if (fd < 0) return out;
    send_str(fd, request("POST", "/v1/chat/completions", body.dump()));
    size_t seen = 0;
    recv_until(fd, 120, [&](const std::string& got) {
        const std::string key = "\"content\":\"";
        for (size_t p; (p = got.find(key, seen)) != std::string::npos;) {
            if (p + key.size() >= got.size()) break;  // its text not read yet
            seen = p + 1;
            if (got[p + key.size()] == '"') continue;
            out.push_back(clock_type::now());
            if (started) *started = true;
        }
        return got.find("[DONE]") != std::string::npos;
    });
    ::close(fd);
    return out;
}

std::unique_ptr<server> start_server(int parallel, int64_t piece = 256, uint64_t budget = 0) {
    server_options o = test_options();
    o.parallel = parallel;
    o.prefill_piece = piece;
    o.kv_budget_bytes = budget;
    auto s = std::make_unique<server>(*shared_engine(), o);
    EXPECT_TRUE(s->start()) << s->start_error();
    return s;
}

json chat(const std::string& user, int max_tokens, bool greedy) {
    json b{{"model", "deepseek-v4-flash"},
           {"messages", json::array({json{{"role", "user"}, {"content", user}}})},
           {"max_tokens", max_tokens},
           {"thinking", false}};
    if (greedy) {
        b["temperature"] = 0;
    } else {
        b["seed"] = 7;
        b["temperature"] = 0.9;
    }
    return b;
}

std::string content_of(const json& a) {
    return a.is_object() ? a["choices"][0]["message"]["content"].get<std::string>() : "<none>";
}

// Four prompts, greedy and seeded: alone on a one-session server, then all at once on a
// four-session one.
TEST(ParallelServer, ConcurrentStreamsEqualRunningAlone) {
    REQUIRE_MODEL();
    const std::vector<std::string> prompts = {
        "Tell me about the outer moons.", "What is a comet made of?",
        "Describe the ring system of the sixth planet in detail.", "Hello"};
    for (const bool greedy : {true, false}) {
        std::vector<std::string> alone;
        {
            const auto one = start_server(1);
            for (const std::string& p : prompts) {
                int st = 0;
                const json a =
                    post_json(one->port(), "/v1/chat/completions", chat(p, 40, greedy), &st);
                ASSERT_EQ(st, 200);
                alone.push_back(content_of(a));
            }
        }
        const auto four = start_server(4);
        std::vector<std::string> got(prompts.size());
        std::vector<std::thread> threads;
        for (size_t i = 0; i < prompts.size(); ++i) {
            threads.emplace_back([&, i] {
                int st = 0;
                const json a = post_json(four->port(), "/v1/chat/completions",
                                         chat(prompts[i], 40, greedy), &st);
                got[i] = st == 200 ? content_of(a) : "status " + std::to_string(st);
            });
        }
        for (auto& t : threads) t.join();
        for (size_t i = 0; i < prompts.size(); ++i)
            EXPECT_EQ(got[i], alone[i]) << (greedy ? "greedy" : "seeded") << " prompt " << i;
        const std::string m = four->metrics_text();
        EXPECT_GT(metric(m, "magnetar_batched_steps_total"), 0) << m;
        EXPECT_GE(metric(m, "magnetar_slots"), 2);
    }
}

// Two conversations on two sessions: the second request does not take the first one's session,
// so the first conversation's next turn reuses its whole previous prompt.
TEST(ParallelServer, EachConversationKeepsItsSession) {
    REQUIRE_MODEL();
    const auto two = start_server(2);
    const int port = two->port();
    const std::string a = "Planet notes: the inner world has a thin atmosphere and two moons.";
    const std::string b = "A different story about a comet falling toward the star.";
    int st = 0;
    const json first = post_json(port, "/v1/chat/completions", chat(a, 6, true), &st);
    ASSERT_EQ(st, 200);
    const int64_t first_prompt = first["usage"]["prompt_tokens"];
    ASSERT_EQ(post_json(port, "/v1/chat/completions", chat(b, 6, true), &st).is_object(), true);
    ASSERT_EQ(st, 200);
    json next = chat(a, 6, true);
    next["messages"].push_back({{"role", "assistant"}, {"content", content_of(first)}});
    next["messages"].push_back({{"role", "user"}, {"content", "And the moons?"}});
    const json again = post_json(port, "/v1/chat/completions", next, &st);
    ASSERT_EQ(st, 200);
    EXPECT_GE(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
              first_prompt - 1)
        << again.dump();
    const std::string m = two->metrics_text();
    EXPECT_EQ(metric(m, "magnetar_slots"), 2);
    EXPECT_NE(m.find("magnetar_context_tokens{slot=\"1\"}"), std::string::npos) << m;
}

// A long prompt arriving while a stream runs is prefilled in pieces: the running stream keeps
// producing tokens before the new request's first token.
TEST(ParallelServer, ALongPromptDoesNotStallARunningStream) {
    REQUIRE_MODEL();
    const auto two = start_server(2, 16);
    const int port = two->port();
    std::string words;
    for (int i = 0; i < 300; ++i) words += "word" + std::to_string(i % 17) + " ";
    json running = chat("Count.", 400, true);
    running["stream"] = true;
    running["x_magnetar_forced_output"] = words;
    std::vector<clock_type::time_point> deltas;
    std::atomic<bool> started{false};
    std::thread t([&] { deltas = delta_times(port, running, &started); });
    while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::string long_prompt;
    for (int i = 0; i < 60; ++i) long_prompt += "The star is bright and the night is long. ";
    json late = chat(long_prompt, 2, true);
    late["stream"] = true;
    const auto submitted = clock_type::now();
    const std::vector<clock_type::time_point> late_deltas = delta_times(port, late);
    t.join();
    ASSERT_FALSE(late_deltas.empty());
    const clock_type::time_point first_token = late_deltas.front();
    ASSERT_NE(first_token, clock_type::time_point{});
    int during = 0;
    for (const auto& d : deltas)
        if (d > submitted && d < first_token) ++during;
    // The prompt has ~600 tokens: ~37 pieces of 16, a decode step of the stream after each.
    const auto ms = [&](clock_type::time_point x) {
        return std::chrono::duration<double, std::milli>(x - submitted).count();
    };
    EXPECT_GE(during, 20) << "stream deltas while the long prompt was prefilled; the stream had "
                          << deltas.size() << " from " << ms(deltas.front()) << " to "
                          << ms(deltas.back()) << " ms, the late request's first at "
                          << ms(first_token) << " ms";
}

// 64 clients at once on four sessions for a bounded time: every reply is its prompt's own (no
// crossed streams), none fails, and /health answers while they run.
TEST(ParallelServer, SixtyFourClientsGetTheirOwnReplies) {
    REQUIRE_MODEL();
    const auto four = start_server(4);
    const int port = four->port();
    constexpr int kVariants = 8, kClients = 64;
    std::vector<std::string> reference(kVariants);
    for (int v = 0; v < kVariants; ++v) {
        int st = 0;
        const json a = post_json(port, "/v1/chat/completions",
                                 chat("variant " + std::to_string(v), 6, true), &st);
        ASSERT_EQ(st, 200);
        reference[v] = content_of(a);
    }
    std::vector<std::string> got(kClients);
    std::vector<std::thread> threads;
    std::atomic<int> finished{0};
    const auto t0 = clock_type::now();
    for (int i = 0; i < kClients; ++i) {
        threads.emplace_back([&, i] {
            int st = 0;
            const json a =
                post_json(port, "/v1/chat/completions",
                          chat("variant " + std::to_string(i % kVariants), 6, true), &st);
            got[i] = st == 200 ? content_of(a) : "status " + std::to_string(st);
            ++finished;
        });
    }
    int health_ok = 0;
    while (finished < kClients && clock_type::now() - t0 < std::chrono::seconds(120)) {
        auto c = client(port);
        if (auto r = c.Get("/health"); r && r->status == 200) ++health_ok;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (auto& t : threads) t.join();
    EXPECT_LT(clock_type::now() - t0, std::chrono::seconds(120));
    for (int i = 0; i < kClients; ++i) EXPECT_EQ(got[i], reference[i % kVariants]) << i;
    EXPECT_GT(health_ok, 0);
    EXPECT_GT(metric(four->metrics_text(), "magnetar_batched_steps_total"), 0);
}

TEST(ParallelServer, TheKvBudgetCapsTheSessions) {
    REQUIRE_MODEL();
    // Room for two sessions' KV state, of four allowed.
    std::unique_ptr<Session> probe;
    session_options so;
    so.n_ctx = test_options().n_ctx;
    ASSERT_TRUE(shared_engine()->create_session(so, &probe).ok());
    const uint64_t one = probe->memory().cache_bytes();
    const auto srv = start_server(4, 256, 2 * one + one / 2);
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&, i] {
            int st = 0;
            post_json(srv->port(), "/v1/chat/completions",
                      chat("budget " + std::to_string(i), 12, true), &st);
            EXPECT_EQ(st, 200);
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(metric(srv->metrics_text(), "magnetar_slots"), 2);
    // A budget below one session is refused at start with the numbers.
    server_options o = test_options();
    o.kv_budget_bytes = one / 2;
    try {
        server s(*shared_engine(), o);
        ADD_FAILURE() << "a budget below one session was accepted";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("more than the KV memory budget"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace magnetar::server
