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

bool special_literals::contains_special(std::string_view s) const {
    for (size_t i = 0; i < s.size(); ++i) {
        if (by_first_[static_cast<unsigned char>(s[i])].empty()) continue;
        if (match(s, i).first >= 0) return true;
    }
    return false;
}

std::string special_literals::mask(std::string_view s) const {
    std::string out(s);
    for (size_t i = 0; i < out.size();) {
        if (by_first_[static_cast<unsigned char>(out[i])].empty()) {
            ++i;
            continue;
        }
        const auto [id, len] = match(out, i);
        if (id < 0) {
            ++i;
            continue;
        }
        std::fill_n(out.begin() + static_cast<std::ptrdiff_t>(i), len, 'x');
        i += len;
    }
    return out;
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
    auto it = std::lower_bound(
        specials.begin(), specials.end(), from,
        [](const trusted_special& s, size_t off) { return s.offset < off; });
    for (; it != specials.end(); ++it) {
        if (it->offset < pos || it->offset + it->len > text.size()) continue;
        if (it->offset > pos) tok.encode_append(text.substr(pos, it->offset - pos), false, out);
        out.push_back(it->id);
        pos = it->offset + it->len;
    }
    if (pos < text.size()) tok.encode_append(text.substr(pos), false, out);
}

bool cached_prefix_matches(const tokenizer& tok, std::span<const int32_t> cached,
                           const prompt& in, size_t* cut) {
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
// Masked rendering
// ---------------------------------------------------------------------------------------------

namespace {

void mask_json(const special_literals& lits, nlohmann::ordered_json& v) {
    if (v.is_string()) {
        const auto& s = v.get_ref<const std::string&>();
        if (lits.contains_special(s)) v = lits.mask(s);
    } else if (v.is_array()) {
        for (auto& e : v) mask_json(lits, e);
    } else if (v.is_object()) {
        nlohmann::ordered_json out = nlohmann::ordered_json::object();
        for (auto& [k, e] : v.items()) {
            nlohmann::ordered_json copy = e;
            mask_json(lits, copy);
            out[lits.contains_special(k) ? lits.mask(k) : k] = std::move(copy);
        }
        v = std::move(out);
    }
}

// Tool call arguments: masked in the decoded JSON domain (the renderer decodes them, so a
// "\u003c" escape would otherwise become a literal '<' after masking).
std::string mask_arguments(const special_literals& lits, const std::string& args) {
    auto v = nlohmann::ordered_json::parse(args, nullptr, false);
    if (v.is_discarded() || !v.is_object()) return lits.mask(args);
    mask_json(lits, v);
    return v.dump();
}

// Same-length filler for the trusted pass: special literals of the vocabulary only.
std::vector<trusted_special> trusted_from(const special_literals& lits, std::string_view text,
                                          std::string_view masked) {
    if (text.size() != masked.size()) {
        throw Error("prompt: masked render differs in length from the real render");
    }
    std::vector<trusted_special> specials = lits.find(masked);
    // A literal of the masked render must be the same literal in the real text.
    std::erase_if(specials, [&](const trusted_special& s) {
        return text.compare(s.offset, s.len, masked.substr(s.offset, s.len)) != 0;
    });
    return specials;
}

}  // namespace

prompt build_chat_prompt(const tokenizer& tok, const special_literals& lits,
                         const std::vector<chat::message>& messages, const chat::tool_list& tools,
                         const chat::render_options& options) {
    prompt p;
    p.text = chat::render_chat(messages, tools, options);

    std::vector<chat::message> masked = messages;
    for (auto& m : masked) {
        m.content = lits.mask(m.content);
        m.reasoning_content = lits.mask(m.reasoning_content);
        m.tool_call_id = lits.mask(m.tool_call_id);
        m.name = lits.mask(m.name);
        for (auto& c : m.tool_calls) {
            c.id = lits.mask(c.id);
            c.name = lits.mask(c.name);
            c.arguments = mask_arguments(lits, c.arguments);
        }
        // raw_dsml is what the model sampled earlier (exact replay): trusted as is.
    }
    chat::tool_list masked_tools = tools;
    for (auto& t : masked_tools) mask_json(lits, t);
    chat::render_options mo = options;
    if (mo.response_format) mask_json(lits, *mo.response_format);
    const std::string masked_text = chat::render_chat(masked, masked_tools, mo);

    p.specials = trusted_from(lits, p.text, masked_text);
    encode_trusted(tok, p.text, p.specials, 0, p.tokens);
    return p;
}

prompt build_completion_prompt(const tokenizer& tok, const special_literals& lits,
                               std::string_view user_prompt, chat::think_mode mode,
                               uint64_t n_ctx) {
    const chat::think_mode m = chat::effective_think_mode(mode, n_ctx);
    auto assemble = [&](std::string_view user) {
        std::string s(chat::kBos);
        if (m == chat::think_mode::think_max) s += chat::kThinkMaxPrefix;
        s += "You are a helpful assistant";
        s += chat::kUser;
        s += user;
        s += chat::kAssistant;
        s += m == chat::think_mode::nothink ? chat::kThinkEnd : chat::kThinkStart;
        return s;
    };
    prompt p;
    p.text = assemble(user_prompt);
    p.specials = trusted_from(lits, p.text, assemble(lits.mask(user_prompt)));
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
