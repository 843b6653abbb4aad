// OpenAI Chat Completions and legacy Completions (protocol §5.5, §5.6), plus the shared
// request helpers of api.h.
#include <algorithm>

#include "server/api.h"
#include "server/request_schema.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::server {

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

chat::think_mode think_mode_of(const context& ctx, const json& body, bool responses) {
    think_request tr;
    tr.responses = responses;
    tr.model = body.value("model", std::string());
    if (auto it = body.find("thinking"); it != body.end() && !it->is_null()) {
        if (it->is_boolean()) {
            tr.enabled = it->get<bool>();
        } else if (it->is_object()) {
            const std::string type = it->value("type", std::string());
            if (type == "enabled")
                tr.enabled = true;
            else if (type == "disabled")
                tr.enabled = false;
            // Other types ("adaptive", ...) keep the default (thinking on).
        } else {
            throw api_error(400, "invalid JSON request: 'thinking' must be a boolean or an object");
        }
    }
    if (!responses) {
        if (auto t = opt_bool(body, "think")) tr.enabled = *t;
    }
    auto effort_at = [&](const json& o, const char* key) {
        if (!o.is_object()) return;
        if (auto e = opt_string(o, key)) tr.effort = *e;
    };
    if (responses) {
        if (auto it = body.find("reasoning"); it != body.end() && it->is_object()) {
            effort_at(*it, "effort");
        }
    } else {
        effort_at(body, "reasoning_effort");
        if (auto it = body.find("output_config"); it != body.end() && it->is_object()) {
            effort_at(*it, "effort");
        }
    }
    auto mode = resolve_think_mode(tr, static_cast<uint64_t>(ctx.opts.n_ctx));
    if (!mode) throw api_error(400, "invalid JSON request: unknown reasoning effort");
    return *mode;
}

json speculation_usage(const gen_usage& u) {
    if (u.spec_steps == 0) return nullptr;
    json x = json::object();
    x["steps"] = u.spec_steps;
    x["drafted_tokens"] = u.spec_drafted;
    x["accepted_tokens"] = u.spec_kept;
    x["mean_tokens_per_step"] =
        static_cast<double>(u.spec_steps + u.spec_kept) / static_cast<double>(u.spec_steps);
    return x;
}

std::string arguments_text(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    return v.dump();
}

void attach_replay(context& ctx, std::vector<chat::message>& messages) {
    if (!ctx.opts.exact_replay) return;
    for (auto& m : messages) {
        if (m.role == chat::role::assistant && !m.tool_calls.empty()) ctx.work.replay().attach(&m);
    }
}

json model_object(const context& ctx, const std::string& id) {
    json m = json::object();
    m["id"] = id;
    m["object"] = "model";
    m["created"] = 1767225600;
    m["owned_by"] = "magnetar";
    m["name"] = ctx.engine.info().name.empty() ? id : ctx.engine.info().name;
    m["context_length"] = ctx.opts.n_ctx;
    json tp = json::object();
    tp["context_length"] = ctx.opts.n_ctx;
    tp["max_completion_tokens"] = std::min(ctx.opts.default_max_tokens, ctx.opts.n_ctx);
    tp["is_moderated"] = false;
    m["top_provider"] = tp;
    m["supported_parameters"] = {"tools",
                                 "tool_choice",
                                 "max_tokens",
                                 "temperature",
                                 "top_p",
                                 "top_k",
                                 "min_p",
                                 "stop",
                                 "seed",
                                 "stream",
                                 "reasoning_effort",
                                 "logprobs",
                                 "top_logprobs"};
    return m;
}

