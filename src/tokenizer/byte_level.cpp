// GPT-2 byte alphabet tables, UTF-8 validation and the streaming UTF-8 assembler.
#include "tokenizer/byte_level.h"

#include <array>

namespace magnetar::byte_level {

namespace {

struct tables {
    std::array<uint32_t, 256> cp{};
    std::array<int16_t, 512> inverse{};  // code point (< 0x200) -> byte, -1 if none
    std::array<char, 256 * 2> utf8{};
    std::array<uint8_t, 256> utf8_len{};

    tables() {
        inverse.fill(-1);
        uint32_t n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            cp[b] = printable ? static_cast<uint32_t>(b) : 0x100 + n++;
            inverse[cp[b]] = static_cast<int16_t>(b);
            if (cp[b] < 0x80) {
                utf8[b * 2] = static_cast<char>(cp[b]);
                utf8_len[b] = 1;
            } else {
                utf8[b * 2] = static_cast<char>(0xC0 | (cp[b] >> 6));
                utf8[b * 2 + 1] = static_cast<char>(0x80 | (cp[b] & 0x3F));
                utf8_len[b] = 2;
            }
        }
    }
};

const tables& tab() {
    static const tables t;
    return t;
}

// Length a lead byte announces (0: not a lead byte of any well-formed sequence).
size_t lead_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

// Allowed range of the second byte (Unicode Table 3-7): excludes overlongs, surrogates and
// code points above U+10FFFF.
bool second_ok(unsigned char lead, unsigned char b) {
    switch (lead) {
        case 0xE0:
            return b >= 0xA0 && b <= 0xBF;
        case 0xED:
            return b >= 0x80 && b <= 0x9F;
        case 0xF0:
            return b >= 0x90 && b <= 0xBF;
        case 0xF4:
            return b >= 0x80 && b <= 0x8F;
        default:
            return b >= 0x80 && b <= 0xBF;
    }
}

// Number of leading bytes of s[0..n) that are a prefix of one well-formed sequence (0 if s[0]
// cannot start one); *need receives the full length of that sequence.
size_t wf_prefix(const unsigned char* s, size_t n, size_t* need) {
    const size_t len = lead_len(s[0]);
    *need = len;
    if (len <= 1) return len;
    size_t m = 1;
    while (m < len && m < n) {
        const bool ok = (m == 1) ? second_ok(s[0], s[1]) : (s[m] >= 0x80 && s[m] <= 0xBF);
        if (!ok) break;
        ++m;
    }
    return m;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

uint32_t byte_to_cp(uint8_t b) {
    return tab().cp[b];
}

std::string_view byte_to_utf8(uint8_t b) {
    const auto& t = tab();
    return std::string_view(&t.utf8[b * 2], t.utf8_len[b]);
}

std::string encode(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) out += byte_to_utf8(b);
    return out;
}

bool decode(std::string_view token, std::string& out) {
    const auto& t = tab();
    const size_t old = out.size();
    const auto* s = reinterpret_cast<const unsigned char*>(token.data());
    size_t i = 0;
    while (i < token.size()) {
        uint32_t cp;
        if (s[i] < 0x80) {
            cp = s[i];
            i += 1;
        } else if (utf8_sequence_len(s + i, token.size() - i) == 2) {
            cp = (static_cast<uint32_t>(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        } else {
            out.resize(old);  // three- and four-byte characters are never in the alphabet
            return false;
        }
        if (cp >= t.inverse.size() || t.inverse[cp] < 0) {
            out.resize(old);
            return false;
        }
        out.push_back(static_cast<char>(t.inverse[cp]));
    }
    return true;
}

size_t utf8_sequence_len(const unsigned char* s, size_t n) {
    if (n == 0) return 0;
    size_t need = 0;
    const size_t m = wf_prefix(s, n, &need);
    return m == need ? need : 0;
}

size_t utf8_decode(const unsigned char* s, size_t n, uint32_t* cp) {
    const size_t len = utf8_sequence_len(s, n);
    switch (len) {
        case 1:
            *cp = s[0];
            break;
        case 2:
            *cp = (static_cast<uint32_t>(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
            break;
        case 3:
            *cp = (static_cast<uint32_t>(s[0] & 0x0F) << 12) |
                  (static_cast<uint32_t>(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
            break;
        case 4:
            *cp = (static_cast<uint32_t>(s[0] & 0x07) << 18) |
                  (static_cast<uint32_t>(s[1] & 0x3F) << 12) |
                  (static_cast<uint32_t>(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
            break;
        default:
            break;
    }
    return len;
}

bool is_valid_utf8(std::string_view str) {
    const auto* s = reinterpret_cast<const unsigned char*>(str.data());
    size_t i = 0;
    while (i < str.size()) {
        if (s[i] < 0x80) {
            ++i;
            continue;
        }
        const size_t len = utf8_sequence_len(s + i, str.size() - i);
        if (len == 0) return false;
        i += len;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// utf8_stream
// ---------------------------------------------------------------------------------------------

std::string utf8_stream::emit(std::string_view bytes) const {
    if (!replace_invalid_) return std::string(bytes);
    std::string out;
    out.reserve(bytes.size());
    const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
    size_t i = 0;
    while (i < bytes.size()) {
        size_t need = 0;
        const size_t m = wf_prefix(s + i, bytes.size() - i, &need);
        if (m != 0 && m == need) {
            out.append(bytes.substr(i, m));
            i += m;
        } else {
            out += kReplacement;  // one replacement per maximal ill-formed subpart
            i += m == 0 ? 1 : m;
        }
    }
    return out;
}

std::string utf8_stream::push(std::string_view bytes) {
    pending_.append(bytes);
    const auto* s = reinterpret_cast<const unsigned char*>(pending_.data());
    const size_t n = pending_.size();
    size_t i = 0;
    while (i < n) {
        size_t need = 0;
        const size_t m = wf_prefix(s + i, n - i, &need);
        if (m != 0 && m == need) {
            i += m;
        } else if (m != 0 && i + m == n) {
            break;  // an unfinished character that the next piece may complete
        } else {
            i += m == 0 ? 1 : m;
        }
    }
    std::string out = emit(std::string_view(pending_).substr(0, i));
    pending_.erase(0, i);
    return out;
}

std::string utf8_stream::flush() {
    std::string out = emit(pending_);
    pending_.clear();
    return out;
}

}  // namespace magnetar::byte_level
