// The transport guard of `magnetar serve`: see http_guard.h.
//
// Owns: the connection stream handed to cpp-httplib (guard_stream: the head read within its
// size limits and deadlines, the body within its limit and deadline, the response head adjusted
// for closing and HTTP/1.0 clients, lingering close), the connection loop with the per-client
// cap (guarded_server), the constant-time key compare and the allocator policy.
// Does not own: parsing a complete head (http_guard_head.cpp) or the chunked framing decoder
// (http_guard_internal.h).
#include "server/http_guard.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "server/http_guard_internal.h"

namespace magnetar::server {

namespace {

using detail::chunk_decoder;
using detail::head_error;
using detail::iequals;
using detail::parse_head;
using detail::request_head;

using clock_type = std::chrono::steady_clock;

// Bodies at least this large are followed by malloc_trim.
constexpr size_t kTrimAfterBytes = size_t{1} << 20;
// Lingering close: after a refusal, read and drop at most this much for at most this long so
// that the peer's unread request does not turn the close into a reset that eats the answer.
constexpr size_t kLingerBytes = 1 << 20;
constexpr int kLingerMs = 500;
// A body refused for its Content-Length is drained (never stored) up to this much for up to this
// long after the 413, so that a client still writing it gets to read the answer.
constexpr size_t kDrainRefusedBytes = size_t{64} << 20;
constexpr int kDrainRefusedMs = 2000;
// Longest single wait, so that stop() is noticed promptly.
constexpr int kPollSliceMs = 100;

thread_local int t_transport_status = 0;

const char* reason_of(int status) {
    switch (status) {
        case 400:
            return "Bad Request";
        case 408:
            return "Request Timeout";
        case 413:
            return "Payload Too Large";
        case 414:
            return "URI Too Long";
        case 429:
            return "Too Many Requests";
        case 431:
            return "Request Header Fields Too Large";
        case 501:
            return "Not Implemented";
        case 505:
            return "HTTP Version Not Supported";
        default:
            return "Error";
    }
}

int ms_until(clock_type::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    return static_cast<int>(std::clamp<int64_t>(left.count(), 0, kPollSliceMs));
}

std::string address_of(const sockaddr_storage& a, int* port) {
    char buf[INET6_ADDRSTRLEN] = "";
    if (a.ss_family == AF_INET) {
        const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
        inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof buf);
        *port = ntohs(v4.sin_port);
    } else if (a.ss_family == AF_INET6) {
        const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
        inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof buf);
        *port = ntohs(v6.sin6_port);
    } else {
        *port = 0;
    }
    return buf;
}

// ---------------------------------------------------------------------------------------------
// The connection stream handed to cpp-httplib
// ---------------------------------------------------------------------------------------------

class guard_stream final : public httplib::Stream {
  public:
    enum class head_result { ok, closed, error };

    guard_stream(socket_t fd, const http_limits& lim, const std::atomic<socket_t>& svr)
        : fd_(fd), lim_(lim), svr_(svr) {}

