// Prompt construction for the server: see prompt.h.
#include "server/prompt.h"

#include <algorithm>

#include "chat/chat_tokens.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::server {

bool cached_prefix_matches(const tokenizer& tok, std::span<const int32_t> cached, const prompt& in,
                           size_t* cut) {
    const std::string_view text = in.text;
    auto sp = in.specials.begin();  // ascending offsets
    size_t pos = 0;
    for (const int32_t id : cached) {
        if (!tok.valid(id)) return false;
        const std::string_view bytes = tok.token_bytes(id);
        if (text.size() - pos < bytes.size() || text.compare(pos, bytes.size(), bytes) != 0) {
            return false;
        }
        while (sp != in.specials.end() && sp->offset < pos) ++sp;
        const bool trusted_here = sp != in.specials.end() && sp->offset == pos;
        if (tok.is_special(id)) {
            // A control token: the prompt must have this very token, trusted, right here.
            if (!trusted_here || sp->id != id || sp->len != bytes.size()) return false;
            ++sp;
        } else if (trusted_here || (sp != in.specials.end() && sp->offset < pos + bytes.size())) {
            // Plain text where the prompt has a trusted control token (or one starting inside).
            return false;
        }
        pos += bytes.size();
    }
    // No trusted special straddles the cut: one starting inside a plain token was refused
    // above, and a control token covers its own special exactly.
    *cut = pos;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Rendering with client spans
// ---------------------------------------------------------------------------------------------

prompt build_chat_prompt(const tokenizer& tok, const special_literals& lits,
                         const std::vector<chat::message>& messages, const chat::tool_list& tools,
                         const chat::render_options& options) {
    prompt p;
    std::vector<std::pair<size_t, size_t>> spans;
    chat::render_options ro = options;
    ro.client_spans = &spans;
    p.text = chat::render_chat(messages, tools, ro);
    p.specials = specials_outside(lits, p.text, spans);
    encode_trusted(tok, p.text, p.specials, 0, p.tokens);
    return p;
}

prompt build_completion_prompt(const tokenizer& tok, const special_literals& lits,
                               std::string_view user_prompt, chat::think_mode mode,
                               uint64_t n_ctx) {
    const chat::think_mode m = chat::effective_think_mode(mode, n_ctx);
    prompt p;
    p.text = chat::kBos;
    if (m == chat::think_mode::think_max) p.text += chat::kThinkMaxPrefix;
    p.text += "You are a helpful assistant";
    p.text += chat::kUser;
    const std::pair<size_t, size_t> user{p.text.size(), p.text.size() + user_prompt.size()};
    p.text += user_prompt;
    p.text += chat::kAssistant;
    p.text += m == chat::think_mode::nothink ? chat::kThinkEnd : chat::kThinkStart;
    p.specials = specials_outside(lits, p.text, {user});
    encode_trusted(tok, p.text, p.specials, 0, p.tokens);
    return p;
}

std::optional<chat::think_mode> resolve_think_mode(const think_request& r, uint64_t n_ctx) {
    bool enabled = true;
    bool explicit_set = false;
    enum { high, max, none } effort = high;
    if (r.enabled) {
        enabled = *r.enabled;
        explicit_set = true;
    }
    if (r.effort) {
        const std::string& e = *r.effort;
        if (e == "max") {
            effort = max;
        } else if (e == "xhigh" || e == "high" || e == "medium" || e == "low" || e == "minimal") {
            effort = high;
        } else if (e == "none") {
            effort = none;
            if (r.responses) enabled = false;
        } else {
            return std::nullopt;
        }
        if (r.responses) explicit_set = true;
    }
    if (!explicit_set) {
        if (r.model == "deepseek-chat") enabled = false;
        if (r.model == "deepseek-reasoner") enabled = true;
    }
    chat::think_mode mode = chat::think_mode::think;
    if (!enabled || effort == none) {
        mode = chat::think_mode::nothink;
    } else if (effort == max) {
        mode = chat::think_mode::think_max;
    }
    return chat::effective_think_mode(mode, n_ctx);
}

}  // namespace magnetar::server
