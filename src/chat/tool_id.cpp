// Tool call ids: see tool_id.h.
#include "chat/tool_id.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>

namespace magnetar::chat {

namespace {

// splitmix64 finaliser: spreads the fallback seed bits.
uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void random_bytes(uint8_t out[16]) {
    try {
        std::random_device rd;
        for (int i = 0; i < 16; i += 4) {
            uint32_t v = rd();
            for (int k = 0; k < 4; ++k) out[i + k] = static_cast<uint8_t>(v >> (8 * k));
        }
        return;
    } catch (...) {
        // No entropy source: fall back to a mix that is unique within this process.
    }
    static std::atomic<uint64_t> counter{0};
    uint64_t now =
        static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
    uint64_t a = mix64(now ^ (static_cast<uint64_t>(getpid()) << 32));
    uint64_t b = mix64(a ^ counter.fetch_add(1));
    for (int k = 0; k < 8; ++k) {
        out[k] = static_cast<uint8_t>(a >> (8 * k));
        out[8 + k] = static_cast<uint8_t>(b >> (8 * k));
    }
}

}  // namespace

std::string make_tool_id(id_style style) {
    static const char* hex = "0123456789abcdef";
    uint8_t bytes[16];
    random_bytes(bytes);
    std::string id = style == id_style::anthropic ? "toolu_" : "call_";
    for (uint8_t b : bytes) {
        id += hex[b >> 4];
        id += hex[b & 15];
    }
    return id;
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
