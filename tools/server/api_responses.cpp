// OpenAI Responses (protocol §5.7): POST /v1/responses and GET /v1/responses/{id}.
//
// Owns: the handlers (instructions, tool_choice, reasoning.{effort,summary},
// previous_response_id, sampling and output limits of a request), the response object, the
// streaming event sequence, and recording finished responses in the context's response_store.
// Generation runs on the worker exactly as for chat completions. Does not own: turning input
// items and function tools into chat messages and chat-shaped tools (§2.5,
// api_responses_input.cpp).
#include <deque>

#include "server/api.h"
#include "server/api_responses_internal.h"
#include "server/request_schema.h"

namespace magnetar::server {

namespace {

using detail::bad_input;
using detail::input_messages;
using detail::responses_tools;

// What a request asked for, needed again to shape the response.
struct response_meta {
    std::string id;
    std::string model;
    int64_t created_at = 0;
    std::string previous_response_id;
    json instructions;  // string or null
    json tools;         // as sent
    json tool_choice;
    json reasoning;  // {effort, summary}
    json temperature, top_p, max_output_tokens;
    bool store = true;
    bool summary = false;  // reasoning.summary opted in: reasoning items are shown
    bool thinking = false;
    json input_items;  // this request's input items (for the store)
};

// ---------------------------------------------------------------------------------------------
// Response shapes
// ---------------------------------------------------------------------------------------------

const char* item_status(finish_reason f) {
    return f == finish_reason::length || f == finish_reason::error || f == finish_reason::cancelled
               ? "incomplete"
               : "completed";
}

const char* response_status(finish_reason f) {
    switch (f) {
        case finish_reason::stop:
        case finish_reason::tool_calls:
            return "completed";
        case finish_reason::length:
            return "incomplete";
        case finish_reason::error:
        case finish_reason::cancelled:
            return "failed";
    }
    return "failed";
}

json usage_json(const gen_usage& u) {
    json in = json::object();
    in["cached_tokens"] = u.cached_tokens;
    in["cache_write_tokens"] = u.prompt_tokens - u.cached_tokens;
    json out = json::object();
    out["reasoning_tokens"] = u.reasoning_tokens;
    json j = json::object();
    j["input_tokens"] = u.prompt_tokens;
    j["input_tokens_details"] = in;
    j["output_tokens"] = u.completion_tokens;
    j["output_tokens_details"] = out;
    if (json x = speculation_usage(u); !x.is_null()) j["magnetar_speculation"] = std::move(x);
    j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
    return j;
}

// The response object; `output` and `usage` filled by the caller (or empty / null).
json response_object(const response_meta& m, const char* status) {
    json r = json::object();
    r["id"] = m.id;
    r["object"] = "response";
    r["created_at"] = m.created_at;
    r["status"] = status;
    r["model"] = m.model;
    r["error"] = nullptr;
    r["incomplete_details"] = nullptr;
    r["output"] = json::array();
    r["usage"] = nullptr;
    r["instructions"] = m.instructions;
    r["max_output_tokens"] = m.max_output_tokens;
    r["parallel_tool_calls"] = true;
    r["previous_response_id"] =
        m.previous_response_id.empty() ? json(nullptr) : json(m.previous_response_id);
    r["reasoning"] = m.reasoning;
    r["store"] = m.store;
    r["temperature"] = m.temperature;
    r["tool_choice"] = m.tool_choice;
    r["tools"] = m.tools;
    r["top_p"] = m.top_p;
    r["metadata"] = json::object();
    return r;
}

// Fills status, error / incomplete_details, output and usage of a finished response.
void finish_object(json& r, const gen_result& g, json output) {
    r["status"] = response_status(g.finish);
    if (g.finish == finish_reason::length) {
        json d = json::object();
        d["reason"] = "max_output_tokens";
        r["incomplete_details"] = d;
    } else if (g.finish == finish_reason::error || g.finish == finish_reason::cancelled) {
        json e = json::object();
        e["code"] = "server_error";
        e["message"] = g.error.empty() ? "generation failed" : g.error;
        r["error"] = e;
    }
    r["output"] = std::move(output);
    r["usage"] = usage_json(g.usage);
}

json reasoning_item(const std::string& id, const char* status, const std::string& text) {
    json part = json::object();
    part["type"] = "summary_text";
    part["text"] = text;
    json item = json::object();
    item["id"] = id;
    item["type"] = "reasoning";
    item["status"] = status;
    item["summary"] = text.empty() ? json::array() : json::array({part});
    return item;
}

json output_text_part(const std::string& text) {
    json part = json::object();
    part["type"] = "output_text";
    part["text"] = text;
    part["annotations"] = json::array();
    return part;
}

json message_item(const std::string& id, const char* status, const std::string* text) {
    json item = json::object();
    item["id"] = id;
    item["type"] = "message";
    item["status"] = status;
    item["role"] = "assistant";
    item["content"] = text ? json::array({output_text_part(*text)}) : json::array();
    return item;
}

json function_call_item(const std::string& id, const char* status, const std::string& name,
                        const std::string& call_id, const std::string& arguments) {
    json item = json::object();
    item["id"] = id;
    item["type"] = "function_call";
    item["status"] = status;
    item["name"] = name;
    item["call_id"] = call_id;
    item["arguments"] = arguments;
    return item;
}

// Response and item ids: prefix + 24 hex digits from the kernel CSPRNG (random_hex).
std::string new_id(const char* prefix) {
    return prefix + random_hex(12);
}

// The output items of a non-streamed response.
json output_items(const response_meta& m, const gen_result& g) {
    const char* st = item_status(g.finish);
    json out = json::array();
    if (m.summary && m.thinking && g.reasoning && !g.reasoning->empty()) {
        out.push_back(reasoning_item(new_id("rs_"), st, *g.reasoning));
    }
    if (!g.content.empty()) out.push_back(message_item(new_id("msg_"), st, &g.content));
    for (const auto& c : g.calls) {
        out.push_back(function_call_item(new_id("fc_"), st, c.name, c.id,
                                         chat::compact_json_object(c.arguments)));
    }
    return out;
}

// Records a finished response for previous_response_id: this request's input items plus what
// the model produced. The reasoning is kept even when it was not shown, so a continuation
// re-renders the turn as the live KV holds it.
void remember(context& ctx, const response_meta& m, const gen_result& g, const json& object) {
    if (!m.store || g.finish == finish_reason::cancelled) return;
    json items = m.input_items;
    if (m.thinking && g.reasoning && !g.reasoning->empty()) {
        json part = json::object();
        part["type"] = "reasoning_text";
        part["text"] = *g.reasoning;
        json item = json::object();
        item["type"] = "reasoning";
        item["summary"] = json::array();
        item["content"] = json::array({part});
        items.push_back(item);
    }
    if (!g.content.empty()) {
        json item = json::object();
        item["type"] = "message";
        item["role"] = "assistant";
        item["content"] = json::array({output_text_part(g.content)});
        items.push_back(item);
    }
    for (const auto& c : g.calls) {
        json item = json::object();
        item["type"] = "function_call";
        item["name"] = c.name;
        item["call_id"] = c.id;
        item["arguments"] = chat::compact_json_object(c.arguments);
        items.push_back(item);
    }
    ctx.responses.put(m.id, m.previous_response_id, std::move(items), object);
}

// ---------------------------------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------------------------------

class responses_stream : public stream_formatter {
  public:
    responses_stream(context& ctx, std::shared_ptr<const response_meta> meta)
        : ctx_(ctx), meta_(std::move(meta)) {}

