// The transport guard of `magnetar serve`, request heads: see http_guard.h.
//
// Owns: parsing a complete request head (request line, header fields, Content-Length,
// Transfer-Encoding, Connection) strictly enough that the guard and cpp-httplib agree on where
// the body ends, with the limits checked on it (header count, header line length, declared body
// size). Does not own: reading the head from the socket, its total size and deadline
// (http_guard.cpp), or the chunked body framing (http_guard_internal.h).
#include <httplib.h>

#include <string>

#include "server/http_guard_internal.h"

namespace magnetar::server::detail {

namespace {

// Longest header line cpp-httplib accepts (CPPHTTPLIB_HEADER_MAX_LENGTH); longer ones are
// refused here with 431 instead of its 400.
constexpr size_t kMaxHeaderLine = CPPHTTPLIB_HEADER_MAX_LENGTH;

bool has_token(std::string_view list, std::string_view token) {
    size_t pos = 0;
    while (pos <= list.size()) {
        size_t end = list.find(',', pos);
        if (end == std::string_view::npos) end = list.size();
        std::string_view t = list.substr(pos, end - pos);
        while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
        while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
        if (iequals(t, token)) return true;
        pos = end + 1;
    }
    return false;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        const auto lo = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
        if (lo(a[i]) != lo(b[i])) return false;
    }
    return true;
}

// What it refuses: see the declaration (http_guard_internal.h).
head_error parse_head(std::string_view head, const http_limits& lim, request_head* h) {
    const size_t line_end = head.find("\r\n");
    const std::string_view line = head.substr(0, line_end);
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == 0 || sp2 == std::string_view::npos || sp2 == sp1 + 1 ||
        line.find(' ', sp2 + 1) != std::string_view::npos) {
        return {400, "malformed request line"};
    }
    const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view version = line.substr(sp2 + 1);
    h->path = std::string(target.substr(0, target.find('?')));
    if (version == "HTTP/1.0") {
        h->http10 = true;
        h->close = true;
    } else if (version != "HTTP/1.1") {
        return {505, "only HTTP/1.0 and HTTP/1.1 are supported"};
    }
    size_t pos = line_end + 2;
    size_t count = 0;
    bool te_seen = false;
    while (pos + 2 < head.size()) {
        const size_t e = head.find("\r\n", pos);
        const std::string_view field = head.substr(pos, e - pos);
        pos = e + 2;
        if (++count > lim.max_header_count) {
            return {431, "more than " + std::to_string(lim.max_header_count) + " header fields"};
        }
        if (field.size() + 2 > kMaxHeaderLine) {
            return {431,
                    "a header field is longer than " + std::to_string(kMaxHeaderLine) + " bytes"};
        }
        const size_t colon = field.find(':');
        if (colon == 0 || colon == std::string_view::npos) return {400, "malformed header field"};
        const std::string_view name = field.substr(0, colon);
        if (name.find_first_of(" \t") != std::string_view::npos) {
            return {400, "malformed header field name"};
        }
        std::string_view value = field.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
            value.remove_prefix(1);
        }
        while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) {
            value.remove_suffix(1);
        }
        if (iequals(name, "content-length")) {
            if (value.empty() || value.size() > 19 ||
                value.find_first_not_of("0123456789") != std::string_view::npos) {
                return {400, "invalid Content-Length"};
            }
            const uint64_t v = std::stoull(std::string(value));
            if (h->has_length && v != h->length) return {400, "conflicting Content-Length"};
            h->has_length = true;
            h->length = v;
        } else if (iequals(name, "transfer-encoding")) {
            if (te_seen || !iequals(value, "chunked")) {
                return {501, "unsupported Transfer-Encoding (only chunked)"};
            }
            te_seen = true;
            h->chunked = true;
        } else if (iequals(name, "connection")) {
            if (has_token(value, "close")) h->close = true;
        }
    }
    if (h->chunked && h->has_length) {
        return {400, "both Transfer-Encoding and Content-Length"};
    }
    if (h->has_length && h->length > lim.max_body_bytes) {
        return {413,
                "request body too large (limit " + std::to_string(lim.max_body_bytes) + " bytes)"};
    }
    return {};
}

}  // namespace magnetar::server::detail
