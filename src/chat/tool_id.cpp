// Tool call ids: see tool_id.h.
#include "chat/tool_id.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace magnetar::chat {

void random_bytes(uint8_t* out, size_t n) {
    size_t got = 0;
    while (got < n) {
        const ssize_t r = getrandom(out + got, n - got, 0);
        if (r > 0) {
            got += static_cast<size_t>(r);
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else {
            break;
        }
    }
    if (got == n) return;
    const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        while (got < n) {
            const ssize_t r = read(fd, out + got, n - got);
            if (r > 0)
                got += static_cast<size_t>(r);
            else if (!(r < 0 && errno == EINTR))
                break;
        }
        close(fd);
    }
    if (got != n) throw std::runtime_error("no kernel random source for ids");
}

std::string random_hex(size_t n_bytes) {
    static const char* hex = "0123456789abcdef";
    std::vector<uint8_t> bytes(n_bytes);
    random_bytes(bytes.data(), n_bytes);
    std::string out;
    out.reserve(2 * n_bytes);
    for (uint8_t b : bytes) {
        out += hex[b >> 4];
        out += hex[b & 15];
    }
    return out;
}

std::string make_tool_id(id_style style) {
    return (style == id_style::anthropic ? "toolu_" : "call_") + random_hex(16);
}

void assign_missing_ids(std::vector<parsed_tool_call>* calls, id_style style,
                        const std::function<bool(std::string_view)>& taken) {
    auto clashes = [&](const std::string& id) {
        if (taken && taken(id)) return true;
        for (const auto& c : *calls) {
            if (c.id == id) return true;
        }
        return false;
    };
    for (auto& c : *calls) {
        if (!c.id.empty()) continue;
        std::string id = make_tool_id(style);
        // 128 random bits clash only with a broken `taken`; bound the retries anyway.
        for (int attempt = 0; clashes(id) && attempt < 64; ++attempt) id = make_tool_id(style);
        c.id = std::move(id);
    }
}

}  // namespace magnetar::chat
