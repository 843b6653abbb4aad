// Shared helpers of the HTTP server tests on the tiny model (server_test.cpp and
// server_responses_test.cpp): one loopback server per test process, JSON and SSE clients, and
// the forced DSML tool-call output.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "magnetar/engine.h"
#include "server/server.h"
#include "support/default_engine.h"

namespace magnetar::server::server_fixture {

using json = nlohmann::ordered_json;

inline const Engine* shared_engine() {
    return test::default_engine();
}

inline server_options test_options() {
    server_options o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.n_ctx = 1024;
    o.default_max_tokens = 8;
    o.max_body_bytes = 1 << 20;
    o.test_hooks = true;
    o.keepalive_s = 1;
    return o;
}

// One server per option set, started on first use and kept for the process.
inline server& shared_server() {
    static std::unique_ptr<server> s = [] {
        auto p = std::make_unique<server>(*shared_engine(), test_options());
        if (!p->start()) return std::unique_ptr<server>();
        return p;
    }();
    return *s;
}

// The value of an unlabelled sample `name` in a /metrics text (-1 when absent).
inline double metric(const std::string& text, const std::string& name) {
    size_t p = 0;
    while ((p = text.find(name, p)) != std::string::npos) {
        if ((p == 0 || text[p - 1] == '\n') && text[p + name.size()] == ' ') {
            return std::stod(text.substr(p + name.size() + 1));
        }
        p += name.size();
    }
    return -1;
}

inline httplib::Client client(int port) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    c.set_connection_timeout(5, 0);
    return c;
}

inline json post_json(int port, const std::string& path, const json& body, int* status,
                      const httplib::Headers& headers = {}) {
    auto c = client(port);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = c.Post(path, headers, body.dump(), "application/json");
    if (!r) {
        std::fprintf(stderr, "request failed: %s after %.3f s\n",
                     httplib::to_string(r.error()).c_str(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        *status = -1;
        return json();
    }
    *status = r->status;
    return json::parse(r->body, nullptr, false);
}

struct sse_event {
    std::string event;
    std::string data;
};

inline std::vector<sse_event> parse_sse(const std::string& body, int* comments = nullptr) {
    std::vector<sse_event> out;
    size_t pos = 0;
    while (pos < body.size()) {
        size_t end = body.find("\n\n", pos);
        if (end == std::string::npos) end = body.size();
        const std::string block = body.substr(pos, end - pos);
        pos = end + 2;
        sse_event e;
        bool any = false;
        size_t lp = 0;
        while (lp < block.size()) {
            size_t le = block.find('\n', lp);
            if (le == std::string::npos) le = block.size();
            const std::string line = block.substr(lp, le - lp);
            lp = le + 1;
            if (line.rfind("event: ", 0) == 0)
                e.event = line.substr(7), any = true;
            else if (line.rfind("data: ", 0) == 0)
                e.data = line.substr(6), any = true;
            else if (!line.empty() && line[0] == ':' && comments)
                ++*comments;
        }
        if (any) out.push_back(e);
    }
    return out;
}

inline std::string post_stream(int port, const std::string& path, const json& body, int* status) {
    auto c = client(port);
    auto r = c.Post(path, body.dump(), "application/json");
    if (!r) {
        *status = -1;
        return {};
    }
    *status = r->status;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    return r->body;
}

inline constexpr const char* kToolDsml =
    "Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris &amp; Lyon</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

}  // namespace magnetar::server::server_fixture

#define REQUIRE_MODEL()                                           \
    do {                                                          \
        if (!::magnetar::server::server_fixture::shared_engine()) \
            GTEST_SKIP() << "models/magnetar-tiny.gguf missing";  \
    } while (0)
