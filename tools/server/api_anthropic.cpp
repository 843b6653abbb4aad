// Anthropic Messages and count_tokens (protocol §5.8).
#include "server/api.h"
#include "server/request_schema.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::server {

namespace {

const char* stop_reason(finish_reason f) {
    switch (f) {
        case finish_reason::stop:
            return "end_turn";
        case finish_reason::length:
            return "max_tokens";
        case finish_reason::tool_calls:
            return "tool_use";
        case finish_reason::error:
        case finish_reason::cancelled:
            return "end_turn";
    }
    return "end_turn";
}

json usage_json(const gen_usage& u, bool with_output) {
    json j = json::object();
    j["input_tokens"] = 0;  // P - R - W
    j["cache_creation_input_tokens"] = u.prompt_tokens - u.cached_tokens;
    j["cache_read_input_tokens"] = u.cached_tokens;
    j["output_tokens"] = with_output ? u.completion_tokens : 0;
    if (json x = speculation_usage(u); with_output && !x.is_null())
        j["magnetar_speculation"] = std::move(x);
    return j;
}

std::string system_text(const json& v) {
    if (v.is_null()) return {};
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_array())
        throw api_error(400, "invalid JSON request: 'system' must be a string or an array");
    std::string out;
    for (const auto& p : v) {
        std::string part;
        if (p.is_string()) {
            part = p.get<std::string>();
        } else if (p.is_object() && p.contains("text") && p["text"].is_string()) {
            part = p["text"].get<std::string>();
        } else {
            continue;
        }
        // Claude Code's billing header parts are not prompt text.
        if (part.rfind("x-anthropic-", 0) == 0) continue;
        if (!out.empty() && out.back() != '\n') out += '\n';
        out += part;
    }
    return out;
}

std::string block_text(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    std::string out;
    if (v.is_array()) {
        for (const auto& b : v) {
            if (b.is_object() && b.value("type", std::string()) == "text" && b.contains("text") &&
                b["text"].is_string()) {
                out += b["text"].get<std::string>();
            } else if (b.is_string()) {
                out += b.get<std::string>();
            }
        }
    }
    return out;
}

// Messages request -> chat messages (protocol §2.5). A user message's tool_result blocks
// become tool messages, its text blocks user messages, in block order. The request passed
// validate_request: roles, block types and shapes are known to be valid; blocks that carry
// no prompt text (redacted_thinking, server tool blocks) are skipped.
std::vector<chat::message> anthropic_messages(const json& body) {
    std::vector<chat::message> out;
    if (auto s = body.find("system"); s != body.end()) {
        std::string sys = system_text(*s);
        if (!sys.empty()) {
            chat::message m;
            m.role = chat::role::system;
            m.content = std::move(sys);
            out.push_back(std::move(m));
        }
    }
    for (const auto& m : body.at("messages")) {
        const std::string role_s = opt_string(m, "role").value_or("user");
        const auto role = chat::role_from_string(role_s);
        if (!role) throw api_error(400, "unknown role \"" + role_s + "\"");
        auto c = m.find("content");
        if (c == m.end() || c->is_null() || c->is_string()) {
            chat::message msg;
            msg.role = *role;
            if (c != m.end() && c->is_string()) msg.content = c->get<std::string>();
            out.push_back(std::move(msg));
            continue;
        }
        if (*role == chat::role::assistant) {
            chat::message msg;
            msg.role = chat::role::assistant;
            for (const auto& b : *c) {
                if (!b.is_object()) continue;
                const std::string type = b.value("type", std::string());
                if (type == "text" && b.contains("text") && b["text"].is_string()) {
                    msg.content += b["text"].get<std::string>();
                } else if (type == "thinking" && b.contains("thinking") &&
                           b["thinking"].is_string()) {
                    msg.reasoning_content += b["thinking"].get<std::string>();
                } else if (type == "tool_use") {
                    chat::tool_call call;
                    call.id = b.value("id", std::string());
                    call.name = b.value("name", std::string());
                    auto in = b.find("input");
                    call.arguments = in != b.end() && !in->is_null() ? arguments_text(*in) : "{}";
                    msg.tool_calls.push_back(std::move(call));
                }
            }
            out.push_back(std::move(msg));
            continue;
        }
        chat::message text_msg;
        text_msg.role = *role;
        bool have_text = false;
        for (const auto& b : *c) {
            if (!b.is_object()) continue;
            const std::string type = b.value("type", std::string());
            if (type == "text" && b.contains("text") && b["text"].is_string()) {
                if (have_text && !text_msg.content.empty()) text_msg.content += "\n\n";
                text_msg.content += b["text"].get<std::string>();
                have_text = true;
            } else if (type == "tool_result") {
                if (have_text) {
                    out.push_back(std::move(text_msg));
                    text_msg = chat::message{};
                    text_msg.role = *role;
                    have_text = false;
                }
                chat::message tr;
                tr.role = chat::role::tool;
                tr.tool_call_id = b.value("tool_use_id", std::string());
                if (auto tc = b.find("content"); tc != b.end()) tr.content = block_text(*tc);
                out.push_back(std::move(tr));
            }
        }
        if (have_text) out.push_back(std::move(text_msg));
    }
    return out;
}

