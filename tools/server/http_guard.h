// The transport guard of `magnetar serve`: every connection cpp-httplib accepts is served through
// it (docs/server.md "Limits").
//
// Owns: reading each request head itself, with a total deadline and limits on the request line,
// the header count and the header bytes, before cpp-httplib sees a byte of it; the body limit on
// every transfer encoding (Content-Length refused before the body is read, chunked bodies
// counted as they arrive) and a total body deadline; connections per client address; keep-alive
// idle time; TCP_NODELAY; responses to half-closed clients; close-delimited (un-chunked)
// streaming for HTTP/1.0 clients; the bounded allocator policy; the constant-time key compare.
// Does not own: routing, authentication, error bodies (the server passes a formatter).
//
// cpp-httplib 0.11.4 reads heads per byte with a per-read timeout, ignores its payload limit for
// chunked bodies and reports a half-closed peer as gone. Its connection entry point
// (process_and_close_socket) is virtual and process_request reads from any httplib::Stream, so
// the guard replaces the first and hands the second a stream of its own (guard_stream, in
// http_guard.cpp) that serves the already-validated head, then exactly the body.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace magnetar::server {

struct http_limits {
    size_t max_request_line = 8192;      // bytes of the request line; 414 above
    size_t max_header_count = 100;       // header fields; 431 above
    size_t max_header_bytes = 64 << 10;  // request line + header block; 431 above
    size_t max_body_bytes = 64 << 20;    // decoded body, any transfer encoding; 413 above
    int idle_timeout_ms = 5000;          // wait for the first byte of a request (keep-alive)
    int header_timeout_ms = 10000;       // first byte of a request -> end of its head; 408
    int body_timeout_ms = 60000;         // end of the head -> end of the body; 408
    int write_timeout_ms = 10000;        // a write that makes no progress for this long fails
    int max_client_connections = 0;      // open connections per client address; 0: no cap
    size_t max_requests_per_connection = 100;
};

// Error body of a transport-level refusal: (status, request path or "", message) -> body (JSON).
using error_body_fn =
    std::function<std::string(int status, const std::string& path, const std::string& message)>;

class guarded_server : public httplib::Server {
  public:
    void configure(const http_limits& limits, error_body_fn error_body);
    // cpp-httplib listens with a backlog of 5: a burst of connections overflows it and clients
    // see resets. listen() again on the bound socket raises the backlog (Linux).
    void raise_backlog();

    // The status the guard decided for the request served on the calling thread when its body
    // was cut short (413 too large, 408 too slow), else 0. cpp-httplib answers such a request
    // with 400; the server's error handler uses this status instead.
    static int transport_status();

  private:
    bool process_and_close_socket(socket_t sock) override;
    bool enter_client(const std::string& addr);
    void leave_client(const std::string& addr);

    http_limits limits_;
    error_body_fn error_body_;
    std::mutex clients_mu_;
    std::unordered_map<std::string, int> clients_;  // open connections by address
};

// Compares an API key in time that depends on neither the contents nor the lengths.
bool keys_equal(std::string_view expected, std::string_view given);

// The process-wide allocator policy of a server (once per process): few malloc arenas and a
// fixed mmap threshold, so that large request bodies are mapped and returned on free instead of
// staying pinned in per-thread arenas. The guard also trims the heap after large bodies.
void bound_allocator_growth();

}  // namespace magnetar::server
