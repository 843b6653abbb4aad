// OpenAI Responses (protocol §5.7), request normalisation: input items -> chat messages (§2.5)
// and Responses function tools -> the chat tool shape.
//
// Owns: the input item table (messages, reasoning, tool calls and their outputs, compaction
// items), the rule that a tool output answers a call of the same input, and the 400s of a
// malformed `input` or `tools`. Does not own: instructions, tool_choice, reasoning options,
// previous_response_id (the handler prepends its remembered items), the response shapes or the
// streaming events (api_responses.cpp).
#include <optional>
#include <unordered_set>

#include "server/api.h"
#include "server/api_responses_internal.h"

namespace magnetar::server::detail {

// ---------------------------------------------------------------------------------------------
// Request normalisation
// ---------------------------------------------------------------------------------------------

[[noreturn]] void bad_input(const std::string& message) {
    api_error e(400, "invalid JSON request: " + message);
    e.param = "input";
    throw e;
}

namespace {

// Text of a message item's content: a string, or parts whose type carries text.
std::string item_content_text(const json& content) {
    if (content.is_null()) return {};
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) bad_input("message content must be a string or an array of parts");
    std::string out;
    for (const auto& part : content) {
        if (!part.is_object()) bad_input("each content part must be an object");
        const std::string type = part.value("type", std::string());
        if (type != "input_text" && type != "output_text" && type != "text" &&
            type != "summary_text" && type != "reasoning_text") {
            bad_input("content part type '" + type + "' is not supported");
        }
        auto t = part.find("text");
        if (t == part.end() || !t->is_string()) bad_input("content part without text");
        out += t->get<std::string>();
    }
    return out;
}

// Text of reasoning pieces ([{type, text}]), joined by "\n".
void reasoning_pieces(const json& item, const char* key, std::string* out, bool* any) {
    auto it = item.find(key);
    if (it == item.end() || !it->is_array()) return;
    for (const auto& p : *it) {
        if (!p.is_object()) continue;
        auto t = p.find("text");
        if (t == p.end() || !t->is_string()) continue;
        if (*any) *out += '\n';
        *out += t->get<std::string>();
        *any = true;
    }
}

// The output of a tool-output item: a string, text parts, or any JSON value serialised.
std::string tool_output_text(const json& item) {
    for (const char* key : {"output", "result", "tools"}) {
        auto it = item.find(key);
        if (it == item.end() || it->is_null()) continue;
        if (it->is_string()) return it->get<std::string>();
        if (it->is_array()) {
            bool all_parts = true;
            std::string text;
            for (const auto& p : *it) {
                if (p.is_object() && p.contains("text") && p["text"].is_string()) {
                    text += p["text"].get<std::string>();
                } else {
                    all_parts = false;
                }
            }
            if (all_parts) return text;
        }
        return it->dump();
    }
    return {};
}

bool is_tool_output_type(const std::string& t) {
    const std::string suffix = "_call_output";
    return t == "tool_search_output" ||
           (t.size() > suffix.size() &&
            t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0);
}

}  // namespace

