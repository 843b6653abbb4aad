// Keys typed while the agent works: see type_ahead.h.
#include "cli/type_ahead.h"

#include "core/format.h"

namespace magnetar::cli {

namespace {

// The last `cols` code points of s.
std::string tail_columns(const std::string& s, size_t cols) {
    size_t at = s.size(), n = 0;
    while (at > 0 && n < cols) {
        --at;
        if ((static_cast<unsigned char>(s[at]) & 0xC0) != 0x80) ++n;
    }
    return s.substr(at);
}

}  // namespace

type_ahead::action type_ahead::feed(std::string_view bytes) {
    action out = action::none;
    for (const char c : bytes) {
        const action a = key(c);
        if (a == action::send_now || (a == action::changed && out == action::none)) out = a;
    }
    return out;
}

type_ahead::action type_ahead::key(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (!esc_.empty()) {
        esc_ += c;
        // ESC [ params final, ESC O x, or ESC x.
        const bool csi = esc_.size() >= 2 && esc_[1] == '[';
        const bool done =
            esc_.size() == 2 ? !(c == '[' || c == 'O') : (!csi || (u >= 0x40 && u <= 0x7E));
        if (!done) return action::none;
        const std::string seq = std::move(esc_);
        esc_.clear();
        if ((seq == "\x1b[A" || seq == "\x1bOA") && draft_.empty() && !queue_.empty()) {
            draft_ = std::move(queue_.back());
            queue_.pop_back();
            return action::changed;
        }
        return action::none;
    }
    switch (c) {
        case '\x1b':
            esc_ = "\x1b";
            return action::none;
        case '\r':
        case '\n':
            if (!draft_.empty() && draft_.back() == '\\') {
                draft_.back() = '\n';
                return action::changed;
            }
            if (draft_.empty()) return action::none;
            queue_.push_back(std::move(draft_));
            draft_.clear();
            return action::changed;
        case '\t':
            if (!draft_.empty()) {
                queue_.push_front(std::move(draft_));
                draft_.clear();
            }
            return queue_.empty() ? action::none : action::send_now;
        case '\x7f':
        case '\b':
            if (draft_.empty()) return action::none;
            while (!draft_.empty() && (static_cast<unsigned char>(draft_.back()) & 0xC0) == 0x80)
                draft_.pop_back();
            if (!draft_.empty()) draft_.pop_back();
            return action::changed;
        case '\x15':  // Ctrl+U
            if (draft_.empty()) return action::none;
            draft_.clear();
            return action::changed;
        default:
            if (u < 0x20) return action::none;
            draft_ += c;
            return action::changed;
    }
}

std::optional<std::string> type_ahead::pop() {
    if (queue_.empty()) return std::nullopt;
    std::string s = std::move(queue_.front());
    queue_.pop_front();
    return s;
}

std::string type_ahead::take_draft() {
    std::string s = std::move(draft_);
    draft_.clear();
    return s;
}

std::string footer_text(const std::string& state, long long used, long long n_ctx,
                        const type_ahead& input, size_t cols) {
    std::string s =
        strfmt("[%s | context %lld/%lld (%.0f%%)", state.c_str(), used, n_ctx,
               n_ctx > 0 ? 100.0 * static_cast<double>(used) / static_cast<double>(n_ctx) : 0.0);
    if (!input.queue().empty()) s += strfmt(" | %zu queued", input.queue().size());
    s += "] ";
    std::string draft = input.draft();
    for (char& c : draft)
        if (c == '\n') c = ' ';
    if (utf8_columns(s) >= cols) return tail_columns(s, cols);  // a very narrow terminal
    const size_t room = cols - utf8_columns(s) - 1;             // the last column stays free
    const std::string hint = "type ahead: Enter queues, Tab sends now";
    s += draft.empty() && input.queue().empty() && utf8_columns(hint) <= room
             ? hint
             : tail_columns(draft, room);
    return s;
}

}  // namespace magnetar::cli