    // Reads the next request head (limits and deadlines of http_limits). `closed`: the peer
    // closed or stayed idle, or the server stops; `error`: answer *err and close.
    head_result read_head(request_head* h, head_error* err) {
        // Bytes left over from the previous request (pipelining) come first.
        buf_.erase(0, off_);
        off_ = 0;
        const auto idle_deadline =
            clock_type::now() + std::chrono::milliseconds(lim_.idle_timeout_ms);
        clock_type::time_point deadline{};
        bool started = false;
        size_t scanned = 0;  // lines before this offset are complete and checked
        for (;;) {
            if (!buf_.empty() && !started) {
                started = true;
                deadline = clock_type::now() + std::chrono::milliseconds(lim_.header_timeout_ms);
            }
            // Complete lines: the request line bound, the empty line that ends the head.
            for (;;) {
                const size_t nl = buf_.find('\n', scanned);
                if (nl == std::string::npos) break;
                if (nl == 0 || buf_[nl - 1] != '\r') {
                    *err = {400, "header lines must end with CRLF"};
                    return head_result::error;
                }
                if (scanned == 0 && nl + 1 > lim_.max_request_line) break;  // 414 below
                if (nl + 1 - scanned == 2 && scanned > 0) {
                    *h = request_head{};
                    h->size = nl + 1;
                    *err = parse_head(std::string_view(buf_).substr(0, h->size), lim_, h);
                    return err->status ? head_result::error : head_result::ok;
                }
                scanned = nl + 1;
            }
            const size_t first_nl = buf_.find('\n');
            if ((first_nl == std::string::npos ? buf_.size() : first_nl + 1) >
                lim_.max_request_line) {
                *err = {414, "request line longer than " + std::to_string(lim_.max_request_line) +
                                 " bytes"};
                return head_result::error;
            }
            if (buf_.size() > lim_.max_header_bytes) {
                *err = {431, "request head larger than " + std::to_string(lim_.max_header_bytes) +
                                 " bytes"};
                return head_result::error;
            }
            if (svr_ == INVALID_SOCKET) return head_result::closed;
            const auto now = clock_type::now();
            if (!started && now >= idle_deadline) return head_result::closed;
            if (started && now >= deadline) {
                *err = {408, "request head not complete within " +
                                 std::to_string(lim_.header_timeout_ms) + " ms"};
                return head_result::error;
            }
            const size_t room =
                lim_.max_header_bytes + 1 - std::min(buf_.size(), lim_.max_header_bytes);
            const ssize_t n = recv_some(started ? deadline : idle_deadline,
                                        std::min<size_t>(room, sizeof chunk_));
            if (n < 0) return head_result::closed;
            if (n > 0)
                buf_.append(chunk_, static_cast<size_t>(n));
            else if (n == 0 && eof_)
                return head_result::closed;
        }
    }

    // Arms the stream for the request whose head read_head() returned.
    void begin_request(const request_head& h, bool will_close) {
        head_left_ = h.size;
        body_ = h.chunked ? body_kind::chunked : h.has_length ? body_kind::length : body_kind::none;
        body_left_ = h.length;
        body_bytes_ = 0;
        chunks_ = chunk_decoder{};
        body_deadline_ = clock_type::now() + std::chrono::milliseconds(lim_.body_timeout_ms);
        failed_status_ = 0;
        http10_ = h.http10;
        will_close_ = will_close;
        out_head_.clear();
        out_head_done_ = false;
        dechunk_ = false;
        out_chunks_ = chunk_decoder{};
        write_failed_ = false;
    }

    bool body_complete() const {
        switch (body_) {
            case body_kind::none:
                return true;
            case body_kind::length:
                return body_left_ == 0;
            case body_kind::chunked:
                return chunks_.done();
        }
        return false;
    }
    size_t body_bytes() const { return body_bytes_; }
    int failed_status() const { return failed_status_; }
    bool write_failed() const { return write_failed_; }

    // A response of the guard itself (before cpp-httplib saw the request).
    void send_response(int status, const std::string& body, const char* extra_headers = "") {
        std::string r =
            "HTTP/1.1 " + std::to_string(status) + " " + reason_of(status) +
            "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\n" + extra_headers + "Connection: close\r\n\r\n" + body;
        (void)send_all(r.data(), r.size());
    }

    // Closes after a bounded drain of what the peer still sends (see kLingerBytes).
    void linger_close(size_t max_bytes = kLingerBytes, int max_ms = kLingerMs) {
        ::shutdown(fd_, SHUT_WR);
        const auto end = clock_type::now() + std::chrono::milliseconds(max_ms);
        size_t drained = 0;
        while (drained < max_bytes && !eof_ && clock_type::now() < end) {
            const ssize_t n = recv_some(end, sizeof chunk_);
            if (n < 0) break;
            drained += static_cast<size_t>(n);
        }
    }

