// Greedy-on-syntax classification: see syntax_tracker.h.
#include "server/syntax_tracker.h"

#include <array>
#include <cctype>

namespace magnetar::server {

namespace {

constexpr std::array<std::string_view, 3> kInfixes = {"｜DSML｜", "DSML｜", ""};

bool is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

bool starts_with(std::string_view s, size_t pos, std::string_view lit) {
    return s.size() - pos >= lit.size() && s.compare(pos, lit.size(), lit) == 0;
}

// s[pos:] is a proper prefix of lit.
bool partial_of(std::string_view s, size_t pos, std::string_view lit) {
    const std::string_view rest = s.substr(pos);
    return rest.size() < lit.size() && lit.compare(0, rest.size(), rest) == 0;
}

// The value of attribute `name` inside a tag body, or empty.
std::string_view attr(std::string_view tag, std::string_view name) {
    size_t p = 0;
    while ((p = tag.find(name, p)) != std::string_view::npos) {
        size_t q = p + name.size();
        while (q < tag.size() && is_ws(tag[q])) ++q;
        if (q < tag.size() && tag[q] == '=') {
            ++q;
            while (q < tag.size() && is_ws(tag[q])) ++q;
            if (q < tag.size() && tag[q] == '"') {
                const size_t e = tag.find('"', q + 1);
                if (e != std::string_view::npos) return tag.substr(q + 1, e - q - 1);
            }
        }
        p = q;
    }
    return {};
}

}  // namespace

const char* syntax_state_name(syntax_state s) {
    switch (s) {
        case syntax_state::outside:
            return "outside";
        case syntax_state::structural:
            return "structural";
        case syntax_state::string_body:
            return "string_body";
        case syntax_state::json_structural:
            return "json_structural";
        case syntax_state::json_string:
            return "json_string";
        case syntax_state::done:
            return "done";
    }
    return "?";
}

syntax_state syntax_tracker::update(std::string_view text) {
    if (block_start_ == std::string::npos) {
        // Earliest opening tag of any variant.
        size_t best = std::string::npos;
        for (std::string_view infix : kInfixes) {
            const std::string open = "<" + std::string(infix) + "tool_calls>";
            const size_t p = text.find(open, search_from_);
            if (p != std::string::npos && p < best) {
                best = p;
                infix_ = infix;
            }
        }
        if (best == std::string::npos) {
            // Keep a hold-back so a tag split across calls is found next time.
            constexpr size_t kHold = 24;
            search_from_ = text.size() > kHold ? text.size() - kHold : 0;
            return syntax_state::outside;
        }
        block_start_ = best;
    }
    const std::string in(infix_);
    const std::string open_tc = "<" + in + "tool_calls>";
    const std::string close_tc = "</" + in + "tool_calls>";
    const std::string invoke_open = "<" + in + "invoke";
    const std::string invoke_close = "</" + in + "invoke>";
    const std::string param_open = "<" + in + "parameter";
    const std::string param_close = "</" + in + "parameter>";

    size_t p = block_start_ + open_tc.size();
    for (;;) {
        while (p < text.size() && is_ws(text[p])) ++p;
        if (p >= text.size()) return syntax_state::structural;
        if (starts_with(text, p, close_tc)) return syntax_state::done;
        if (starts_with(text, p, invoke_close)) {
            p += invoke_close.size();
            continue;
        }
        if (starts_with(text, p, invoke_open)) {
            const size_t gt = text.find('>', p);
            if (gt == std::string_view::npos) return syntax_state::structural;
            p = gt + 1;
            continue;
        }
        if (starts_with(text, p, param_open)) {
            const size_t gt = text.find('>', p);
            if (gt == std::string_view::npos) return syntax_state::structural;
            const bool is_string = attr(text.substr(p, gt - p), "string") != "false";
            size_t v = gt + 1;
            if (is_string) {
                const size_t close = text.find(param_close, v);
                if (close != std::string_view::npos) {
                    p = close + param_close.size();
                    continue;
                }
                // A trailing partial closer (>= 2 bytes) is structure.
                const size_t lt = text.rfind('<');
                if (lt != std::string_view::npos && lt >= v && text.size() - lt >= 2 &&
                    partial_of(text, lt, param_close)) {
                    return syntax_state::structural;
                }
                return syntax_state::string_body;
            }
            // JSON value: find the closer outside JSON strings.
            bool in_str = false, esc = false;
            for (; v < text.size(); ++v) {
                const char c = text[v];
                if (in_str) {
                    if (esc) {
                        esc = false;
                    } else if (c == '\\') {
                        esc = true;
                    } else if (c == '"') {
                        in_str = false;
                    }
                    continue;
                }
                if (c == '"') {
                    in_str = true;
                } else if (c == '<' && starts_with(text, v, param_close)) {
                    break;
                } else if (c == '<' && partial_of(text, v, param_close)) {
                    return syntax_state::structural;
                }
            }
            if (v >= text.size()) {
                return in_str ? syntax_state::json_string : syntax_state::json_structural;
            }
            p = v + param_close.size();
            continue;
        }
        // A partial structural literal at the end is structure; anything else is a slip the
        // tracker does not follow (normal sampling).
        for (const std::string* lit : {&close_tc, &invoke_close, &invoke_open, &param_open}) {
            if (partial_of(text, p, *lit)) return syntax_state::structural;
        }
        return syntax_state::outside;
    }
}

}  // namespace magnetar::server