namespace {

const char* finish_name(finish_reason f) {
    switch (f) {
        case finish_reason::stop:
            return "stop";
        case finish_reason::length:
            return "length";
        case finish_reason::tool_calls:
            return "tool_calls";
        case finish_reason::error:
        case finish_reason::cancelled:
            return "error";
    }
    return "error";
}

json usage_json(const gen_usage& u) {
    json d = json::object();
    d["cached_tokens"] = u.cached_tokens;
    d["cache_write_tokens"] = u.prompt_tokens - u.cached_tokens;
    json j = json::object();
    j["prompt_tokens"] = u.prompt_tokens;
    j["completion_tokens"] = u.completion_tokens;
    j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
    j["prompt_tokens_details"] = d;
    json c = json::object();
    c["reasoning_tokens"] = u.reasoning_tokens;  // of completion_tokens: before </think>
    j["completion_tokens_details"] = c;
    if (json x = speculation_usage(u); !x.is_null()) j["magnetar_speculation"] = std::move(x);
    return j;
}

// The end of an OpenAI stream: a usage chunk (when `usage_base`, the stream's chunk header, is
// not null: include_usage) and the [DONE] line.
void end_stream(std::string& out, json usage_base, const gen_usage& usage) {
    if (!usage_base.is_null()) {
        usage_base["choices"] = json::array();
        usage_base["usage"] = usage_json(usage);
        sse_data(out, usage_base);
    }
    out += "data: [DONE]\n\n";
}

// An error after the stream started: an "error" event with a server_error body, then [DONE].
void stream_error(std::string& out, const std::string& message) {
    json e = json::object();
    e["message"] = message;
    e["type"] = "server_error";
    json b = json::object();
    b["error"] = e;
    sse_event(out, "error", b);
    out += "data: [DONE]\n\n";
}

json tool_calls_json(const std::vector<chat::parsed_tool_call>& calls) {
    json arr = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        json f = json::object();
        f["name"] = calls[i].name;
        f["arguments"] = chat::compact_json_object(calls[i].arguments);
        json c = json::object();
        c["index"] = i;
        c["id"] = calls[i].id;
        c["type"] = "function";
        c["function"] = f;
        arr.push_back(c);
    }
    return arr;
}

// Bytes of a token as a JSON-safe string plus its raw byte values.
void token_text(const context& ctx, int32_t id, std::string* text, json* bytes) {
    const std::string_view b = ctx.tok.token_bytes(id);
    *bytes = json::array();
    for (unsigned char c : b) bytes->push_back(c);
    // Invalid UTF-8 (a token that is part of a character) is shown with replacement chars.
    *text = json(std::string(b)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    *text = json::parse(*text).get<std::string>();
}

json chat_logprobs(const context& ctx, const std::vector<token_info>& lps) {
    json content = json::array();
    for (const auto& t : lps) {
        json e = json::object();
        std::string text;
        json bytes;
        token_text(ctx, t.id, &text, &bytes);
        e["token"] = text;
        e["logprob"] = t.logprob;
        e["bytes"] = bytes;
        json top = json::array();
        for (const auto& c : t.top) {
            json o = json::object();
            token_text(ctx, c.id, &text, &bytes);
            o["token"] = text;
            o["logprob"] = c.logprob;
            o["bytes"] = bytes;
            top.push_back(o);
        }
        e["top_logprobs"] = top;
        content.push_back(e);
    }
    json j = json::object();
    j["content"] = content;
    j["refusal"] = nullptr;
    return j;
}

// Chat messages of a Chat Completions request (protocol §2.5); the request passed
// validate_request, so shapes, roles and part types are known to be valid.
std::vector<chat::message> chat_messages(const json& body) {
    std::vector<chat::message> out;
    for (const auto& m : body.at("messages")) {
        const std::string role_s = opt_string(m, "role").value_or("user");
        const auto role = chat::role_from_string(role_s);
        if (!role) throw api_error(400, "unknown role \"" + role_s + "\"");
        chat::message msg;
        msg.role = *role;
        if (auto c = m.find("content"); c != m.end()) msg.content = content_text(*c, "content");
        if (auto r = m.find("reasoning_content"); r != m.end()) {
            msg.reasoning_content = content_text(*r, "reasoning_content");
        }
        msg.tool_call_id = opt_string(m, "tool_call_id").value_or("");
        msg.name = opt_string(m, "name").value_or("");
        if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
            for (const auto& c : *tc) {
                const json& f = c.at("function");
                chat::tool_call call;
                call.id = opt_string(c, "id").value_or("");
                call.name = f.at("name").get<std::string>();
                call.arguments = arguments_text(f.at("arguments"));
                msg.tool_calls.push_back(std::move(call));
            }
        }
        out.push_back(std::move(msg));
    }
    return out;
}