chat::tool_list anthropic_tools(const json& body) {
    chat::tool_list tools;
    auto it = body.find("tools");
    if (it == body.end() || it->is_null()) return tools;
    for (const auto& t : *it) tools.push_back(t);
    if (auto tc = body.find("tool_choice");
        tc != body.end() && tc->is_object() && tc->value("type", std::string()) == "none") {
        tools.clear();
    }
    return tools;
}

class messages_stream : public stream_formatter {
  public:
    messages_stream(std::string id, std::string model, gen_usage start_usage)
        : id_(std::move(id)), model_(std::move(model)), start_usage_(start_usage) {}

    void start(std::string& out) override {
        json msg = json::object();
        msg["id"] = id_;
        msg["type"] = "message";
        msg["role"] = "assistant";
        msg["model"] = model_;
        msg["content"] = json::array();
        msg["stop_reason"] = nullptr;
        msg["stop_sequence"] = nullptr;
        msg["usage"] = usage_json(start_usage_, false);
        json e = json::object();
        e["type"] = "message_start";
        e["message"] = msg;
        sse_event(out, "message_start", e);
        json ping = json::object();
        ping["type"] = "ping";
        sse_event(out, "ping", ping);
    }
    void delta(const chat::stream_event& e, std::string& out) override {
        switch (e.kind) {
            case chat::stream_event_kind::reasoning:
                if (open_ != block::thinking) {
                    close(out);
                    json cb = json::object();
                    cb["type"] = "thinking";
                    cb["thinking"] = "";
                    cb["signature"] = "";
                    open(out, block::thinking, cb);
                    sent_thinking_ = true;
                }
                send_delta(out, "thinking_delta", "thinking", e.text);
                break;
            case chat::stream_event_kind::text:
                if (e.text.empty()) return;
                if (open_ != block::text) {
                    close(out);
                    json cb = json::object();
                    cb["type"] = "text";
                    cb["text"] = "";
                    open(out, block::text, cb);
                    sent_text_ = true;
                }
                streamed_text_ += e.text;
                send_delta(out, "text_delta", "text", e.text);
                break;
            case chat::stream_event_kind::tool_call_start: {
                close(out);
                json cb = json::object();
                cb["type"] = "tool_use";
                cb["id"] = e.id;
                cb["name"] = e.name;
                cb["input"] = json::object();
                open(out, block::tool, cb);
                streamed_calls_ = true;
                break;
            }
            case chat::stream_event_kind::tool_call_arguments:
                if (open_ == block::tool)
                    send_delta(out, "input_json_delta", "partial_json", e.text);
                break;
            case chat::stream_event_kind::tool_call_end:
                if (open_ == block::tool) close(out);
                break;
            case chat::stream_event_kind::tool_error:
                break;
        }
    }
    void finish(const gen_result& r, std::string& out) override {
        if (open_ == block::tool) close(out);  // a tool block the projection left open
        if (r.calls.empty() && r.content.size() > streamed_text_.size() &&
            r.content.compare(0, streamed_text_.size(), streamed_text_) == 0) {
            chat::stream_event e;
            e.kind = chat::stream_event_kind::text;
            e.text = r.content.substr(streamed_text_.size());
            delta(e, out);
        }
        close(out);
        if (!r.calls.empty() && !streamed_calls_) {
            for (const auto& c : r.calls) {
                json cb = json::object();
                cb["type"] = "tool_use";
                cb["id"] = c.id;
                cb["name"] = c.name;
                cb["input"] = json::object();
                open(out, block::tool, cb);
                send_delta(out, "input_json_delta", "partial_json",
                           chat::compact_json_object(c.arguments));
                close(out);
            }
        } else if (sent_thinking_ && !sent_text_ && r.calls.empty()) {
            json cb = json::object();
            cb["type"] = "text";
            cb["text"] = "";
            open(out, block::text, cb);
            close(out);
        }
        json d = json::object();
        d["stop_reason"] = stop_reason(r.finish);
        d["stop_sequence"] = nullptr;
        json u = json::object();
        u["input_tokens"] = 0;
        u["cache_creation_input_tokens"] = r.usage.prompt_tokens - r.usage.cached_tokens;
        u["cache_read_input_tokens"] = r.usage.cached_tokens;
        u["output_tokens"] = r.usage.completion_tokens;
        json md = json::object();
        md["type"] = "message_delta";
        md["delta"] = d;
        md["usage"] = u;
        sse_event(out, "message_delta", md);
        json ms = json::object();
        ms["type"] = "message_stop";
        sse_event(out, "message_stop", ms);
    }
    void error(const std::string& message, std::string& out) override {
        json e = json::object();
        e["type"] = "api_error";
        e["message"] = message;
        json b = json::object();
        b["type"] = "error";
        b["error"] = e;
        sse_event(out, "error", b);
    }

