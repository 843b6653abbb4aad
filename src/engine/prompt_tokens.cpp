#include "engine/prompt_tokens.h"

namespace magnetar {

namespace {

bool holds_special(const tokenizer& tok, std::string_view text, std::vector<int32_t>& scratch) {
    scratch.clear();
    tok.encode_append(text, true, scratch);
    for (int32_t id : scratch) {
        if (tok.is_special(id)) return true;
    }
    return false;
}

}  // namespace

void encode_rendered_prompt(const tokenizer& tok, std::string_view text,
                            const std::vector<std::pair<size_t, size_t>>& client_spans,
                            std::vector<int32_t>& out) {
    std::vector<int32_t> scratch;
    size_t from = 0;  // start of the pending rendered stretch
    for (const auto& [b, e] : client_spans) {
        if (b < from || e > text.size() || b > e) continue;  // malformed span: stay rendered
        const std::string_view span = text.substr(b, e - b);
        if (!holds_special(tok, span, scratch)) continue;
        tok.encode_append(text.substr(from, b - from), true, out);
        tok.encode_append(span, false, out);
        from = e;
    }
    tok.encode_append(text.substr(from), true, out);
}

}  // namespace magnetar
