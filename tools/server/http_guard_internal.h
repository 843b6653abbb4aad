// Private pieces of the transport guard (http_guard.h) shared by its head parser
// (http_guard_head.cpp) and its connection stream (http_guard.cpp).
//
// Owns: the chunked framing decoder (its feed() is a template, so the class lives here), the
// parsed request head and the refusal a head earns, and the declarations of the head parser.
// Does not own: sockets, deadlines or the limits themselves (http_guard.h).
// Not part of the public API: only tools/server/http_guard*.cpp include it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http_guard.h"

namespace magnetar::server::detail {

// Chunk-extension and trailer bytes allowed in a chunked body (framing, not data).
inline constexpr size_t kMaxChunkFraming = 16 << 10;

// ASCII case-insensitive equality (header names and tokens).
bool iequals(std::string_view a, std::string_view b);

// ---------------------------------------------------------------------------------------------
// Chunked framing (RFC 9112 §7.1), byte by byte: used to count and end chunked request bodies
// and to strip the chunking of responses to HTTP/1.0 clients.
// ---------------------------------------------------------------------------------------------

class chunk_decoder {
  public:
    bool done() const { return st_ == st::done; }
    bool bad() const { return st_ == st::bad; }
    uint64_t data_bytes() const { return data_; }

    // Consumes bytes of [p, p + n) up to the end of the message; returns how many. `on_data`
    // receives the data spans.
    template <class F>
    size_t feed(const char* p, size_t n, F&& on_data) {
        size_t i = 0;
        while (i < n && st_ != st::done && st_ != st::bad) {
            const char c = p[i];
            switch (st_) {
                case st::size: {
                    const int d = hex(c);
                    if (d >= 0 && digits_ < 15) {
                        size_ = size_ * 16 + static_cast<uint64_t>(d);
                        ++digits_;
                    } else if (digits_ > 0 && (c == ';' || c == ' ' || c == '\t')) {
                        st_ = st::ext;
                    } else if (digits_ > 0 && c == '\r') {
                        st_ = st::size_lf;
                    } else {
                        st_ = st::bad;
                    }
                    ++i;
                    break;
                }
                case st::ext:
                    if (c == '\r')
                        st_ = st::size_lf;
                    else if (++framing_ > kMaxChunkFraming)
                        st_ = st::bad;
                    ++i;
                    break;
                case st::size_lf:
                    st_ = c != '\n' ? st::bad : size_ == 0 ? st::trailer_start : st::data;
                    ++i;
                    break;
                case st::data: {
                    const size_t take = static_cast<size_t>(
                        std::min<uint64_t>(size_, static_cast<uint64_t>(n - i)));
                    on_data(p + i, take);
                    data_ += take;
                    size_ -= take;
                    i += take;
                    if (size_ == 0) st_ = st::data_cr;
                    break;
                }
                case st::data_cr:
                    st_ = c == '\r' ? st::data_lf : st::bad;
                    ++i;
                    break;
                case st::data_lf:
                    st_ = c == '\n' ? st::size : st::bad;
                    digits_ = 0;
                    ++i;
                    break;
                case st::trailer_start:
                    st_ = c == '\r' ? st::last_lf : st::trailer;
                    ++i;
                    break;
                case st::trailer:
                    if (c == '\r')
                        st_ = st::trailer_lf;
                    else if (++framing_ > kMaxChunkFraming)
                        st_ = st::bad;
                    ++i;
                    break;
                case st::trailer_lf:
                    st_ = c == '\n' ? st::trailer_start : st::bad;
                    ++i;
                    break;
                case st::last_lf:
                    st_ = c == '\n' ? st::done : st::bad;
                    ++i;
                    break;
                case st::done:
                case st::bad:
                    break;
            }
        }
        return i;
    }

  private:
    enum class st {
        size,
        ext,
        size_lf,
        data,
        data_cr,
        data_lf,
        trailer_start,
        trailer,
        trailer_lf,
        last_lf,
        done,
        bad
    };
    static int hex(char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    }
    st st_ = st::size;
    uint64_t size_ = 0;
    int digits_ = 0;
    uint64_t data_ = 0;
    size_t framing_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The request head
// ---------------------------------------------------------------------------------------------

struct request_head {
    size_t size = 0;  // bytes of the request line and header block, final CRLF included
    std::string path;
    bool http10 = false;
    bool close = false;  // the client asked to close, or HTTP/1.0 (always closed here)
    bool chunked = false;
    bool has_length = false;
    uint64_t length = 0;
};

struct head_error {
    int status = 0;
    std::string message;
};

// Parses the complete head in buf[0, end). Strict where cpp-httplib is lenient in ways that
// could make the two disagree about where the body ends: every line ends with CRLF, no folded
// lines, no space before a colon, one Content-Length value, Transfer-Encoding only "chunked"
// and never together with Content-Length.
head_error parse_head(std::string_view head, const http_limits& lim, request_head* h);

}  // namespace magnetar::server::detail