  private:
    enum class block { none, thinking, text, tool };

    void open(std::string& out, block kind, const json& content_block) {
        json e = json::object();
        e["type"] = "content_block_start";
        e["index"] = index_;
        e["content_block"] = content_block;
        sse_event(out, "content_block_start", e);
        open_ = kind;
    }
    void close(std::string& out) {
        if (open_ == block::none) return;
        if (open_ == block::thinking) send_delta(out, "signature_delta", "signature", id_);
        json e = json::object();
        e["type"] = "content_block_stop";
        e["index"] = index_;
        sse_event(out, "content_block_stop", e);
        open_ = block::none;
        ++index_;
    }
    void send_delta(std::string& out, const char* type, const char* key, const std::string& v) {
        json d = json::object();
        d["type"] = type;
        d[key] = v;
        json e = json::object();
        e["type"] = "content_block_delta";
        e["index"] = index_;
        e["delta"] = d;
        sse_event(out, "content_block_delta", e);
    }

    std::string id_, model_;
    gen_usage start_usage_;
    block open_ = block::none;
    int index_ = 0;
    bool sent_thinking_ = false, sent_text_ = false, streamed_calls_ = false;
    std::string streamed_text_;
};

struct messages_request {
    std::string model;
    gen_request gen;
    bool stream = false;
};