    void start(std::string& out) override {
        json r = response_object(*meta_, "in_progress");
        json e = event("response.created");
        e["response"] = r;
        send(out, e);
        e = event("response.in_progress");
        e["response"] = r;
        send(out, e);
    }

    void delta(const chat::stream_event& e, std::string& out) override {
        switch (e.kind) {
            case chat::stream_event_kind::reasoning:
                if (!meta_->summary || reasoning_closed_ || e.text.empty()) return;
                if (reasoning_index_ < 0) open_reasoning(out);
                reasoning_text_ += e.text;
                {
                    json ev = event("response.reasoning_summary_text.delta");
                    ev["item_id"] = reasoning_id_;
                    ev["output_index"] = reasoning_index_;
                    ev["summary_index"] = 0;
                    ev["delta"] = e.text;
                    send(out, ev);
                }
                return;
            case chat::stream_event_kind::text:
                if (e.text.empty()) return;
                close_reasoning(out, "completed");
                text(out, e.text);
                return;
            case chat::stream_event_kind::tool_call_start: {
                close_reasoning(out, "completed");
                call c;
                c.stream_index = e.index;
                c.call_id = e.id;
                c.name = e.name;
                open_call(out, std::move(c));
                return;
            }
            case chat::stream_event_kind::tool_call_arguments:
                for (auto& c : calls_) {
                    if (c.stream_index == e.index && !c.done) {
                        c.arguments += e.text;
                        arguments_delta(out, c, e.text);
                    }
                }
                return;
            case chat::stream_event_kind::tool_call_end:
            case chat::stream_event_kind::tool_error:
                return;
        }
    }