chat::tool_list chat_tools(const json& body) {
    chat::tool_list tools;
    auto it = body.find("tools");
    if (it == body.end() || it->is_null()) return tools;
    for (const auto& t : *it) tools.push_back(t);
    if (auto tc = body.find("tool_choice"); tc != body.end() && tc->is_string() && *tc == "none") {
        tools.clear();
    }
    return tools;
}

class chat_stream : public stream_formatter {
  public:
    chat_stream(const context& ctx, std::string id, std::string model, bool include_usage)
        : ctx_(ctx), id_(std::move(id)), model_(std::move(model)), include_usage_(include_usage) {}

    void start(std::string& out) override {
        json d = json::object();
        d["role"] = "assistant";
        d["content"] = "";
        chunk(out, d, nullptr);
    }
    void delta(const chat::stream_event& e, std::string& out) override {
        json d = json::object();
        switch (e.kind) {
            case chat::stream_event_kind::reasoning:
                d["reasoning_content"] = e.text;
                break;
            case chat::stream_event_kind::text:
                streamed_text_ += e.text;
                d["content"] = e.text;
                break;
            case chat::stream_event_kind::tool_call_start: {
                json f = json::object();
                f["name"] = e.name;
                f["arguments"] = "";
                json c = json::object();
                c["index"] = e.index;
                c["id"] = e.id;
                c["type"] = "function";
                c["function"] = f;
                d["tool_calls"] = json::array({c});
                streamed_calls_ = true;
                break;
            }
            case chat::stream_event_kind::tool_call_arguments: {
                json f = json::object();
                f["arguments"] = e.text;
                json c = json::object();
                c["index"] = e.index;
                c["function"] = f;
                d["tool_calls"] = json::array({c});
                break;
            }
            case chat::stream_event_kind::tool_call_end:
            case chat::stream_event_kind::tool_error:
                return;
        }
        chunk(out, d, nullptr);
    }
    void finish(const gen_result& r, std::string& out) override {
        // A failed tool parse makes the whole text content: send what was held back.
        if (r.calls.empty() && r.content.size() > streamed_text_.size() &&
            r.content.compare(0, streamed_text_.size(), streamed_text_) == 0) {
            json d = json::object();
            d["content"] = r.content.substr(streamed_text_.size());
            chunk(out, d, nullptr);
        }
        if (!r.calls.empty() && !streamed_calls_) {
            json d = json::object();
            d["tool_calls"] = tool_calls_json(r.calls);
            chunk(out, d, nullptr);
        }
        chunk(out, json::object(), finish_name(r.finish));
        end_stream(out, include_usage_ ? base() : json(), r.usage);
    }
    void error(const std::string& message, std::string& out) override {
        stream_error(out, message);
    }

  private:
    json base() const {
        json c = json::object();
        c["id"] = id_;
        c["object"] = "chat.completion.chunk";
        c["created"] = created_;
        c["model"] = model_;
        return c;
    }
    void chunk(std::string& out, const json& delta, const char* finish) {
        json choice = json::object();
        choice["index"] = 0;
        choice["delta"] = delta;
        choice["logprobs"] = nullptr;
        choice["finish_reason"] = finish ? json(finish) : json(nullptr);
        json c = base();
        c["choices"] = json::array({choice});
        sse_data(out, c);
    }

    const context& ctx_;
    std::string id_, model_;
    bool include_usage_;
    int64_t created_ = unix_time();
    std::string streamed_text_;
    bool streamed_calls_ = false;
};

class completion_stream : public stream_formatter {
  public:
    completion_stream(std::string id, std::string model, bool include_usage)
        : id_(std::move(id)), model_(std::move(model)), include_usage_(include_usage) {}
    void start(std::string&) override {}
    void delta(const chat::stream_event& e, std::string& out) override {
        if (e.kind == chat::stream_event_kind::text) chunk(out, e.text, nullptr);
    }
    void finish(const gen_result& r, std::string& out) override {
        chunk(out, "", finish_name(r.finish));
        end_stream(out, include_usage_ ? base() : json(), r.usage);
    }
    void error(const std::string& message, std::string& out) override {
        stream_error(out, message);
    }

