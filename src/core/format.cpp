#include "core/format.h"

namespace magnetar {

std::string human_bytes(uint64_t n) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = static_cast<double>(n);
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        ++u;
    }
    if (u == 0) return strfmt("%llu B", static_cast<unsigned long long>(n));
    return strfmt("%.2f %s", v, units[u]);
}

std::string human_count(uint64_t n) {
    static const char* units[] = {"", " K", " M", " B", " T"};
    double v = static_cast<double>(n);
    int u = 0;
    while (v >= 1000.0 && u < 4) {
        v /= 1000.0;
        ++u;
    }
    if (u == 0) return strfmt("%llu", static_cast<unsigned long long>(n));
    return strfmt("%.2f%s", v, units[u]);
}

size_t utf8_columns(std::string_view s) {
    size_t n = 0;
    for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
}

}  // namespace magnetar
