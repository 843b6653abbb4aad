// Raw-socket HTTP for the server tests: hostile and careful clients on loopback that
// cpp-httplib's client cannot play (slow heads, half-closed sockets, floods, chosen source
// addresses). Every read is bounded in time.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace magnetar::server::raw_http {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// A connection from `src` (a loopback address) to the server; -1 on failure.
inline int connect_from(int port, const char* src = "127.0.0.1") {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in local{};
    local.sin_family = AF_INET;
    inet_pton(AF_INET, src, &local.sin_addr);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
        ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

inline bool send_str(int fd, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
        const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n <= 0) return false;
        off += static_cast<size_t>(n);
    }
    return true;
}

// Reads until the peer closes, `stop` returns true on what was read, or timeout_s passes.
template <class F>
std::string recv_until(int fd, double timeout_s, F&& stop) {
    std::string got;
    const auto t0 = clock_type::now();
    char buf[16384];
    while (seconds_since(t0) < timeout_s && !stop(got)) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
    }
    return got;
}

inline std::string recv_all(int fd, double timeout_s) {
    return recv_until(fd, timeout_s, [](const std::string&) { return false; });
}

// True once `s` holds one complete response with a Content-Length body (or a head without one).
inline bool full_response(const std::string& s) {
    const size_t end = s.find("\r\n\r\n");
    if (end == std::string::npos) return false;
    const size_t cl = s.find("Content-Length: ");
    if (cl == std::string::npos || cl > end) return true;
    const size_t len = std::stoul(s.substr(cl + 16));
    return s.size() >= end + 4 + len;
}

inline int status_of(const std::string& resp) {
    if (resp.size() < 12 || resp.compare(0, 5, "HTTP/") != 0) return -1;
    return std::atoi(resp.c_str() + 9);
}

inline std::string request(const std::string& method, const std::string& path,
                           const std::string& body, const std::string& extra = "",
                           const char* version = "HTTP/1.1") {
    std::string r = method + " " + path + " " + version + "\r\nHost: x\r\n" + extra;
    if (!body.empty()) {
        r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n";
    }
    return r + "\r\n" + body;
}

// One request on a fresh connection; the whole answer (until complete, close or timeout_s).
inline std::string exchange(int port, const std::string& req, double timeout_s = 10,
                            const char* src = "127.0.0.1") {
    const int fd = connect_from(port, src);
    if (fd < 0) return "";
    send_str(fd, req);
    std::string r = recv_until(fd, timeout_s, full_response);
    ::close(fd);
    return r;
}

// Resident set of this process, in bytes.
inline size_t rss_bytes() {
    FILE* f = std::fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long pages = 0, resident = 0;
    if (std::fscanf(f, "%lu %lu", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
    return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace magnetar::server::raw_http