    // httplib::Stream
    bool is_readable() const override {
        if (off_ < buf_.size()) return true;
        pollfd p{fd_, POLLIN, 0};
        return ::poll(&p, 1, 0) > 0;
    }
    // Writable while the socket takes data. Unlike cpp-httplib's own stream, an end of input
    // (a client that shut down its sending side) does not make the connection dead.
    bool is_writable() const override {
        pollfd p{fd_, POLLOUT, 0};
        const int r = ::poll(&p, 1, lim_.write_timeout_ms);
        return r > 0 && (p.revents & POLLOUT) && !(p.revents & (POLLERR | POLLHUP | POLLNVAL));
    }
    ssize_t read(char* ptr, size_t size) override {
        if (size == 0) return 0;
        if (head_left_ > 0) {  // the head: always buffered by read_head()
            const size_t n = std::min(size, head_left_);
            std::memcpy(ptr, buf_.data() + off_, n);
            off_ += n;
            head_left_ -= n;
            return static_cast<ssize_t>(n);
        }
        if (failed_status_) return -1;
        switch (body_) {
            case body_kind::none:
                return 0;
            case body_kind::length: {
                if (body_left_ == 0) return 0;
                if (!fill()) return -1;
                const size_t n = static_cast<size_t>(
                    std::min<uint64_t>({static_cast<uint64_t>(size), body_left_,
                                        static_cast<uint64_t>(buf_.size() - off_)}));
                std::memcpy(ptr, buf_.data() + off_, n);
                off_ += n;
                body_left_ -= n;
                body_bytes_ += n;
                return static_cast<ssize_t>(n);
            }
            case body_kind::chunked: {
                if (chunks_.done()) return 0;
                if (!fill()) return -1;
                const size_t avail = std::min(size, buf_.size() - off_);
                const size_t n =
                    chunks_.feed(buf_.data() + off_, avail, [](const char*, size_t) {});
                if (chunks_.bad()) return fail(400);
                if (chunks_.data_bytes() > lim_.max_body_bytes) return fail(413);
                std::memcpy(ptr, buf_.data() + off_, n);
                off_ += n;
                body_bytes_ += n;
                return static_cast<ssize_t>(n);
            }
        }
        return -1;
    }
    ssize_t write(const char* ptr, size_t size) override {
        if (write_failed_) return -1;
        if (!out_head_done_) return write_head(ptr, size);
        if (!write_body(ptr, size)) return -1;
        return static_cast<ssize_t>(size);
    }
    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        port = 0;
        if (getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) ip = address_of(a, &port);
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        port = 0;
        if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) ip = address_of(a, &port);
    }
    socket_t socket() const override { return fd_; }

  private:
    enum class body_kind { none, length, chunked };

    ssize_t fail(int status) {
        failed_status_ = status;
        t_transport_status = status;
        return -1;
    }

    // At least one unread byte in buf_ (reading from the socket within the body deadline).
    bool fill() {
        if (off_ < buf_.size()) return true;
        buf_.clear();
        off_ = 0;
        for (;;) {
            if (svr_ == INVALID_SOCKET) return false;
            if (clock_type::now() >= body_deadline_) {
                fail(408);
                return false;
            }
            const ssize_t n = recv_some(body_deadline_, sizeof chunk_);
            if (n < 0 || (n == 0 && eof_)) return false;
            if (n > 0) {
                buf_.append(chunk_, static_cast<size_t>(n));
                return true;
            }
        }
    }

    // One recv into chunk_ after waiting at most one poll slice before `deadline`. > 0: bytes;
    // 0: nothing yet (or end of input: eof_); < 0: error.
    ssize_t recv_some(clock_type::time_point deadline, size_t max) {
        if (eof_) return 0;
        pollfd p{fd_, POLLIN, 0};
        const int r = ::poll(&p, 1, ms_until(deadline));
        if (r < 0) return errno == EINTR ? 0 : -1;
        if (r == 0) return 0;
        const ssize_t n = ::recv(fd_, chunk_, max, MSG_DONTWAIT);
        if (n == 0) eof_ = true;
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        return n;
    }

    bool send_all(const char* p, size_t n) {
        while (n > 0) {
            const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                p += w;
                n -= static_cast<size_t>(w);
                continue;
            }
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
            pollfd q{fd_, POLLOUT, 0};
            if (::poll(&q, 1, lim_.write_timeout_ms) <= 0 || (q.revents & (POLLERR | POLLNVAL))) {
                break;
            }
        }
        if (n > 0) write_failed_ = true;
        return n == 0;
    }

    // Collects the response head (cpp-httplib writes it in one piece) and adjusts it: Connection
    // close when the guard will close; for HTTP/1.0 no chunked encoding (the body ends at the
    // close). 1xx interim heads pass unchanged.
    ssize_t write_head(const char* ptr, size_t size) {
        out_head_.append(ptr, size);
        const size_t end = out_head_.find("\r\n\r\n");
        if (end == std::string::npos) {
            if (out_head_.size() > (1 << 20)) return -1;
            return static_cast<ssize_t>(size);
        }
        const std::string head = out_head_.substr(0, end + 2);
        const std::string rest = out_head_.substr(end + 4);
        out_head_.clear();
        if (head.size() >= 12 && head.compare(9, 1, "1") == 0) {  // "HTTP/1.1 1xx"
            if (!send_all(head.data(), head.size()) || !send_all("\r\n", 2)) return -1;
            if (!rest.empty()) (void)write_head(rest.data(), rest.size());
            return write_failed_ ? -1 : static_cast<ssize_t>(size);
        }
        const bool close = will_close_ || http10_ || failed_status_ != 0 || !body_complete();
        std::string out;
        out.reserve(head.size() + 32);
        size_t pos = 0;
        while (pos < head.size()) {
            const size_t e = head.find("\r\n", pos);
            const std::string_view line(head.data() + pos, e - pos);
            pos = e + 2;
            const size_t colon = line.find(':');
            const std::string_view name = line.substr(0, colon == line.npos ? 0 : colon);
            if (close && (iequals(name, "connection") || iequals(name, "keep-alive"))) continue;
            if (http10_ && iequals(name, "transfer-encoding")) {
                dechunk_ = true;
                continue;
            }
            out.append(line);
            out += "\r\n";
        }
        if (close) out += "Connection: close\r\n";
        out += "\r\n";
        out_head_done_ = true;
        if (close) will_close_ = true;
        if (!send_all(out.data(), out.size())) return -1;
        if (!rest.empty() && !write_body(rest.data(), rest.size())) return -1;
        return static_cast<ssize_t>(size);
    }

    bool write_body(const char* p, size_t n) {
        if (!dechunk_) return send_all(p, n);
        bool ok = true;
        out_chunks_.feed(p, n, [&](const char* d, size_t k) {
            if (ok) ok = send_all(d, k);
        });
        return ok && !out_chunks_.bad();
    }

  public:
    bool will_close() const { return will_close_; }

  private:
    socket_t fd_;
    const http_limits& lim_;
    const std::atomic<socket_t>& svr_;
    char chunk_[16 << 10];  // one recv; reading in fixed pieces keeps refusals allocation-free
    std::string buf_;       // received, not yet consumed: [off_, size)
    size_t off_ = 0;
    bool eof_ = false;
    size_t head_left_ = 0;
    body_kind body_ = body_kind::none;
    uint64_t body_left_ = 0;
    size_t body_bytes_ = 0;
    chunk_decoder chunks_;
    clock_type::time_point body_deadline_{};
    int failed_status_ = 0;
    bool http10_ = false;
    bool will_close_ = false;
    std::string out_head_;
    bool out_head_done_ = false;
    bool dechunk_ = false;
    chunk_decoder out_chunks_;
    bool write_failed_ = false;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// guarded_server
