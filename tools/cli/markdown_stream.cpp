// Markdown of a streamed reply on the terminal: see markdown_stream.h.
#include "cli/markdown_stream.h"

namespace magnetar::cli {

namespace {
constexpr const char* kBold = "\x1b[1m";
constexpr const char* kNormal = "\x1b[22m";  // neither bold nor dim
constexpr const char* kDim = "\x1b[2m";
constexpr const char* kCode = "\x1b[36m";
constexpr const char* kDefault = "\x1b[39m";  // default colour

bool prefix_of(std::string_view s, std::string_view whole) {
    return s.size() <= whole.size() && whole.substr(0, s.size()) == s;
}
}  // namespace

std::string markdown_stream::feed(std::string_view piece) {
    if (!colour_) return std::string(piece);
    std::string out;
    for (const char c : piece) put(c, &out);
    return out;
}

std::string markdown_stream::finish() {
    if (!colour_) return {};
    std::string out;
    if (line_start_ && !head_.empty()) decide_head(&out, true);  // shown as plain text
    if (star_) out += '*';
    if (bold_ || heading_ || code_ || fence_ || fence_line_) out += "\x1b[0m";
    line_start_ = true;
    fence_ = fence_line_ = heading_ = bold_ = code_ = star_ = false;
    return out;
}

void markdown_stream::put(char c, std::string* out) {
    if (fence_line_) {
        if (c == '\n') {
            *out += kNormal;
            *out += '\n';
            if (fence_) *out += kCode;
            fence_line_ = false;
            line_start_ = true;
        } else {
            *out += c;
        }
        return;
    }
    if (line_start_) {
        head_ += c;
        decide_head(out, c == '\n');
        return;
    }
    inline_char(c, out);
}

// The held start of a line becomes a fence, a heading, a bullet or plain text once it can be
// told apart; until then it stays held.
void markdown_stream::decide_head(std::string* out, bool line_end) {
    const size_t ind = head_.find_first_not_of(' ');
    const std::string_view r =
        ind == std::string::npos ? std::string_view() : std::string_view(head_).substr(ind);
    const std::string indent = head_.substr(0, ind == std::string::npos ? head_.size() : ind);
    enum { wait, plain, done } what = plain;
    if (!line_end) {
        if (r.empty()) {
            what = wait;
        } else if (prefix_of(r, "```") && r.size() < 3) {
            what = wait;
        } else if (r.substr(0, 3) == "```") {
            // Opening or closing fence; the rest of the line (a language tag) is dim.
            if (fence_) *out += kDefault;
            *out += kDim;
            *out += head_;
            fence_ = !fence_;
            fence_line_ = true;
            what = done;
        } else if (fence_) {
            what = plain;
        } else if (r[0] == '#') {
            size_t k = 0;
            while (k < r.size() && r[k] == '#') ++k;
            if (k == r.size() && k <= 6) {
                what = wait;
            } else if (k <= 6 && r[k] == ' ') {
                *out += indent;
                *out += kBold;
                heading_ = true;
                what = done;
            }
        } else if (r[0] == '-' || r[0] == '*' || r[0] == '+') {
            if (r.size() == 1) {
                what = wait;
            } else if (r[1] == ' ') {
                *out += indent;
                *out += "\xe2\x80\xa2 ";  // U+2022 bullet
                what = done;
            }
        }
    }
    if (what == wait) return;
    line_start_ = false;
    const std::string held = std::move(head_);
    head_.clear();
    if (what == done) return;
    for (const char c : held) inline_char(c, out);
}

void markdown_stream::inline_char(char c, std::string* out) {
    if (fence_) {
        *out += c;
        if (c == '\n') line_start_ = true;
        return;
    }
    if (star_) {
        star_ = false;
        if (c == '*' && !code_) {
            bold_ = !bold_;
            *out += bold_ || heading_ ? kBold : kNormal;
            return;
        }
        *out += '*';
    }
    if (c == '*' && !code_) {
        star_ = true;
        return;
    }
    if (c == '`') {
        code_ = !code_;
        *out += code_ ? kCode : kDefault;
        return;
    }
    if (c == '\n') {
        end_line(out);
        return;
    }
    *out += c;
}

void markdown_stream::end_line(std::string* out) {
    if (code_) *out += kDefault;
    if (bold_ || heading_) *out += kNormal;
    code_ = bold_ = heading_ = false;
    *out += '\n';
    line_start_ = true;
}

}  // namespace magnetar::cli