// Input items (protocol §2.5 Responses table) -> chat messages. Reasoning items are buffered
// and attached to the next assistant message or tool call; a user / tool item (or the end of
// the input) flushes them as an assistant message of their own.
std::vector<chat::message> input_messages(const json& items) {
    std::vector<chat::message> out;
    std::unordered_set<std::string> call_ids;
    std::string pending;
    bool have_pending = false;

    auto flush_pending = [&] {
        if (!have_pending) return;
        chat::message m;
        m.role = chat::role::assistant;
        m.reasoning_content = std::move(pending);
        out.push_back(std::move(m));
        pending.clear();
        have_pending = false;
    };
    // The assistant message a tool call attaches to.
    auto call_target = [&]() -> chat::message& {
        const bool prev_assistant = !out.empty() && out.back().role == chat::role::assistant;
        if (prev_assistant && (!have_pending || out.back().reasoning_content.empty())) {
            if (have_pending) out.back().reasoning_content = std::move(pending);
        } else {
            chat::message m;
            m.role = chat::role::assistant;
            if (have_pending) m.reasoning_content = std::move(pending);
            out.push_back(std::move(m));
        }
        pending.clear();
        have_pending = false;
        return out.back();
    };
    auto add_call = [&](const json& item, std::string name, const char* args_key_1,
                        const char* args_key_2) {
        chat::tool_call call;
        auto id = item.find("call_id");
        if (id == item.end() || !id->is_string()) id = item.find("id");
        if (id != item.end() && id->is_string()) call.id = id->get<std::string>();
        call.name = std::move(name);
        call.arguments = "{}";
        for (const char* key : {args_key_1, args_key_2}) {
            if (!key) continue;
            auto a = item.find(key);
            if (a != item.end() && !a->is_null()) {
                call.arguments = arguments_text(*a);
                break;
            }
        }
        if (!call.id.empty()) call_ids.insert(call.id);
        call_target().tool_calls.push_back(std::move(call));
    };

    for (const auto& item : items) {
        if (!item.is_object()) bad_input("each input item must be an object");
        auto ty = item.find("type");
        if (ty != item.end() && !ty->is_string()) bad_input("item 'type' must be a string");
        const std::string type = ty == item.end() ? "message" : ty->get<std::string>();
        if (auto st = item.find("status");
            st != item.end() && !st->is_null() && *st != "completed") {
            bad_input("input items must have status \"completed\" (" + type + ")");
        }
        if (type == "message") {
            const std::string role_s = item.value("role", std::string("user"));
            std::optional<chat::role> role;
            if (role_s == "user" || role_s == "assistant" || role_s == "system" ||
                role_s == "developer") {
                role = chat::role_from_string(role_s);
            }
            if (!role) bad_input("message role '" + role_s + "' is not supported");
            chat::message m;
            m.role = *role;
            if (auto c = item.find("content"); c != item.end()) m.content = item_content_text(*c);
            if (*role == chat::role::assistant) {
                if (have_pending) m.reasoning_content = std::move(pending);
                pending.clear();
                have_pending = false;
            } else {
                flush_pending();
            }
            out.push_back(std::move(m));
        } else if (type == "reasoning") {
            std::string text;
            bool any = false;
            reasoning_pieces(item, "summary", &text, &any);
            reasoning_pieces(item, "content", &text, &any);
            if (have_pending && any) pending += '\n';
            pending += text;
            have_pending = true;
        } else if (type == "function_call" || type == "custom_tool_call") {
            auto n = item.find("name");
            if (n == item.end() || !n->is_string()) bad_input(type + " without a name");
            add_call(item, n->get<std::string>(), "arguments", "input");
        } else if (type == "local_shell_call") {
            add_call(item, "local_shell", "action", "arguments");
        } else if (type == "tool_search_call") {
            add_call(item, "tool_search", "arguments", "input");
        } else if (type == "web_search_call" || type == "image_generation_call") {
            add_call(item, type, "action", "arguments");
        } else if (is_tool_output_type(type)) {
            flush_pending();
            chat::message m;
            m.role = chat::role::tool;
            m.tool_call_id = item.value("call_id", std::string());
            if (!call_ids.count(m.tool_call_id)) {
                throw api_error(400, "Responses continuation state is not available for call_id " +
                                         m.tool_call_id +
                                         "; retry by replaying the full input history");
            }
            m.content = tool_output_text(item);
            out.push_back(std::move(m));
        } else if (type == "compaction" || type == "context_compaction") {
            continue;  // does not flush pending reasoning
        } else {
            bad_input("input item type '" + type + "' is not supported");
        }
    }
    flush_pending();
    return out;
}

// Responses function tools ({type, name, description, parameters}) in the chat shape the
// renderer takes; other tool types (hosted tools) are not offered to the model.
chat::tool_list responses_tools(const json& body) {
    chat::tool_list tools;
    auto it = body.find("tools");
    if (it == body.end() || it->is_null()) return tools;
    if (!it->is_array()) throw api_error(400, "invalid JSON request: 'tools' must be an array");
    for (const auto& t : *it) {
        if (!t.is_object()) {
            throw api_error(400, "invalid JSON request: each tool must be an object");
        }
        if (t.value("type", std::string()) != "function") continue;
        if (auto f = t.find("function"); f != t.end() && f->is_object()) {  // chat shape
            tools.push_back(t);
            continue;
        }
        auto name = t.find("name");
        if (name == t.end() || !name->is_string()) {
            throw api_error(400, "invalid JSON request: a function tool needs a 'name'");
        }
        json fn = json::object();
        fn["name"] = *name;
        if (auto d = t.find("description"); d != t.end() && d->is_string()) fn["description"] = *d;
        if (auto p = t.find("parameters"); p != t.end() && !p->is_null()) fn["parameters"] = *p;
        json tool = json::object();
        tool["type"] = "function";
        tool["function"] = fn;
        tools.push_back(tool);
    }
    return tools;
}

}  // namespace magnetar::server::detail
