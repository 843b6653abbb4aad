// Failures inside a job: an allocation that fails deep in the engine (simulated by the
// worker's test hook throwing std::bad_alloc) ends that request with 503 on every API,
// plain and streamed, and the server goes on serving the next request exactly as before.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <new>
#include <nlohmann/json.hpp>
#include <string>

#include "server/raw_http.h"
#include "server/server.h"
#include "support/default_engine.h"

namespace magnetar::server {
namespace {

using json = nlohmann::ordered_json;
using namespace raw_http;

std::string body_of(const std::string& r) {
    const size_t at = r.find("\r\n\r\n");
    return at == std::string::npos ? std::string() : r.substr(at + 4);
}

TEST(ServerFailure, OutOfMemoryIsA503AndTheServerStaysUp) {
    MAGNETAR_REQUIRE_DEFAULT_MODEL();
    std::atomic<int> fail_next{0};
    server_options o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.n_ctx = 1024;
    o.default_max_tokens = 4;
    o.http_threads = 4;
    // Sequential clients from one address: a closed connection is released by its HTTP
    // thread a moment later, so the per-client cap (tested in http_limits_test) stays out of
    // the way here.
    o.max_client_connections = 1024;
    o.test_before_job = [&] {
        if (fail_next.exchange(0) != 0) throw std::bad_alloc();
    };
    server srv(*test::default_engine(), o);
    ASSERT_TRUE(srv.start());
    const json chat{{"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})},
                    {"max_tokens", 3},
                    {"thinking", false},
                    {"temperature", 0}};
    const std::string before =
        exchange(srv.port(), request("POST", "/v1/chat/completions", chat.dump()), 60);
    ASSERT_EQ(status_of(before), 200) << before;

    const struct {
        const char* path;
        json body;
    } cases[] = {
        {"/v1/chat/completions", chat},
        {"/v1/completions",
         {{"prompt", "Hi"}, {"max_tokens", 3}, {"thinking", false}, {"temperature", 0}}},
        {"/v1/messages",
         {{"model", "m"},
          {"max_tokens", 3},
          {"messages", chat["messages"]},
          {"thinking", {{"type", "disabled"}}}}},
        {"/v1/responses",
         {{"model", "m"},
          {"max_output_tokens", 3},
          {"input", "Hi"},
          {"reasoning", {{"effort", "none"}}}}},
    };
    for (const auto& c : cases) {
        fail_next = 1;
        const std::string r = exchange(srv.port(), request("POST", c.path, c.body.dump()), 60);
        EXPECT_EQ(status_of(r), 503) << c.path << ": " << r;
        EXPECT_NE(body_of(r).find("out of memory"), std::string::npos) << r;
        json streamed = c.body;
        streamed["stream"] = true;
        fail_next = 1;
        const int fd = connect_from(srv.port());
        ASSERT_GE(fd, 0);
        send_str(fd, request("POST", c.path, streamed.dump()));
        const std::string s = recv_until(fd, 60, [](const std::string& got) {
            return got.find("\r\n0\r\n\r\n") != std::string::npos;  // the last chunk
        });
        ::close(fd);
        EXPECT_EQ(status_of(s), 200) << s;  // the stream had started: an error event
        EXPECT_NE(s.find("out of memory"), std::string::npos) << c.path << ": " << s;
    }
    const std::string after =
        exchange(srv.port(), request("POST", "/v1/chat/completions", chat.dump()), 60);
    ASSERT_EQ(status_of(after), 200) << after;
    EXPECT_EQ(json::parse(body_of(after))["choices"][0]["message"]["content"],
              json::parse(body_of(before))["choices"][0]["message"]["content"]);
    srv.stop();
}

}  // namespace
}  // namespace magnetar::server
