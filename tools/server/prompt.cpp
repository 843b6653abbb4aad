// Prompt construction for the server: see prompt.h.
#include "server/prompt.h"

#include <algorithm>

#include "chat/chat_tokens.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::server {

// ---------------------------------------------------------------------------------------------
// Special literals
// ---------------------------------------------------------------------------------------------

special_literals::special_literals(const tokenizer& tok) {
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        if (!tok.is_special(id)) continue;
        std::string lit(tok.token_bytes(id));
        if (lit.empty()) continue;
        by_first_[static_cast<unsigned char>(lit[0])].emplace_back(std::move(lit), id);
    }
    for (auto& v : by_first_) {
        std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
            return a.first.size() > b.first.size();
        });
    }
}

std::pair<int32_t, size_t> special_literals::match(std::string_view s, size_t pos) const {
    const auto& cands = by_first_[static_cast<unsigned char>(s[pos])];
    const std::string_view rest = s.substr(pos);
    for (const auto& [lit, id] : cands) {
        if (rest.size() >= lit.size() && rest.compare(0, lit.size(), lit) == 0) {
            return {id, lit.size()};
        }
    }
    return {-1, 0};
}

std::vector<trusted_special> special_literals::find(std::string_view text) const {
    std::vector<trusted_special> out;
    for (size_t i = 0; i < text.size();) {
        if (by_first_[static_cast<unsigned char>(text[i])].empty()) {
            ++i;
            continue;
        }
        const auto [id, len] = match(text, i);
        if (id < 0) {
            ++i;
            continue;
        }
        out.push_back({i, len, id});
        i += len;
    }
    return out;
}

void encode_trusted(const tokenizer& tok, std::string_view text,
                    const std::vector<trusted_special>& specials, size_t from,
                    std::vector<int32_t>& out) {
    size_t pos = from;
    auto it = std::lower_bound(specials.begin(), specials.end(), from,
                               [](const trusted_special& s, size_t off) { return s.offset < off; });
    for (; it != specials.end(); ++it) {
        if (it->offset < pos || it->offset + it->len > text.size()) continue;
        if (it->offset > pos) tok.encode_append(text.substr(pos, it->offset - pos), false, out);
        out.push_back(it->id);
        pos = it->offset + it->len;
    }
    if (pos < text.size()) tok.encode_append(text.substr(pos), false, out);
}

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

namespace {

// The special literals of `text` that lie wholly outside the client spans: the template's own
// control literals. A literal inside, or overlapping, client text is plain text.
std::vector<trusted_special> template_specials(
    const special_literals& lits, std::string_view text,
    const std::vector<std::pair<size_t, size_t>>& client_spans) {
    std::vector<trusted_special> out;
    size_t from = 0;
    auto scan = [&](size_t end) {
        if (end <= from) return;
        for (trusted_special s : lits.find(text.substr(from, end - from))) {
            s.offset += from;
            out.push_back(s);
        }
    };
    for (const auto& [b, e] : client_spans) {
        if (b < from || e > text.size() || b > e) {
            throw Error("prompt: client spans out of order (never expected)");
        }
        scan(b);
        from = e;
    }
    scan(text.size());
    return out;
}

}  // namespace

prompt build_chat_prompt(const tokenizer& tok, const special_literals& lits,
                         const std::vector<chat::message>& messages, const chat::tool_list& tools,
                         const chat::render_options& options) {
    prompt p;
    std::vector<std::pair<size_t, size_t>> spans;
    chat::render_options ro = options;
    ro.client_spans = &spans;
    p.text = chat::render_chat(messages, tools, ro);
    p.specials = template_specials(lits, p.text, spans);
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
    p.specials = template_specials(lits, p.text, {user});
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
