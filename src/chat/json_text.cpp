// JSON and entity text utilities: see json_text.h.
#include "chat/json_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace magnetar::chat {

namespace {

// Python's float repr: shortest round-trip digits, fixed notation when the decimal point
// position lies in (-4, 16], exponent notation ("1e-05", "1.5e+16") otherwise.
void append_python_float(std::string& out, double d) {
    if (std::isnan(d)) {
        out += "NaN";
        return;
    }
    if (std::isinf(d)) {
        out += d < 0 ? "-Infinity" : "Infinity";
        return;
    }
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
    std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
    bool negative = false;
    if (!sci.empty() && sci[0] == '-') {
        negative = true;
        sci.remove_prefix(1);
    }
    size_t epos = sci.find('e');
    std::string digits;
    for (char c : sci.substr(0, epos)) {
        if (c != '.') digits += c;
    }
    int exp10 = 0;
    std::string_view es = sci.substr(epos + 1);
    if (!es.empty() && es[0] == '+') es.remove_prefix(1);
    std::from_chars(es.data(), es.data() + es.size(), exp10);
    int decpt = exp10 + 1;
    int ndigits = static_cast<int>(digits.size());
    if (negative) out += '-';
    if (decpt <= -4 || decpt > 16) {
        out += digits[0];
        if (ndigits > 1) {
            out += '.';
            out.append(digits, 1, std::string::npos);
        }
        int e = decpt - 1;
        char ebuf[16];
        std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
        out += ebuf;
    } else if (decpt <= 0) {
        out += "0.";
        out.append(static_cast<size_t>(-decpt), '0');
        out += digits;
    } else if (decpt >= ndigits) {
        out += digits;
        out.append(static_cast<size_t>(decpt - ndigits), '0');
        out += ".0";
    } else {
        out.append(digits, 0, static_cast<size_t>(decpt));
        out += '.';
        out.append(digits, static_cast<size_t>(decpt), std::string::npos);
    }
}

void append_u00(std::string& out, unsigned char c) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
    out += buf;
}

void dump_python(std::string& out, const nlohmann::ordered_json& v, int depth) {
    if (depth > kMaxJsonDepth) throw Error("JSON value nested deeper than 256 levels");
    switch (v.type()) {
        case nlohmann::ordered_json::value_t::null:
        case nlohmann::ordered_json::value_t::discarded:
            out += "null";
            return;
        case nlohmann::ordered_json::value_t::boolean:
            out += v.get<bool>() ? "true" : "false";
            return;
        case nlohmann::ordered_json::value_t::number_integer:
            out += std::to_string(v.get<int64_t>());
            return;
        case nlohmann::ordered_json::value_t::number_unsigned:
            out += std::to_string(v.get<uint64_t>());
            return;
        case nlohmann::ordered_json::value_t::number_float:
            append_python_float(out, v.get<double>());
            return;
        case nlohmann::ordered_json::value_t::string:
            append_python_json_string(out, v.get_ref<const std::string&>());
            return;
        case nlohmann::ordered_json::value_t::binary:
            out += "null";
            return;
        case nlohmann::ordered_json::value_t::array: {
            out += '[';
            bool first = true;
            for (const auto& item : v) {
                if (!first) out += ", ";
                first = false;
                dump_python(out, item, depth + 1);
            }
            out += ']';
            return;
        }
        case nlohmann::ordered_json::value_t::object: {
            out += '{';
            bool first = true;
            for (const auto& [key, item] : v.items()) {
                if (!first) out += ", ";
                first = false;
                append_python_json_string(out, key);
                out += ": ";
                dump_python(out, item, depth + 1);
            }
            out += '}';
            return;
        }
    }
}

void dump_compact(std::string& out, const nlohmann::ordered_json& v, int depth) {
    if (depth > kMaxJsonDepth) throw Error("JSON value nested deeper than 256 levels");
    if (v.is_string()) {
        out += '"';
        append_json_string_body(out, v.get_ref<const std::string&>());
        out += '"';
    } else if (v.is_array()) {
        out += '[';
        bool first = true;
        for (const auto& item : v) {
            if (!first) out += ',';
            first = false;
            dump_compact(out, item, depth + 1);
        }
        out += ']';
    } else if (v.is_object()) {
        out += '{';
        bool first = true;
        for (const auto& [key, item] : v.items()) {
            if (!first) out += ',';
            first = false;
            out += '"';
            append_json_string_body(out, key);
            out += "\":";
            dump_compact(out, item, depth + 1);
        }
        out += '}';
    } else {
        out += v.dump();
    }
}

struct entity {
    std::string_view text;
    char ch;
};
constexpr entity kEntities[] = {
    {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''},
};

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& v) {
    std::string out;
    dump_python(out, v, 0);
    return out;
}

void append_python_json_string(std::string& out, std::string_view s) {
    out += '"';
    for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (c < 0x20) {
                    append_u00(out, c);
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

void append_json_string_body(std::string& out, std::string_view s) {
    for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (c < 0x20) {
                    append_u00(out, c);
                } else {
                    out += ch;
                }
        }
    }
}

std::string json_quote(std::string_view s) {
    std::string out = "\"";
    append_json_string_body(out, s);
    out += '"';
    return out;
}

std::string json_minify(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool in_string = false;
    bool escaped = false;
    for (char c : s) {
        if (in_string) {
            out += c;
            if (escaped) {
                escaped = false;
            } else if (c == '\\') {
                escaped = true;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') continue;
        if (c == '"') in_string = true;
        out += c;
    }
    return out;
}

std::string compact_json_object(std::string_view text) {
    auto v = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!v.is_object()) return "{}";
    std::string out;
    try {
        dump_compact(out, v, 0);
    } catch (const Error&) {
        return "{}";
    }
    return out;
}

std::string attr_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

std::string entity_unescape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        if (s[i] == '&') {
            bool matched = false;
            for (const auto& e : kEntities) {
                if (s.substr(i, e.text.size()) == e.text) {
                    out += e.ch;
                    i += e.text.size();
                    matched = true;
                    break;
                }
            }
            if (matched) continue;
        }
        out += s[i++];
    }
    return out;
}

size_t partial_entity_suffix(std::string_view s) {
    size_t max_k = std::min<size_t>(s.size(), 5);
    for (size_t k = max_k; k >= 1; --k) {
        std::string_view tail = s.substr(s.size() - k);
        if (tail[0] != '&') continue;
        for (const auto& e : kEntities) {
            if (k < e.text.size() && e.text.substr(0, k) == tail) return k;
        }
    }
    return 0;
}

size_t incomplete_utf8_suffix(std::string_view s) {
    size_t n = std::min<size_t>(s.size(), 3);
    for (size_t i = 1; i <= n; ++i) {
        auto b = static_cast<unsigned char>(s[s.size() - i]);
        if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        size_t need = 0;
        if (b >= 0xC2 && b <= 0xDF) {
            need = 2;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 3;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 4;
        }
        return (need != 0 && i < need) ? i : 0;
    }
    return 0;
}

size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
    if (marker.empty()) return 0;
    size_t max_k = std::min(s.size(), marker.size() - 1);
    for (size_t k = max_k; k >= 1; --k) {
        if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
    }
    return 0;
}

}  // namespace magnetar::chat
