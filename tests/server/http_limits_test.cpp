// The transport limits of the HTTP server (tools/server/http_guard.h) against hostile clients on
// loopback, with raw sockets: header count, header bytes and request-line limits; the body limit
// on every transfer encoding; header and body deadlines (slowloris); connections per client;
// half-closed clients; HTTP/1.0 streaming; keep-alive latency (TCP_NODELAY); the memory left
// after large rejected bodies; the constant-time key compare. Every loop is bounded in count and
// time; the slow clients use 127.0.0.2 so that 127.0.0.1 stays a different client.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "magnetar/engine.h"
#include "server/http_guard.h"
#include "server/raw_http.h"
#include "server/server.h"
#include "support/default_engine.h"

namespace magnetar::server {
namespace {

using json = nlohmann::ordered_json;
using namespace raw_http;

const Engine* engine() {
    return test::default_engine();
}

#define REQUIRE_MODEL()                                                     \
    do {                                                                    \
        if (!engine()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing"; \
    } while (0)

server_options small_options() {
    server_options o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.n_ctx = 1024;
    o.default_max_tokens = 4;
    o.max_body_bytes = 1 << 20;
    o.test_hooks = true;
    o.keepalive_s = 1;
    o.http_threads = 8;
    return o;
}

std::unique_ptr<server> start(const server_options& o) {
    auto s = std::make_unique<server>(*engine(), o);
    if (!s->start()) return nullptr;
    return s;
}

std::string chat(bool stream) {
    return json{{"messages", json::array({json{{"role", "user"}, {"content", "hello"}}})},
                {"max_tokens", 3},
                {"thinking", false},
                {"stream", stream},
                {"seed", 1}}
        .dump();
}

// ---------------------------------------------------------------------------------------------
// Heads
// ---------------------------------------------------------------------------------------------

TEST(HttpLimits, HeaderCountLimit) {
    REQUIRE_MODEL();
    server_options o = small_options();
    o.max_header_count = 20;
    auto srv = start(o);
    ASSERT_TRUE(srv);
    std::string ok_headers, many_headers;
    for (int i = 0; i < 19; ++i) ok_headers += "X-H" + std::to_string(i) + ": v\r\n";  // + Host
    for (int i = 0; i < 40; ++i) many_headers += "X-H" + std::to_string(i) + ": v\r\n";
    EXPECT_EQ(status_of(exchange(srv->port(), request("GET", "/health", "", ok_headers))), 200);
    const std::string r = exchange(srv->port(), request("GET", "/health", "", many_headers));
    EXPECT_EQ(status_of(r), 431) << r;
    EXPECT_NE(r.find("header fields"), std::string::npos) << r;
}

TEST(HttpLimits, HeaderBytesLimitAnsweredBeforeTheBlockEnds) {
    REQUIRE_MODEL();
    server_options o = small_options();
    o.max_header_bytes = 16 << 10;
    auto srv = start(o);
    ASSERT_TRUE(srv);
    const int fd = connect_from(srv->port());
    ASSERT_GE(fd, 0);
    // 64 KiB of header lines that never end: the answer comes without the blank line.
    std::string head = "GET /health HTTP/1.1\r\nHost: x\r\n";
    const std::string line = "X-Pad: " + std::string(1000, 'a') + "\r\n";
    for (int i = 0; i < 64; ++i) head += line;
    send_str(fd, head);
    const std::string r = recv_until(fd, 5, full_response);
    ::close(fd);
    EXPECT_EQ(status_of(r), 431) << r.substr(0, 200);
}

TEST(HttpLimits, RequestLineLimit) {
    REQUIRE_MODEL();
    auto srv = start(small_options());
    ASSERT_TRUE(srv);
    const int fd = connect_from(srv->port());
    ASSERT_GE(fd, 0);
    send_str(fd, "GET /" + std::string(20000, 'a'));  // no end of line yet
    const std::string r = recv_until(fd, 5, full_response);
    ::close(fd);
    EXPECT_EQ(status_of(r), 414) << r.substr(0, 200);
}

TEST(HttpLimits, AmbiguousFramingRefused) {
    REQUIRE_MODEL();
    auto srv = start(small_options());
    ASSERT_TRUE(srv);
    const int port = srv->port();
    EXPECT_EQ(status_of(exchange(port,
                                 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                 "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}")),
              400);
    EXPECT_EQ(status_of(exchange(port,
                                 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                 "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 "2\r\n{}\r\n0\r\n\r\n")),
              400);
    EXPECT_EQ(status_of(exchange(port,
                                 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                 "Transfer-Encoding: gzip, chunked\r\n\r\n")),
              501);
    EXPECT_EQ(status_of(exchange(port, "GET /health HTTP/1.1\nHost: x\n\n")), 400);
    EXPECT_EQ(status_of(exchange(port, "GET /health HTTP/2.0\r\nHost: x\r\n\r\n")), 505);
}

TEST(HttpLimits, PipelinedRequestsKeepTheirFraming) {
    REQUIRE_MODEL();
    auto srv = start(small_options());
    ASSERT_TRUE(srv);
    const int fd = connect_from(srv->port());
    ASSERT_GE(fd, 0);
    const std::string body = "{\"messages\":\"x\"}";
    send_str(fd, request("POST", "/v1/messages/count_tokens", body) +
                     request("GET", "/health", "", "Connection: close\r\n"));
    const std::string r = recv_all(fd, 10);
    ::close(fd);
    const size_t second = r.find("HTTP/1.1", 1);
    ASSERT_NE(second, std::string::npos) << r;
    EXPECT_EQ(status_of(r.substr(second)), 200) << r;
    EXPECT_NE(r.find("\"status\":\"ok\""), std::string::npos) << r;
}

// ---------------------------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------------------------

TEST(HttpLimits, ContentLengthOverLimitRefusedBeforeTheBody) {
    REQUIRE_MODEL();
    auto srv = start(small_options());
    ASSERT_TRUE(srv);
    const int fd = connect_from(srv->port());
    ASSERT_GE(fd, 0);
    send_str(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                     std::to_string(200u << 20) + "\r\n\r\n");
    const std::string r = recv_until(fd, 5, full_response);
    ::close(fd);
    EXPECT_EQ(status_of(r), 413) << r;
}

// Sends a chunked body of `total` data bytes in chunks of `chunk` bytes (stops on an error).
void send_chunked(int fd, size_t total, size_t chunk) {
    const std::string data(chunk, 'a');
    char size_line[32];
    std::snprintf(size_line, sizeof size_line, "%zx\r\n", chunk);
    std::string piece = std::string(size_line) + data + "\r\n";
    for (size_t sent = 0; sent < total; sent += chunk) {
        if (!send_str(fd, piece)) return;
    }
    send_str(fd, "0\r\n\r\n");
}

TEST(HttpLimits, ChunkedBodyCutAtTheLimit) {
    REQUIRE_MODEL();
    auto srv = start(small_options());  // 1 MiB
    ASSERT_TRUE(srv);
    const int fd = connect_from(srv->port());
    ASSERT_GE(fd, 0);
    send_str(fd,
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
             "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n");
    std::thread sender([fd] { send_chunked(fd, size_t{8} << 20, 64 << 10); });
    const std::string r = recv_until(fd, 10, full_response);
    ::shutdown(fd, SHUT_RDWR);
    sender.join();
    ::close(fd);
    EXPECT_EQ(status_of(r), 413) << r.substr(0, 300);
    EXPECT_NE(r.find("too large"), std::string::npos) << r.substr(0, 300);
}

TEST(HttpLimits, ChunkedBodyUnderTheLimitServed) {
    REQUIRE_MODEL();
    auto srv = start(small_options());
    ASSERT_TRUE(srv);
    const std::string body = chat(false);
    std::string chunked;
    for (size_t i = 0; i < body.size(); i += 7) {  // small chunks with an extension
        const std::string part = body.substr(i, 7);
        char line[32];
        std::snprintf(line, sizeof line, "%zx;ext=1\r\n", part.size());
        chunked += line + part + "\r\n";
    }
    chunked += "0\r\n\r\n";
    const std::string r =
        exchange(srv->port(),
                 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n"
                 "\r\n" +
                     chunked);
    EXPECT_EQ(status_of(r), 200) << r;
    EXPECT_NE(r.find("chat.completion"), std::string::npos) << r;
}

// ---------------------------------------------------------------------------------------------
// Deadlines and connections per client
// ---------------------------------------------------------------------------------------------

TEST(HttpLimits, HeaderDeadlineIsTotalNotPerByte) {
    REQUIRE_MODEL();
    server_options o = small_options();
    o.header_timeout_ms = 1000;
    auto srv = start(o);
    ASSERT_TRUE(srv);
    const int fd = connect_from(srv->port());
    ASSERT_GE(fd, 0);
    const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(200, 'a');
    const auto t0 = clock_type::now();
    std::string r;
    // One byte every 50 ms, never the end of the head, for at most 6 s.
    for (size_t i = 0; i < head.size() && seconds_since(t0) < 6 && r.empty(); ++i) {
        if (::send(fd, &head[i], 1, MSG_NOSIGNAL) != 1) break;
        r = recv_until(fd, 0.05, full_response);
    }
    if (r.empty()) r = recv_until(fd, 1, full_response);
    const double took = seconds_since(t0);
    ::close(fd);
    EXPECT_EQ(status_of(r), 408) << r;
    EXPECT_LT(took, 4.0);
}

TEST(HttpLimits, BodyDeadlineIsTotal) {
    REQUIRE_MODEL();
    server_options o = small_options();
    o.body_timeout_ms = 1000;
    auto srv = start(o);
    ASSERT_TRUE(srv);
    const int fd = connect_from(srv->port());
    ASSERT_GE(fd, 0);
    const std::string body = chat(false);
    send_str(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n");
    const auto t0 = clock_type::now();
    std::string r;
    for (size_t i = 0; i + 1 < body.size() && seconds_since(t0) < 6 && r.empty(); ++i) {
        if (::send(fd, &body[i], 1, MSG_NOSIGNAL) != 1) break;
        r = recv_until(fd, 0.05, full_response);
    }
    if (r.empty()) r = recv_until(fd, 1, full_response);
    const double took = seconds_since(t0);
    ::close(fd);
    EXPECT_EQ(status_of(r), 408) << r;
    EXPECT_LT(took, 4.0);
}

TEST(HttpLimits, SlowClientsDoNotBlockHealth) {
    REQUIRE_MODEL();
    server_options o = small_options();
    o.http_threads = 4;  // per client: 4 - 2 = 2
    auto srv = start(o);
    ASSERT_TRUE(srv);
    const int port = srv->port();
    // Twice the HTTP threads of slowloris connections from one client, one byte each 100 ms.
    std::vector<int> slow;
    for (int i = 0; i < 2 * o.http_threads; ++i) {
        const int fd = connect_from(port, "127.0.0.2");
        ASSERT_GE(fd, 0);
        send_str(fd, "GET /health HTTP/1.1\r\n");
        slow.push_back(fd);
    }
    std::atomic<bool> done{false};
    std::thread trickle([&] {
        const auto t0 = clock_type::now();
        while (!done && seconds_since(t0) < 8) {
            for (int fd : slow) (void)::send(fd, "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<double> took;
    int refused = 0;
    for (int i = 0; i < 3; ++i) {
        const auto t0 = clock_type::now();
        const int fd = connect_from(port);
        ASSERT_GE(fd, 0);
        send_str(fd, request("GET", "/health", ""));
        const std::string r = recv_until(fd, 3, full_response);
        ::close(fd);
        took.push_back(seconds_since(t0));
        EXPECT_EQ(status_of(r), 200) << r;
    }
    // The connections over the per-client cap were answered 429 at once.
    for (int fd : slow) {
        const std::string r = recv_until(fd, 0.2, full_response);
        if (status_of(r) == 429) ++refused;
    }
    done = true;
    trickle.join();
    for (int fd : slow) ::close(fd);
    for (double t : took) EXPECT_LT(t, 1.0);
    EXPECT_GE(refused, o.http_threads) << "expected the connections over the cap refused";
}

// ---------------------------------------------------------------------------------------------
// Half-closed clients, HTTP/1.0, keep-alive latency
// ---------------------------------------------------------------------------------------------

TEST(HttpLimits, HalfClosedClientGetsTheFullResponse) {
    REQUIRE_MODEL();
    auto srv = start(small_options());
    ASSERT_TRUE(srv);
    for (const bool stream : {false, true}) {
        const int fd = connect_from(srv->port());
        ASSERT_GE(fd, 0);
        send_str(fd, request("POST", "/v1/chat/completions", chat(stream)));
        ::shutdown(fd, SHUT_WR);
        const std::string r = recv_until(fd, 20, [&](const std::string& s) {
            return stream ? s.find("[DONE]") != std::string::npos : full_response(s);
        });
        ::close(fd);
        EXPECT_EQ(status_of(r), 200) << stream << " " << r;
        if (stream) {
            EXPECT_NE(r.find("[DONE]"), std::string::npos) << r;
        } else {
            EXPECT_NE(r.find("\"finish_reason\""), std::string::npos) << r;
        }
    }
}

TEST(HttpLimits, Http10StreamingIsCloseDelimited) {
    REQUIRE_MODEL();
    auto srv = start(small_options());
    ASSERT_TRUE(srv);
    const int fd = connect_from(srv->port());
    ASSERT_GE(fd, 0);
    send_str(fd, request("POST", "/v1/chat/completions", chat(true), "", "HTTP/1.0"));
    const std::string r = recv_all(fd, 20);  // until the server closes
    ::close(fd);
    EXPECT_EQ(status_of(r), 200) << r;
    const size_t end = r.find("\r\n\r\n");
    ASSERT_NE(end, std::string::npos) << r;
    const std::string head = r.substr(0, end);
    const std::string body = r.substr(end + 4);
    EXPECT_EQ(head.find("Transfer-Encoding"), std::string::npos) << head;
    EXPECT_NE(head.find("Connection: close"), std::string::npos) << head;
    EXPECT_EQ(body.rfind("data: ", 0), 0u) << body.substr(0, 100);  // no chunk-size line
    EXPECT_NE(body.find("data: [DONE]\n\n"), std::string::npos) << body;
}

TEST(HttpLimits, KeepAliveRequestsAnswerWithoutNagleDelay) {
    REQUIRE_MODEL();
    auto srv = start(small_options());
    ASSERT_TRUE(srv);
    const int fd = connect_from(srv->port());
    ASSERT_GE(fd, 0);
    std::vector<double> ms;
    for (int i = 0; i < 6; ++i) {
        const auto t0 = clock_type::now();
        ASSERT_TRUE(send_str(fd, request("GET", "/v1/models", "")));
        const std::string r = recv_until(fd, 5, full_response);
        ASSERT_EQ(status_of(r), 200) << i << " " << r;
        if (i > 0) ms.push_back(seconds_since(t0) * 1000);  // after the first
    }
    ::close(fd);
    std::sort(ms.begin(), ms.end());
    std::printf("keep-alive request times (ms): %.2f %.2f %.2f %.2f %.2f\n", ms[0], ms[1], ms[2],
                ms[3], ms[4]);
    EXPECT_LT(ms[2], 20.0);
}

// ---------------------------------------------------------------------------------------------
// Memory after large rejected bodies
// ---------------------------------------------------------------------------------------------

TEST(HttpLimits, RejectedLargeBodiesDoNotPinMemory) {
    REQUIRE_MODEL();
    server_options o = small_options();
    o.max_body_bytes = size_t{40} << 20;
    o.http_threads = 18;
    auto srv = start(o);
    ASSERT_TRUE(srv);
    // 30 MB of JSON that is cut off: read, buffered, then refused by the parser.
    const std::string body = "{\"messages\":\"" + std::string(30u << 20, 'a');
    const std::string head =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n";
    const size_t before = rss_bytes();
    std::vector<int> status(16, 0);
    std::vector<std::thread> clients;
    for (int i = 0; i < 16; ++i) {
        clients.emplace_back([&, i] {
            const int fd = connect_from(srv->port());
            if (fd < 0) return;
            if (send_str(fd, head) && send_str(fd, body)) {
                status[static_cast<size_t>(i)] = status_of(recv_until(fd, 30, full_response));
            }
            ::close(fd);
        });
    }
    for (auto& t : clients) t.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const size_t after = rss_bytes();
    for (int s : status) EXPECT_EQ(s, 400);
    std::printf("RSS before %.1f MB, after 16 x 30 MB rejected bodies %.1f MB\n", before / 1e6,
                after / 1e6);
    EXPECT_LT(after, before + (size_t{200} << 20));
}

// ---------------------------------------------------------------------------------------------
// The key compare
// ---------------------------------------------------------------------------------------------

TEST(HttpLimits, KeysEqual) {
    EXPECT_TRUE(keys_equal("sekret", "sekret"));
    EXPECT_FALSE(keys_equal("sekret", "sekreT"));
    EXPECT_FALSE(keys_equal("sekret", "sekret2"));
    EXPECT_FALSE(keys_equal("sekret", "sek"));
    EXPECT_FALSE(keys_equal("sekret", ""));
    EXPECT_FALSE(keys_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
    EXPECT_TRUE(keys_equal(std::string(1000, 'k'), std::string(1000, 'k')));
}

}  // namespace
}  // namespace magnetar::server