messages_request read_messages(context& ctx, const json& body, bool for_counting) {
    messages_request mr;
    mr.model = opt_string(body, "model").value_or(ctx.opts.model_id);
    std::vector<chat::message> messages = anthropic_messages(body);
    const chat::tool_list tools = anthropic_tools(body);
    const chat::think_mode mode = think_mode_of(ctx, body, false);
    gen_request& r = mr.gen;
    r.kind = gen_kind::chat;
    r.thinking = mode != chat::think_mode::nothink;
    r.tools = !tools.empty();
    r.id_style = chat::id_style::anthropic;
    // tool_choice {"type": "any"} or {"type": "tool", "name": N}: the reply starts with a tool
    // call (of N).
    if (auto tc = body.find("tool_choice"); tc != body.end() && tc->is_object()) {
        const std::string type = tc->value("type", std::string());
        if (type == "any") r.forced_call = forced_call_for(tools, "", "tool_choice");
        if (type == "tool") {
            const std::string name = tc->value("name", std::string());
            if (name.empty()) {
                api_error e(400, "tool_choice: type \"tool\" needs the tool's name");
                e.param = "tool_choice";
                throw e;
            }
            r.forced_call = forced_call_for(tools, name, "tool_choice");
        }
    }
    if (!for_counting) {
        mr.stream = opt_bool(body, "stream").value_or(false);
        r.stops = string_list(body, "stop_sequences");
        read_sampling(body, ctx.opts.sampling, r.thinking, {true, false, false, false},
                      &r.sampling);
    }
    chat::render_options ro;
    ro.mode = mode;
    ro.n_ctx = static_cast<uint64_t>(ctx.opts.n_ctx);
    attach_replay(ctx, messages);
    r.input = build_chat_prompt(ctx.tok, ctx.lits, messages, tools, ro);
    if (!for_counting) {
        r.max_tokens = clamp_max_tokens(ctx, opt_int(body, "max_tokens"),
                                        static_cast<int64_t>(r.input.tokens.size()));
    }
    return mr;
}

}  // namespace

void handle_messages(context& ctx, const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    validate_request(api_endpoint::messages, body);
    messages_request mr = read_messages(ctx, body, false);
    const bool stream = mr.stream;
    const std::string model = mr.model;
    auto j = make_job(ctx, std::move(mr.gen), body, api_style::anthropic, "messages");
    const std::string id = "msg_" + random_hex(12);
    auto complete = [id, model](const gen_result& g) {
        json content = json::array();
        if (g.reasoning && !g.reasoning->empty()) {
            json b = json::object();
            b["type"] = "thinking";
            b["thinking"] = *g.reasoning;
            b["signature"] = id;
            content.push_back(b);
        }
        if (!g.content.empty()) {
            json b = json::object();
            b["type"] = "text";
            b["text"] = g.content;
            content.push_back(b);
        }
        for (const auto& c : g.calls) {
            json b = json::object();
            b["type"] = "tool_use";
            b["id"] = c.id;
            b["name"] = c.name;
            b["input"] = json::parse(chat::compact_json_object(c.arguments), nullptr, false);
            if (b["input"].is_discarded()) b["input"] = json::object();
            content.push_back(b);
        }
        if (content.empty() || (content.size() == 1 && content[0]["type"] == "thinking")) {
            json b = json::object();
            b["type"] = "text";
            b["text"] = "";
            content.push_back(b);
        }
        json out = json::object();
        out["id"] = id;
        out["type"] = "message";
        out["role"] = "assistant";
        out["model"] = model;
        out["content"] = content;
        out["stop_reason"] = stop_reason(g.finish);
        out["stop_sequence"] = nullptr;
        out["usage"] = usage_json(g.usage, true);
        return out.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    };
    std::shared_ptr<stream_formatter> fmt;
    if (stream) {
        gen_usage u;
        u.prompt_tokens = static_cast<int64_t>(j->req.input.tokens.size());
        fmt = std::make_shared<messages_stream>(id, model, u);
    }
    serve_job(ctx, req, res, j, api_style::anthropic, fmt, complete);
}

void handle_count_tokens(context& ctx, const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    validate_request(api_endpoint::count_tokens, body);
    const messages_request mr = read_messages(ctx, body, true);
    json out = json::object();
    out["input_tokens"] = mr.gen.input.tokens.size();
    res.set_content(out.dump() + "\n", "application/json");
}

}  // namespace magnetar::server