    void finish(const gen_result& r, std::string& out) override {
        const char* st = item_status(r.finish);
        if (reasoning_index_ >= 0 && !reasoning_closed_) {
            // Still open: the model never closed </think> (or wrote nothing after it).
            close_reasoning(out, r.raw.find("</think>") != std::string::npos ? st : "incomplete");
        }
        // A failed tool parse makes the whole visible text content: send what was held back.
        if (r.calls.empty() && r.content.size() > message_text_.size() &&
            r.content.compare(0, message_text_.size(), message_text_) == 0) {
            text(out, r.content.substr(message_text_.size()));
        }
        if (message_index_ >= 0) {
            json ev = event("response.output_text.done");
            ev["item_id"] = message_id_;
            ev["output_index"] = message_index_;
            ev["content_index"] = 0;
            ev["text"] = message_text_;
            ev["logprobs"] = json::array();
            send(out, ev);
            ev = event("response.content_part.done");
            ev["item_id"] = message_id_;
            ev["output_index"] = message_index_;
            ev["content_index"] = 0;
            ev["part"] = output_text_part(message_text_);
            send(out, ev);
            item_done(out, message_index_, message_item(message_id_, st, &message_text_));
        }
        // Calls: the authoritative parse decides the arguments; streamed ids were adopted.
        for (size_t i = 0; i < r.calls.size(); ++i) {
            const auto& pc = r.calls[i];
            const std::string args = chat::compact_json_object(pc.arguments);
            call* c = nullptr;
            for (auto& s : calls_) {
                if (!s.done && s.call_id == pc.id) c = &s;
            }
            if (!c) {
                call n;
                n.call_id = pc.id;
                n.name = pc.name;
                c = &open_call(out, std::move(n));
                c->arguments = args;
                arguments_delta(out, *c, args);
            }
            close_call(out, *c, st, args);
        }
        for (auto& c : calls_) {  // streamed but not confirmed by the parse
            if (!c.done) close_call(out, c, "incomplete", c.arguments);
        }
        json obj = response_object(*meta_, "completed");
        json output = json::array();
        for (auto& [index, item] : items_) output.push_back(item);
        finish_object(obj, r, std::move(output));
        const std::string status = obj["status"];
        json ev = event(status == "completed"    ? "response.completed"
                        : status == "incomplete" ? "response.incomplete"
                                                 : "response.failed");
        ev["response"] = obj;
        send(out, ev);
        remember(ctx_, *meta_, r, obj);
    }