// ---------------------------------------------------------------------------------------------

void guarded_server::configure(const http_limits& limits, error_body_fn error_body) {
    limits_ = limits;
    error_body_ = std::move(error_body);
    set_payload_max_length(limits.max_body_bytes);
    set_tcp_nodelay(true);
}

void guarded_server::raise_backlog() {
    const socket_t fd = svr_sock_;
    if (fd != INVALID_SOCKET) ::listen(fd, 1024);
}

int guarded_server::transport_status() {
    return t_transport_status;
}

bool guarded_server::enter_client(const std::string& addr) {
    std::lock_guard<std::mutex> lock(clients_mu_);
    int& n = clients_[addr];
    if (limits_.max_client_connections > 0 && n >= limits_.max_client_connections) {
        if (n == 0) clients_.erase(addr);
        return false;
    }
    ++n;
    return true;
}

void guarded_server::leave_client(const std::string& addr) {
    std::lock_guard<std::mutex> lock(clients_mu_);
    auto it = clients_.find(addr);
    if (it != clients_.end() && --it->second <= 0) clients_.erase(it);
}

bool guarded_server::process_and_close_socket(socket_t sock) {
    const int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto conn = std::make_unique<guard_stream>(sock, limits_, svr_sock_);
    std::string addr;
    int port = 0;
    conn->get_remote_ip_and_port(addr, port);
    uint64_t refused_length = 0;
    auto refuse = [&](int status, const std::string& path, const std::string& message,
                      const char* extra = "") {
        conn->send_response(status, error_body_ ? error_body_(status, path, message) : "", extra);
        // Over the per-client cap no thread may wait on the client: close at once.
        if (status == 429) return;
        if (status == 413) {
            const size_t declared =
                static_cast<size_t>(std::min<uint64_t>(refused_length, kDrainRefusedBytes));
            conn->linger_close(std::max(declared, kLingerBytes), kDrainRefusedMs);
        } else {
            conn->linger_close();
        }
    };
    bool ret = false;
    if (!enter_client(addr)) {
        refuse(429, "",
               "too many connections from this client (limit " +
                   std::to_string(limits_.max_client_connections) + ")",
               "Retry-After: 1\r\n");
    } else {
        for (size_t served = 0; served < limits_.max_requests_per_connection; ++served) {
            request_head h;
            head_error err;
            const auto r = conn->read_head(&h, &err);
            if (r == guard_stream::head_result::closed) break;
            if (r == guard_stream::head_result::error) {
                refused_length = h.length;
                refuse(err.status, h.path, err.message);
                break;
            }
            const bool close = h.close || served + 1 == limits_.max_requests_per_connection ||
                               svr_sock_ == INVALID_SOCKET;
            conn->begin_request(h, close);
            t_transport_status = 0;
            bool closed = false;
            ret = process_request(*conn, close, closed, nullptr);
            t_transport_status = 0;
            if (conn->body_bytes() >= kTrimAfterBytes) malloc_trim(0);
            if (!ret || closed || conn->will_close() || conn->write_failed() ||
                conn->failed_status() || !conn->body_complete()) {
                // Unread body bytes may still be on their way.
                const bool unread = conn->failed_status() || !conn->body_complete();
                if (unread && !conn->write_failed()) conn->linger_close();
                break;
            }
        }
        leave_client(addr);
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
}

// ---------------------------------------------------------------------------------------------
// Keys and the allocator
// ---------------------------------------------------------------------------------------------

bool keys_equal(std::string_view expected, std::string_view given) {
    // Digests have a fixed length, so CRYPTO_memcmp runs over the same bytes whatever the
    // lengths of the keys are.
    unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), a);
    SHA256(reinterpret_cast<const unsigned char*>(given.data()), given.size(), b);
    return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

void bound_allocator_growth() {
    static std::once_flag once;
    std::call_once(once, [] {
        // A few arenas shared by the HTTP threads instead of up to 8 per core, each keeping
        // what its thread once used.
        mallopt(M_ARENA_MAX, 4);
        // A fixed threshold (glibc otherwise raises it up to 32 MiB after each large free):
        // blocks of 1 MiB and more are mapped and unmapped, never pinned in an arena.
        mallopt(M_MMAP_THRESHOLD, 1 << 20);
    });
}

}  // namespace magnetar::server