  private:
    json base() const {
        json c = json::object();
        c["id"] = id_;
        c["object"] = "text_completion";
        c["created"] = created_;
        c["model"] = model_;
        return c;
    }
    void chunk(std::string& out, const std::string& text, const char* finish) {
        json choice = json::object();
        choice["text"] = text;
        choice["index"] = 0;
        choice["logprobs"] = nullptr;
        choice["finish_reason"] = finish ? json(finish) : json(nullptr);
        json c = base();
        c["choices"] = json::array({choice});
        sse_data(out, c);
    }
    std::string id_, model_;
    bool include_usage_;
    int64_t created_ = unix_time();
};

// Ranges were checked by validate_request ([0, 20]); only the cross-field rule is left.
int read_top_logprobs(const json& body, bool chat_api) {
    if (chat_api) {
        const bool on = opt_bool(body, "logprobs").value_or(false);
        const auto k = opt_int(body, "top_logprobs");
        if (!on) {
            if (k && *k > 0) {
                api_error e(400, "top_logprobs: requires \"logprobs\": true");
                e.param = "top_logprobs";
                throw e;
            }
            return -1;
        }
        return static_cast<int>(k.value_or(0));
    }
    const auto k = opt_int(body, "logprobs");
    return k ? static_cast<int>(*k) : -1;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// POST /v1/chat/completions
// ---------------------------------------------------------------------------------------------

void handle_chat_completions(context& ctx, const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    validate_request(api_endpoint::chat_completions, body);
    const std::string model = opt_string(body, "model").value_or(ctx.opts.model_id);
    std::vector<chat::message> messages = chat_messages(body);
    const chat::tool_list tools = chat_tools(body);
    const chat::think_mode mode = think_mode_of(ctx, body, false);
    const bool stream = opt_bool(body, "stream").value_or(false);
    bool include_usage = false;
    if (auto so = body.find("stream_options"); so != body.end() && so->is_object()) {
        include_usage = opt_bool(*so, "include_usage").value_or(false);
    }
    auto max_tokens = opt_int(body, "max_completion_tokens");
    if (!max_tokens) max_tokens = opt_int(body, "max_tokens");

    gen_request r;
    r.kind = gen_kind::chat;
    r.thinking = mode != chat::think_mode::nothink;
    r.tools = !tools.empty();
    r.id_style = chat::id_style::openai;
    // tool_choice "required" or {"type": "function", "function": {"name": N}}: the reply
    // starts with a tool call (of N).
    if (auto tc = body.find("tool_choice"); tc != body.end()) {
        if (tc->is_string() && *tc == "required") {
            r.forced_call = forced_call_for(tools, "", "tool_choice");
        } else if (tc->is_object() && tc->value("type", std::string()) == "function") {
            // (Other object kinds, such as allowed_tools, leave the choice to the model.)
            std::string name;
            if (auto fn = tc->find("function"); fn != tc->end() && fn->is_object())
                name = fn->value("name", std::string());
            if (name.empty()) {
                api_error e(400,
                            "tool_choice: an object names a function: {\"type\": "
                            "\"function\", \"function\": {\"name\": ...}}");
                e.param = "tool_choice";
                throw e;
            }
            r.forced_call = forced_call_for(tools, name, "tool_choice");
        }
    }
    r.stops = string_list(body, "stop");
    r.top_logprobs = read_top_logprobs(body, true);
    read_sampling(body, ctx.opts.sampling, r.thinking, {true, true, true, true}, &r.sampling);

    chat::render_options ro;
    ro.mode = mode;
    ro.n_ctx = static_cast<uint64_t>(ctx.opts.n_ctx);
    if (auto rf = body.find("response_format");
        rf != body.end() && rf->is_object() && rf->value("type", std::string()) != "text") {
        ro.response_format = *rf;
    }
    attach_replay(ctx, messages);
    r.input = build_chat_prompt(ctx.tok, ctx.lits, messages, tools, ro);
    r.max_tokens = clamp_max_tokens(ctx, max_tokens, static_cast<int64_t>(r.input.tokens.size()));
    auto j = make_job(ctx, std::move(r), body, api_style::openai, "messages");
    if (j->req.max_tokens <= 0) j->req.max_tokens = 0;

    const std::string id = "chatcmpl-" + random_hex(12);
    const int top = j->req.top_logprobs;
    auto complete = [&ctx, id, model, top](const gen_result& g) {
        json msg = json::object();
        msg["role"] = "assistant";
        msg["content"] = g.content;
        if (g.reasoning && !g.reasoning->empty()) msg["reasoning_content"] = *g.reasoning;
        if (!g.calls.empty()) msg["tool_calls"] = tool_calls_json(g.calls);
        json choice = json::object();
        choice["index"] = 0;
        choice["message"] = msg;
        choice["logprobs"] = top >= 0 ? chat_logprobs(ctx, g.logprobs) : json(nullptr);
        choice["finish_reason"] = finish_name(g.finish);
        json out = json::object();
        out["id"] = id;
        out["object"] = "chat.completion";
        out["created"] = unix_time();
        out["model"] = model;
        out["choices"] = json::array({choice});
        out["usage"] = usage_json(g.usage);
        return out.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    };
    std::shared_ptr<stream_formatter> fmt;
    if (stream) fmt = std::make_shared<chat_stream>(ctx, id, model, include_usage);
    serve_job(ctx, req, res, j, api_style::openai, fmt, complete);
}

// ---------------------------------------------------------------------------------------------
// POST /v1/completions
// ---------------------------------------------------------------------------------------------

void handle_completions(context& ctx, const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    validate_request(api_endpoint::completions, body);
    const std::string model = opt_string(body, "model").value_or(ctx.opts.model_id);
    // A string or an array of exactly one string (validate_request).
    const json& p = body.at("prompt");
    const std::string prompt_text = p.is_string() ? p.get<std::string>() : p[0].get<std::string>();
    const chat::think_mode mode = think_mode_of(ctx, body, false);
    const bool stream = opt_bool(body, "stream").value_or(false);
    bool include_usage = false;
    if (auto so = body.find("stream_options"); so != body.end() && so->is_object()) {
        include_usage = opt_bool(*so, "include_usage").value_or(false);
    }
    gen_request r;
    r.kind = gen_kind::completion;
    r.thinking = mode != chat::think_mode::nothink;
    r.stops = string_list(body, "stop");
    r.top_logprobs = read_top_logprobs(body, false);
    read_sampling(body, ctx.opts.sampling, r.thinking, {true, true, true, true}, &r.sampling);
    r.input = build_completion_prompt(ctx.tok, ctx.lits, prompt_text, mode,
                                      static_cast<uint64_t>(ctx.opts.n_ctx));
    r.max_tokens = clamp_max_tokens(ctx, opt_int(body, "max_tokens"),
                                    static_cast<int64_t>(r.input.tokens.size()));
    auto j = make_job(ctx, std::move(r), body, api_style::openai, "prompt");

    const std::string id = "cmpl-" + random_hex(12);
    const int top = j->req.top_logprobs;
    auto complete = [&ctx, id, model, top](const gen_result& g) {
        json choice = json::object();
        choice["text"] = g.raw;
        choice["index"] = 0;
        if (top >= 0) {
            json tokens = json::array(), lps = json::array(), tops = json::array(),
                 offs = json::array();
            size_t off = 0;
            for (const auto& t : g.logprobs) {
                std::string text;
                json bytes;
                token_text(ctx, t.id, &text, &bytes);
                tokens.push_back(text);
                lps.push_back(t.logprob);
                json m = json::object();
                for (const auto& c : t.top) {
                    std::string ct;
                    json cb;
                    token_text(ctx, c.id, &ct, &cb);
                    m[ct] = c.logprob;
                }
                tops.push_back(m);
                offs.push_back(off);
                off += ctx.tok.token_bytes(t.id).size();
            }
            json lp = json::object();
            lp["tokens"] = tokens;
            lp["token_logprobs"] = lps;
            lp["top_logprobs"] = tops;
            lp["text_offset"] = offs;
            choice["logprobs"] = lp;
        } else {
            choice["logprobs"] = nullptr;
        }
        choice["finish_reason"] = finish_name(g.finish);
        json out = json::object();
        out["id"] = id;
        out["object"] = "text_completion";
        out["created"] = unix_time();
        out["model"] = model;
        out["choices"] = json::array({choice});
        out["usage"] = usage_json(g.usage);
        return out.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    };
    std::shared_ptr<stream_formatter> fmt;
    if (stream) fmt = std::make_shared<completion_stream>(id, model, include_usage);
    serve_job(ctx, req, res, j, api_style::openai, fmt, complete);
}

}  // namespace magnetar::server