    void error(const std::string& message, std::string& out) override {
        json e = json::object();
        e["message"] = message;
        e["type"] = "server_error";
        json b = json::object();
        b["error"] = e;
        sse_event(out, "error", b);
    }

  private:
    struct call {
        size_t stream_index = SIZE_MAX;  // dsml_stream index; SIZE_MAX: not streamed
        std::string item_id, call_id, name, arguments;
        int output_index = -1;
        bool done = false;
    };

    json event(const char* type) {
        json e = json::object();
        e["type"] = type;
        e["sequence_number"] = seq_++;
        return e;
    }
    void send(std::string& out, const json& e) { sse_data(out, e); }

    int add_item(std::string& out, json item) {
        const int index = next_index_++;
        json ev = event("response.output_item.added");
        ev["output_index"] = index;
        ev["item"] = item;
        send(out, ev);
        items_.emplace_back(index, std::move(item));
        return index;
    }
    void item_done(std::string& out, int index, json item) {
        json ev = event("response.output_item.done");
        ev["output_index"] = index;
        ev["item"] = item;
        send(out, ev);
        for (auto& [i, it] : items_) {
            if (i == index) it = std::move(item);
        }
    }

    void open_reasoning(std::string& out) {
        reasoning_id_ = new_id("rs_");
        reasoning_index_ = add_item(out, reasoning_item(reasoning_id_, "in_progress", ""));
        json part = json::object();
        part["type"] = "summary_text";
        part["text"] = "";
        json ev = event("response.reasoning_summary_part.added");
        ev["item_id"] = reasoning_id_;
        ev["output_index"] = reasoning_index_;
        ev["summary_index"] = 0;
        ev["part"] = part;
        send(out, ev);
    }
    void close_reasoning(std::string& out, const char* status) {
        if (reasoning_index_ < 0 || reasoning_closed_) {
            reasoning_closed_ = true;
            return;
        }
        reasoning_closed_ = true;
        json ev = event("response.reasoning_summary_text.done");
        ev["item_id"] = reasoning_id_;
        ev["output_index"] = reasoning_index_;
        ev["summary_index"] = 0;
        ev["text"] = reasoning_text_;
        send(out, ev);
        json part = json::object();
        part["type"] = "summary_text";
        part["text"] = reasoning_text_;
        ev = event("response.reasoning_summary_part.done");
        ev["item_id"] = reasoning_id_;
        ev["output_index"] = reasoning_index_;
        ev["summary_index"] = 0;
        ev["part"] = part;
        send(out, ev);
        item_done(out, reasoning_index_, reasoning_item(reasoning_id_, status, reasoning_text_));
    }

    void text(std::string& out, const std::string& t) {
        if (message_index_ < 0) {
            message_id_ = new_id("msg_");
            message_index_ = add_item(out, message_item(message_id_, "in_progress", nullptr));
            json ev = event("response.content_part.added");
            ev["item_id"] = message_id_;
            ev["output_index"] = message_index_;
            ev["content_index"] = 0;
            ev["part"] = output_text_part("");
            send(out, ev);
        }
        message_text_ += t;
        json ev = event("response.output_text.delta");
        ev["item_id"] = message_id_;
        ev["output_index"] = message_index_;
        ev["content_index"] = 0;
        ev["delta"] = t;
        ev["logprobs"] = json::array();
        send(out, ev);
    }

    call& open_call(std::string& out, call c) {
        c.item_id = new_id("fc_");
        c.output_index =
            add_item(out, function_call_item(c.item_id, "in_progress", c.name, c.call_id, ""));
        calls_.push_back(std::move(c));
        return calls_.back();
    }
    void arguments_delta(std::string& out, const call& c, const std::string& d) {
        json ev = event("response.function_call_arguments.delta");
        ev["item_id"] = c.item_id;
        ev["output_index"] = c.output_index;
        ev["delta"] = d;
        send(out, ev);
    }
    void close_call(std::string& out, call& c, const char* status, const std::string& args) {
        c.done = true;
        json ev = event("response.function_call_arguments.done");
        ev["item_id"] = c.item_id;
        ev["output_index"] = c.output_index;
        ev["name"] = c.name;
        ev["arguments"] = args;
        send(out, ev);
        item_done(out, c.output_index,
                  function_call_item(c.item_id, status, c.name, c.call_id, args));
    }

