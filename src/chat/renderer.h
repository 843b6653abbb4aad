// Chat prompt renderer: messages + tool schemas -> one UTF-8 prompt string.
//
// Owns: the DeepSeek V4 prompt layout (BOS, system text, tools section, user / assistant /
// tool-result turns, thinking markers, Think Max prefix, reasoning retention). Follows the
// official encoder (encoding_dsv4.py) wherever ds4 deviates from it; docs/chat.md lists each
// rule and decision. Does not own: tokenization of the result (rendered-chat tokenization in
// src/tokenizer) or per-API JSON normalisation (the server).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_tokens.h"
#include "chat/message.h"

namespace magnetar::chat {

enum class think_mode {
    nothink,    // direct answer: the generation prompt ends with </think>
    think,      // normal thinking: the generation prompt ends with <think>
    think_max,  // thinking plus the Think Max prefix (needs kThinkMaxMinContext)
};

// One entry per offered tool: either the OpenAI shape {"type":"function","function":{...}}
// (the "function" object is rendered) or a bare function object (rendered whole).
using tool_list = std::vector<nlohmann::ordered_json>;

struct render_options {
    think_mode mode = think_mode::think;
    // Context allocated for evaluating the prompt (not the prompt length); think_max
    // degrades to think below kThinkMaxMinContext (0 = unknown, which also degrades).
    uint64_t n_ctx = 0;
    // Append <｜Assistant｜> + <think> / </think> after a final user-like message.
    bool add_generation_prompt = true;
    // Optional response format; rendered after the tools section as the official
    // "## Response Format" block.
    std::optional<nlohmann::ordered_json> response_format;
    // When set, receives the [begin, end) byte ranges of the output that hold client text
    // (message content, reasoning, tool results, tool schemas, the response format, and the
    // names, keys and values of canonically rendered tool calls; a replayed raw_dsml block is
    // not client text), ascending, so a tokenizer can keep special-token literals in them from
    // becoming control tokens (tokenizer/trusted_specials.h).
    std::vector<std::pair<size_t, size_t>>* client_spans = nullptr;
};

// think_max below the minimum context becomes think; other modes are unchanged.
think_mode effective_think_mode(think_mode mode, uint64_t n_ctx);

// The whole prompt. Throws magnetar::Error for tool schemas that cannot be serialised (JSON
// nested deeper than kMaxJsonDepth).
std::string render_chat(const std::vector<message>& messages, const tool_list& tools,
                        const render_options& options);

// The "## Tools" section for the given tools (official TOOLS_TEMPLATE, ends with "\n"); empty
// when `tools` is empty.
std::string render_tools_section(const tool_list& tools);

// One schema line per tool, joined by "\n" (Python json.dumps layout).
std::string render_tool_schemas(const tool_list& tools);

// What the next render appends for a finished assistant turn after the generation prompt
// (<｜Assistant｜><think> or </think>): reasoning + "</think>" when thinking, then content,
// the DSML block (raw_dsml when attached, else canonical) and EOS. Used to bring a live
// KV state in line with the next request's render after a tool-call turn.
std::string render_assistant_continuation(const message& assistant, think_mode mode);

// `content` with every "</tool_result>" turned into "&lt;/tool_result>" so a tool result
// cannot close its wrapper.
std::string escape_tool_result(std::string_view content);

}  // namespace magnetar::chat
