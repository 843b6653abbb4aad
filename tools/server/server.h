// `magnetar serve`: the OpenAI- and Anthropic-compatible HTTP server (docs/server.md).
//
// Owns: the HTTP listener (cpp-httplib), routing, authentication, CORS, the body limit, error
// bodies for transport-level failures, /health, /v1/models and /metrics. The endpoint
// handlers are api_*.cpp; inference runs on the worker (worker.h: its live sessions, batched decode
// steps).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "magnetar/engine.h"
#include "server/http_util.h"

namespace magnetar::server {

class server {
  public:
    // The engine must outlive the server and have a tokenizer. Throws magnetar::Error when
    // the session cannot be created.
    server(const Engine& engine, server_options opts);
    ~server();
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    // Binds (port 0: a free port) and starts serving on background threads. False when the
    // address cannot be bound (start_error() says why). A port another process listens on is
    // refused (no SO_REUSEPORT: two servers never share one port's connections).
    bool start();
    // Why start() failed: "cannot listen on HOST:PORT: REASON"; empty after a success.
    const std::string& start_error() const { return start_error_; }
    // The bound port (after start).
    int port() const { return port_; }
    // Blocks until stop() (from another thread or a signal handler thread).
    void wait();
    // Stops accepting, cancels the running jobs, drains the queue.
    void stop();

    std::string metrics_text() const;
    // The tokens the latest request's prompt was evaluated as (reused prefix included).
    std::vector<int32_t> last_prompt_tokens() const;

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
    int port_ = 0;
    std::string start_error_;
};

}  // namespace magnetar::server
