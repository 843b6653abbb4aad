// Small string helpers shared by error messages and reports.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

namespace magnetar {

// printf-style formatting into a std::string.
template <typename... Args>
std::string strfmt(const char* fmt, Args&&... args) {
    int n = std::snprintf(nullptr, 0, fmt, args...);
    if (n <= 0) return {};
    std::string out(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(out.data(), out.size(), fmt, std::forward<Args>(args)...);
    out.resize(static_cast<size_t>(n));
    return out;
}

// "1.23 GiB", "512 B": binary units, three significant digits.
std::string human_bytes(uint64_t n);

// "1.23 M", "4.5 B" style count.
std::string human_count(uint64_t n);

// Terminal columns of UTF-8 text, one per code point (continuation bytes are not counted).
size_t utf8_columns(std::string_view s);

}  // namespace magnetar
