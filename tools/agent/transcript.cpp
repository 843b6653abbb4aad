// The agent's conversation: see transcript.h.
#include "agent/transcript.h"

#include <algorithm>
#include <utility>

#include "agent/tools.h"
#include "chat/chat_tokens.h"
#include "chat/dsml.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/trusted_specials.h"

namespace magnetar::agent {

using json = nlohmann::json;

chat::tool_list contract_tools() {
    chat::tool_list out;
    for (const tool_spec& s : tool_specs()) {
        nlohmann::ordered_json props = nlohmann::ordered_json::object();
        nlohmann::ordered_json required = nlohmann::ordered_json::array();
        for (const tool_param& p : s.params) {
            props[p.name] = {{"type", p.type}, {"description", p.description}};
            if (p.required) required.push_back(p.name);
        }
        nlohmann::ordered_json fn = {
            {"name", s.name},
            {"description", s.description},
            {"parameters", {{"type", "object"}, {"properties", props}, {"required", required}}}};
        out.push_back({{"type", "function"}, {"function", fn}});
    }
    return out;
}

std::string agent_preamble(const std::string& workdir) {
    return "You are a coding agent working in the folder " + workdir +
           ". Use the tools to look at files, change them and run commands; paths are relative "
           "to that folder. Each tool result comes back in a <tool_result> block that starts "
           "with the call it answers. When the task is done, answer without calling a tool.";
}

transcript::transcript(const tokenizer& tok, chat::think_mode mode, uint64_t n_ctx)
    : tok_(&tok),
      lits_(std::make_shared<const special_literals>(tok)),
      mode_(chat::effective_think_mode(mode, n_ctx)),
      n_ctx_(n_ctx),
      tools_(contract_tools()) {}

transcript::transcript(const tokenizer& tok, std::string system, chat::think_mode mode,
                       uint64_t n_ctx)
    : transcript(tok, mode, n_ctx) {
    chat::message m;
    m.role = chat::role::system;
    m.content = std::move(system);
    messages_.push_back(std::move(m));
    extend(false);
    base_text_ = text_;
    base_tokens_ = tokens_.size();
}

std::string transcript::render(bool generation_prompt,
                               std::vector<std::pair<size_t, size_t>>* spans) const {
    chat::render_options ro;
    ro.mode = mode_;
    ro.n_ctx = n_ctx_;
    ro.add_generation_prompt = generation_prompt;
    ro.client_spans = spans;
    return chat::render_chat(messages_, tools_, ro);
}

void transcript::extend(bool generation_prompt) {
    std::vector<std::pair<size_t, size_t>> spans;
    std::string full = render(generation_prompt, &spans);
    if (full.size() < text_.size() || full.compare(0, text_.size(), text_) != 0) {
        throw Error(
            "agent transcript: the rendered conversation no longer starts with what "
            "the session holds");
    }
    const std::vector<trusted_special> specials = specials_outside(*lits_, full, spans);
    // Pieces start at a control literal (the role marker of the new turn), so tokenizing the
    // new bytes alone gives the tokens of the whole text's tail.
    encode_trusted(*tok_, full, specials, text_.size(), tokens_);
    text_ = std::move(full);
    awaiting_ = generation_prompt;
}

void transcript::add_user(const std::string& text) {
    if (awaiting_) throw Error("agent transcript: a user message while a reply is due");
    chat::message m;
    m.role = chat::role::user;
    m.content = text;
    messages_.push_back(std::move(m));
    extend(true);
}

void transcript::add_tool_results(const std::vector<std::string>& results) {
    if (awaiting_) throw Error("agent transcript: tool results while a reply is due");
    if (results.empty()) throw Error("agent transcript: no tool results to add");
    for (const std::string& r : results) {
        chat::message m;
        m.role = chat::role::tool;
        m.content = r;
        messages_.push_back(std::move(m));
    }
    extend(true);
}

chat::message transcript::add_reply(std::span<const int32_t> tokens, const std::string& bytes) {
    if (!awaiting_) throw Error("agent transcript: a reply without an assistant opening");
    const tokenizer::special_ids& sp = tok_->specials();
    chat::message m;
    m.role = chat::role::assistant;
    std::string visible = bytes;
    bool closed_thinking = !thinking();
    if (thinking()) {
        const size_t end = bytes.find(chat::kThinkEnd);
        if (end != std::string::npos) {
            m.reasoning_content = bytes.substr(0, end);
            visible = bytes.substr(end + chat::kThinkEnd.size());
            closed_thinking = true;
        } else {
            m.reasoning_content = bytes;
            visible.clear();
        }
    }
    // The DSML block, as sampled, renders as template text; the visible text before it (the
    // parser's content, trailing whitespace trimmed) as client text.
    const chat::parse_result p = chat::parse_tool_calls(visible, false);
    if (p.status == chat::parse_status::ok && p.tool_start != std::string::npos) {
        size_t cut = p.tool_start;
        while (cut > 0 && (visible[cut - 1] == ' ' || visible[cut - 1] == '\n' ||
                           visible[cut - 1] == '\t' || visible[cut - 1] == '\r')) {
            --cut;
        }
        m.content = visible.substr(0, cut);
        m.raw_dsml = visible.substr(cut);
        for (const chat::parsed_tool_call& c : p.calls) {
            m.tool_calls.push_back({c.id, c.name, c.arguments});
        }
    } else {
        m.content = visible;
    }

    const std::string before = text_;
    messages_.push_back(m);
    std::vector<int32_t> added(tokens.begin(), tokens.end());
    std::string expect = before + bytes;
    if (!closed_thinking) {
        added.push_back(sp.think_end);
        expect += chat::kThinkEnd;
    }
    added.push_back(sp.eos);
    expect += chat::kEos;

    std::vector<std::pair<size_t, size_t>> spans;
    std::string full = render(false, &spans);
    if (full != expect) {
        messages_.pop_back();
        throw Error("agent transcript: the reply does not render back to the sampled bytes");
    }
    text_ = std::move(full);
    tokens_.insert(tokens_.end(), added.begin(), added.end());
    awaiting_ = false;
    return m;
}

transcript transcript::from_messages(const tokenizer& tok, std::vector<chat::message> messages,
                                     chat::think_mode mode, uint64_t n_ctx) {
    if (messages.empty() || messages.front().role != chat::role::system) {
        throw Error("agent transcript: the messages must start with the system message");
    }
    transcript t(tok, mode, n_ctx);
    t.messages_.push_back(messages.front());
    t.extend(false);
    t.base_text_ = t.text_;
    t.base_tokens_ = t.tokens_.size();
    if (messages.size() > 1) {
        t.messages_ = std::move(messages);
        const chat::role last = t.messages_.back().role;
        t.extend(last == chat::role::user || last == chat::role::tool);
    }
    return t;
}

transcript transcript::restore(const tokenizer& tok, std::vector<chat::message> messages,
                               chat::think_mode mode, uint64_t n_ctx, const std::string& text,
                               std::vector<int32_t> tokens) {
    transcript t = from_messages(tok, std::move(messages), mode, n_ctx);
    if (t.text_ != text) {
        throw Error("agent session: the messages do not render to the saved prompt text");
    }
    for (const int32_t id : tokens) {
        if (!tok.valid(id))
            throw Error("agent session: token id " + std::to_string(id) +
                        " is not in the vocabulary");
    }
    if (tok.decode(tokens) != text) {
        throw Error("agent session: the saved tokens do not spell the saved prompt text");
    }
    if (tokens.size() < t.base_tokens_ ||
        !std::equal(t.tokens_.begin(), t.tokens_.begin() + static_cast<long>(t.base_tokens_),
                    tokens.begin())) {
        throw Error("agent session: the saved tokens do not start with this system prompt");
    }
    t.tokens_ = std::move(tokens);
    return t;
}

json transcript::messages_to_json(const std::vector<chat::message>& messages) {
    json out = json::array();
    for (const chat::message& m : messages) {
        json j = {{"role", chat::role_name(m.role)}, {"content", m.content}};
        if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
        if (m.raw_dsml) j["raw_dsml"] = *m.raw_dsml;
        out.push_back(std::move(j));
    }
    return out;
}

std::vector<chat::message> transcript::messages_from_json(const json& j) {
    if (!j.is_array()) throw Error("agent session: \"messages\" must be an array");
    std::vector<chat::message> out;
    for (const json& e : j) {
        if (!e.is_object() || !e.contains("role") || !e["role"].is_string() ||
            !e.contains("content") || !e["content"].is_string()) {
            throw Error("agent session: a message needs a string role and content");
        }
        const auto role = chat::role_from_string(e["role"].get<std::string>());
        if (!role || (*role != chat::role::system && *role != chat::role::user &&
                      *role != chat::role::assistant && *role != chat::role::tool)) {
            throw Error("agent session: unknown message role " + e["role"].dump());
        }
        chat::message m;
        m.role = *role;
        m.content = e["content"].get<std::string>();
        if (e.contains("reasoning_content")) {
            if (!e["reasoning_content"].is_string()) {
                throw Error("agent session: reasoning_content must be a string");
            }
            m.reasoning_content = e["reasoning_content"].get<std::string>();
        }
        if (e.contains("raw_dsml")) {
            if (!e["raw_dsml"].is_string()) throw Error("agent session: raw_dsml must be a string");
            m.raw_dsml = e["raw_dsml"].get<std::string>();
            const chat::parse_result p = chat::parse_tool_calls(*m.raw_dsml, false);
            for (const chat::parsed_tool_call& c : p.calls) {
                m.tool_calls.push_back({c.id, c.name, c.arguments});
            }
        }
        out.push_back(std::move(m));
    }
    return out;
}

}  // namespace magnetar::agent