    context& ctx_;
    std::shared_ptr<const response_meta> meta_;
    int64_t seq_ = 0;
    int next_index_ = 0;
    std::vector<std::pair<int, json>> items_;  // output items in index order
    std::string reasoning_id_, reasoning_text_;
    int reasoning_index_ = -1;
    bool reasoning_closed_ = false;
    std::string message_id_, message_text_;
    int message_index_ = -1;
    std::deque<call> calls_;  // stable references
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// POST /v1/responses
// ---------------------------------------------------------------------------------------------

void handle_responses(context& ctx, const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    validate_request(api_endpoint::responses, body);
    auto meta = std::make_shared<response_meta>();
    response_meta& m = *meta;
    m.id = new_id("resp_");
    m.model = opt_string(body, "model").value_or(ctx.opts.model_id);
    m.created_at = unix_time();

    if (auto c = body.find("conversation"); c != body.end() && !c->is_null()) {
        throw api_error(400, "conversation is not supported; replay full input instead");
    }
    // Input items: the remembered history of previous_response_id, then this request's.
    json items = json::array();
    if (auto prev = opt_string(body, "previous_response_id")) {
        if (!ctx.responses.history(*prev, &items)) {
            api_error e(400, "Previous response with id '" + *prev + "' not found.");
            e.param = "previous_response_id";
            e.code = "previous_response_not_found";
            throw e;
        }
        m.previous_response_id = *prev;
    }
    auto in = body.find("input");
    if (in == body.end() || in->is_null()) throw api_error(400, "missing input");
    if (in->is_string()) {
        json item = json::object();
        item["type"] = "message";
        item["role"] = "user";
        item["content"] = *in;
        m.input_items = json::array({item});
    } else if (in->is_array()) {
        m.input_items = *in;
    } else {
        bad_input("'input' must be a string or an array of items");
    }
    // item_reference items stand for an item of a stored response (the AI SDK sends them in
    // tool loops instead of the items themselves); the resolved item is what is stored.
    for (auto& item : m.input_items) {
        if (!item.is_object() || item.value("type", std::string()) != "item_reference") continue;
        const std::string ref = item.value("id", std::string());
        json found;
        if (!ctx.responses.item(ref, &found)) {
            api_error e(400, "item_reference: no stored item with id '" + ref +
                                 "' (items of responses stored by this server process are "
                                 "kept; replay the item itself)");
            e.param = "input";
            throw e;
        }
        item = std::move(found);
    }
    for (const auto& item : m.input_items) items.push_back(item);
    std::vector<chat::message> messages = input_messages(items);
    if (auto ins = opt_string(body, "instructions"); ins && !ins->empty()) {
        chat::message sys;
        sys.role = chat::role::system;
        sys.content = *ins;
        messages.insert(messages.begin(), std::move(sys));
        m.instructions = *ins;
    }
    if (messages.empty()) bad_input("'input' has no messages");

    chat::tool_list tools = responses_tools(body);
    m.tools = body.contains("tools") && body["tools"].is_array() ? body["tools"] : json::array();
    m.tool_choice = "auto";
    // "required" or {"type": "function", "name": N}: the reply starts with a tool call (of N).
    std::optional<chat::forced_call_start> forced_call;
    if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
        if (tc->is_string()) {
            const std::string v = tc->get<std::string>();
            if (v == "none") {
                tools.clear();
            } else if (v == "required") {
                forced_call = forced_call_for(tools, "", "tool_choice");
            } else if (v != "auto") {
                api_error e(400, "tool_choice '" + v + "' is not one of none, auto, required");
                e.param = "tool_choice";
                throw e;
            }
            m.tool_choice = v;
        } else {
            const std::string name = tc->value("name", std::string());
            if (tc->value("type", std::string()) != "function" || name.empty()) {
                api_error e(400,
                            "tool_choice: an object names a function: {\"type\": "
                            "\"function\", \"name\": ...}");
                e.param = "tool_choice";
                throw e;
            }
            forced_call = forced_call_for(tools, name, "tool_choice");
            m.tool_choice = *tc;
        }
    }

