// Chat prompt renderer: see renderer.h. The structure mirrors the official encoder so that
// every byte can be traced to it: (1) normalise messages into turns (tool results and
// consecutive user messages merged into one user turn, tool results sorted by call order),
// (2) drop historical reasoning when the conversation has no tool context, (3) render each
// turn and the transition (<｜Assistant｜> + thinking marker) that follows a user-like turn.
#include "chat/renderer.h"

#include <algorithm>
#include <unordered_map>

#include "chat/dsml.h"
#include "chat/json_text.h"

namespace magnetar::chat {

namespace {

// Official TOOLS_TEMPLATE, split around the schema lines. The <think> / </think> inside are
// real control tokens after rendered-chat tokenization, as in the official encoder.
constexpr std::string_view kToolsHead =
    "## Tools\n"
    "\n"
    "You have access to a set of tools to help answer the user's question. You can invoke "
    "tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n"
    "\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n"
    "\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other "
    "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n"
    "\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
    "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n"
    "\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n"
    "\n"
    "### Available Tool Schemas\n"
    "\n";
constexpr std::string_view kToolsTail =
    "\n"
    "\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// A piece of a user turn: plain text or one wrapped tool result.
struct block {
    bool is_tool_result = false;
    std::string_view text;
    std::string_view tool_call_id;
};

// One turn after normalisation (the official encoder's message list after
// merge_tool_messages / sort_tool_results_by_call_order / _drop_thinking_messages).
struct turn {
    chat::role role = chat::role::user;
    const message* msg = nullptr;  // system / developer / assistant / latest_reminder source
    std::vector<block> blocks;     // user turns
    bool carries_tools = false;    // the tools section (and response format) attach here
};

bool is_user_like(chat::role r) {
    return r == chat::role::user || r == chat::role::developer;
}

// Index of the last user or developer turn, -1 if none (official find_last_user_index).
long last_user_index(const std::vector<turn>& turns) {
    for (size_t i = turns.size(); i-- > 0;) {
        if (is_user_like(turns[i].role)) return static_cast<long>(i);
    }
    return -1;
}

std::vector<turn> build_turns(const std::vector<message>& messages, bool attach_tools) {
    std::vector<turn> turns;
    // The tools section belongs to a leading system message; without one, an empty system
    // turn carries it (the layout serving stacks use with the official encoder).
    if (attach_tools && (messages.empty() || messages[0].role != chat::role::system)) {
        turn t;
        t.role = chat::role::system;
        t.carries_tools = true;
        turns.push_back(t);
        attach_tools = false;
    }
    for (const message& m : messages) {
        if (m.role == chat::role::tool || m.role == chat::role::user) {
            block b;
            b.is_tool_result = m.role == chat::role::tool;
            b.text = m.content;
            b.tool_call_id = m.tool_call_id;
            if (!turns.empty() && turns.back().role == chat::role::user) {
                turns.back().blocks.push_back(b);
            } else {
                turn t;
                t.role = chat::role::user;
                t.blocks.push_back(b);
                turns.push_back(std::move(t));
            }
            continue;
        }
        turn t;
        t.role = m.role;
        t.msg = &m;
        if (attach_tools) {
            t.carries_tools = true;
            attach_tools = false;
        }
        turns.push_back(std::move(t));
    }
    return turns;
}

// Tool results of one user turn follow the call order of the latest assistant message with
// calls; results with unknown ids sort as position 0 (stable, like Python's sorted()).
void sort_tool_results(std::vector<turn>& turns) {
    std::unordered_map<std::string_view, size_t> order;
    for (turn& t : turns) {
        if (t.role == chat::role::assistant && !t.msg->tool_calls.empty()) {
            order.clear();
            for (size_t i = 0; i < t.msg->tool_calls.size(); ++i) {
                const std::string& id = t.msg->tool_calls[i].id;
                if (!id.empty()) order[id] = i;
            }
            continue;
        }
        if (t.role != chat::role::user || order.empty()) continue;
        std::vector<block> results;
        for (const block& b : t.blocks) {
            if (b.is_tool_result) results.push_back(b);
        }
        if (results.size() < 2) continue;
        auto key = [&](const block& b) {
            auto it = order.find(b.tool_call_id);
            return it == order.end() ? size_t{0} : it->second;
        };
        std::stable_sort(results.begin(), results.end(),
                         [&](const block& a, const block& b) { return key(a) < key(b); });
        size_t next = 0;
        for (block& b : t.blocks) {
            if (b.is_tool_result) b = results[next++];
        }
    }
}

// Official _drop_thinking_messages: before the last user-like turn, assistant turns lose
// their reasoning and developer turns disappear.
std::vector<turn> drop_thinking(std::vector<turn> turns) {
    long last_user = last_user_index(turns);
    std::vector<turn> kept;
    for (size_t i = 0; i < turns.size(); ++i) {
        turn& t = turns[i];
        bool keep_role = t.role == chat::role::user || t.role == chat::role::system ||
                         t.role == chat::role::latest_reminder;
        if (keep_role || static_cast<long>(i) >= last_user) {
            kept.push_back(std::move(t));
        } else if (t.role == chat::role::assistant) {
            kept.push_back(std::move(t));  // its reasoning is not rendered (index < last user)
        }
    }
    return kept;
}

// One schema line: the "function" object of the OpenAI shape, else the whole entry.
std::string tool_schema_line(const nlohmann::ordered_json& t) {
    auto fn = t.is_object() ? t.find("function") : t.end();
    if (t.is_object() && fn != t.end() && fn->is_object()) return python_json_dumps(*fn);
    return python_json_dumps(t);
}

// The tools section and the response format of the turn that carries them; the schemas and
// the format are client text (`client` appends and records them).
template <typename ClientFn>
void append_attachments(std::string& out, const turn& t, const tool_list& tools,
                        const render_options& options, ClientFn&& client) {
    if (!t.carries_tools) return;
    if (!tools.empty()) {
        out += "\n\n";
        out += kToolsHead;
        for (size_t i = 0; i < tools.size(); ++i) {
            if (i) out += '\n';
            client(tool_schema_line(tools[i]));
        }
        out += kToolsTail;
    }
    if (options.response_format) {
        out += "\n\n";
        out += kResponseFormatHead;
        client(python_json_dumps(*options.response_format));
    }
}

}  // namespace

think_mode effective_think_mode(think_mode mode, uint64_t n_ctx) {
    if (mode == think_mode::think_max && n_ctx < kThinkMaxMinContext) return think_mode::think;
    return mode;
}

std::string escape_tool_result(std::string_view content) {
    std::string out;
    out.reserve(content.size());
    size_t pos = 0;
    while (true) {
        size_t hit = content.find(kToolResultClose, pos);
        if (hit == std::string_view::npos) break;
        out.append(content.substr(pos, hit - pos));
        out += "&lt;";
        out.append(kToolResultClose.substr(1));
        pos = hit + kToolResultClose.size();
    }
    out.append(content.substr(pos));
    return out;
}

std::string render_tool_schemas(const tool_list& tools) {
    std::string out;
    for (size_t i = 0; i < tools.size(); ++i) {
        if (i) out += '\n';
        out += tool_schema_line(tools[i]);
    }
    return out;
}

std::string render_tools_section(const tool_list& tools) {
    if (tools.empty()) return {};
    std::string out(kToolsHead);
    out += render_tool_schemas(tools);
    out += kToolsTail;
    return out;
}

std::string render_assistant_continuation(const message& assistant, think_mode mode) {
    std::string out;
    if (mode != think_mode::nothink) {
        out += assistant.reasoning_content;
        out += kThinkEnd;
    }
    out += assistant.content;
    out += dsml_block(assistant);
    out += kEos;
    return out;
}

std::string render_chat(const std::vector<message>& messages, const tool_list& tools,
                        const render_options& options) {
    const think_mode mode = effective_think_mode(options.mode, options.n_ctx);
    const bool thinking = mode != think_mode::nothink;

    // Reasoning of earlier turns is kept whenever the conversation has tool context: tools
    // offered (official rule) or any tool call / tool result in the history (ds4 extends the
    // rule so a tool loop keeps its reasoning even if a client stops sending the schemas).
    bool tool_context = !tools.empty();
    for (const message& m : messages) {
        if (m.role == chat::role::tool || !m.tool_calls.empty()) tool_context = true;
    }
    const bool drop = !tool_context;

    std::vector<turn> turns =
        build_turns(messages, !tools.empty() || options.response_format.has_value());
    sort_tool_results(turns);
    if (thinking && drop) turns = drop_thinking(std::move(turns));

    const long last_user = last_user_index(turns);
    std::string out(kBos);
    std::vector<std::pair<size_t, size_t>>* spans = options.client_spans;
    if (spans) spans->clear();
    // Appends client text, recording where it lies.
    auto client = [&](std::string_view text) {
        if (spans && !text.empty()) spans->emplace_back(out.size(), out.size() + text.size());
        out.append(text);
    };
    for (size_t i = 0; i < turns.size(); ++i) {
        const turn& t = turns[i];
        if (i == 0 && mode == think_mode::think_max) out += kThinkMaxPrefix;
        switch (t.role) {
            case chat::role::system:
                if (t.msg) client(t.msg->content);
                append_attachments(out, t, tools, options, client);
                break;
            case chat::role::developer:
                out += kUser;
                client(t.msg->content);
                append_attachments(out, t, tools, options, client);
                break;
            case chat::role::user:
                out += kUser;
                for (size_t b = 0; b < t.blocks.size(); ++b) {
                    if (b) out += "\n\n";
                    if (t.blocks[b].is_tool_result) {
                        out += kToolResultOpen;
                        client(escape_tool_result(t.blocks[b].text));
                        out += kToolResultClose;
                    } else {
                        client(t.blocks[b].text);
                    }
                }
                break;
            case chat::role::latest_reminder:
                out += kLatestReminder;
                client(t.msg->content);
                break;
            case chat::role::assistant:
                if (thinking && (!drop || static_cast<long>(i) > last_user)) {
                    client(t.msg->reasoning_content);
                    out += kThinkEnd;
                }
                client(t.msg->content);
                if (t.msg->raw_dsml || !spans) {
                    out += dsml_block(*t.msg);  // a replayed block is what the model sampled
                } else {
                    std::vector<std::pair<size_t, size_t>> in_block;
                    const size_t base = out.size();
                    out += render_tool_calls(t.msg->tool_calls, &in_block);
                    for (const auto& [b, e] : in_block) spans->emplace_back(base + b, base + e);
                }
                out += kEos;
                break;
            case chat::role::tool:
                break;  // merged into user turns by build_turns
        }

        // Transition after a user-like turn that is followed by an assistant turn (or ends
        // the conversation): the assistant marker and the thinking marker.
        const bool last = i + 1 == turns.size();
        if (!last && turns[i + 1].role != chat::role::assistant &&
            turns[i + 1].role != chat::role::latest_reminder) {
            continue;
        }
        if (!is_user_like(t.role)) continue;
        if (last && !options.add_generation_prompt) continue;
        out += kAssistant;
        if (thinking && (!drop || static_cast<long>(i) >= last_user)) {
            out += kThinkStart;
        } else {
            out += kThinkEnd;
        }
    }
    return out;
}

std::optional<role> role_from_string(std::string_view s) {
    if (s == "system") return role::system;
    if (s == "developer") return role::developer;
    if (s == "user") return role::user;
    if (s == "assistant") return role::assistant;
    if (s == "tool" || s == "function") return role::tool;
    if (s == "latest_reminder") return role::latest_reminder;
    return std::nullopt;
}

const char* role_name(role r) {
    switch (r) {
        case role::system:
            return "system";
        case role::developer:
            return "developer";
        case role::user:
            return "user";
        case role::assistant:
            return "assistant";
        case role::tool:
            return "tool";
        case role::latest_reminder:
            return "latest_reminder";
    }
    return "?";
}

}  // namespace magnetar::chat