    m.reasoning = json::object();
    m.reasoning["effort"] = nullptr;
    m.reasoning["summary"] = nullptr;
    if (auto rs = body.find("reasoning"); rs != body.end() && !rs->is_null()) {
        if (!rs->is_object()) {
            throw api_error(400, "invalid JSON request: 'reasoning' must be an object");
        }
        if (auto e = opt_string(*rs, "effort")) m.reasoning["effort"] = *e;
        if (auto s = opt_string(*rs, "summary")) {
            m.reasoning["summary"] = *s;
            m.summary = *s == "auto" || *s == "concise" || *s == "detailed";
        }
    }
    const chat::think_mode mode = think_mode_of(ctx, body, true);
    m.thinking = mode != chat::think_mode::nothink;
    m.store = opt_bool(body, "store").value_or(true);
    const bool stream = opt_bool(body, "stream").value_or(false);
    auto max_tokens = opt_int(body, "max_output_tokens");
    if (!max_tokens) max_tokens = opt_int(body, "max_tokens");
    m.max_output_tokens = max_tokens ? json(*max_tokens) : json(nullptr);
    const auto temperature = opt_number(body, "temperature");
    const auto top_p = opt_number(body, "top_p");
    m.temperature = temperature ? json(*temperature) : json(nullptr);
    m.top_p = top_p ? json(*top_p) : json(nullptr);

    gen_request r;
    r.kind = gen_kind::chat;
    r.thinking = m.thinking;
    r.tools = !tools.empty();
    r.id_style = chat::id_style::openai;
    r.forced_call = forced_call;
    read_sampling(body, ctx.opts.sampling, r.thinking, {false, false, true, false}, &r.sampling);

    chat::render_options ro;
    ro.mode = mode;
    ro.n_ctx = static_cast<uint64_t>(ctx.opts.n_ctx);
    if (auto t = body.find("text"); t != body.end() && t->is_object()) {
        if (auto f = t->find("format");
            f != t->end() && f->is_object() && f->value("type", std::string()) != "text") {
            ro.response_format = *f;
        }
    }
    attach_replay(ctx, messages);
    r.input = build_chat_prompt(ctx.tok, ctx.lits, messages, tools, ro);
    r.max_tokens = clamp_max_tokens(ctx, max_tokens, static_cast<int64_t>(r.input.tokens.size()));
    auto j = make_job(ctx, std::move(r), body, api_style::openai, "input");

    auto complete = [&ctx, meta](const gen_result& g) {
        json obj = response_object(*meta, "completed");
        finish_object(obj, g, output_items(*meta, g));
        remember(ctx, *meta, g, obj);
        // No trailing newline (protocol §5.1).
        return obj.dump(-1, ' ', false, json::error_handler_t::replace);
    };
    std::shared_ptr<stream_formatter> fmt;
    if (stream) fmt = std::make_shared<responses_stream>(ctx, meta);
    serve_job(ctx, req, res, j, api_style::openai, fmt, complete);
}

// ---------------------------------------------------------------------------------------------
// GET /v1/responses/{id}
// ---------------------------------------------------------------------------------------------

void handle_get_response(context& ctx, const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    json obj;
    if (!ctx.responses.response(id, &obj)) {
        api_error e(404, "Response with id '" + id + "' not found.");
        e.param = "response_id";
        throw e;
    }
    res.set_content(obj.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

}  // namespace magnetar::server
