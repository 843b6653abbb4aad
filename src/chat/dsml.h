// DSML tool calls: canonical rendering and the authoritative post-generation parser.
//
// Owns: the DSML block grammar (full "<｜DSML｜…", short "<DSML｜…" and plain "<tool_calls>"
// variants), parameter encoding (string="true" raw text vs string="false" JSON), the
// canonical writer used when the sampled bytes are unknown, and the lenient parser whose
// result is authoritative for a finished generation. Does not own: incremental projection
// while streaming (dsml_stream.h), exact replay (replay_map.h), ids (tool_id.h).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/message.h"

namespace magnetar::chat {

// Marker spellings of one DSML block; the variant found at the opening tag is used for the
// whole block.
enum class dsml_variant {
    full,        // <｜DSML｜tool_calls>
    short_form,  // <DSML｜tool_calls> (first bar missing, a known model slip)
    plain,       // <tool_calls> (plain XML, a known model slip)
};

// "｜DSML｜", "DSML｜" or "".
std::string_view dsml_infix(dsml_variant v);

// Canonical block for `calls`: "\n\n<｜DSML｜tool_calls>\n", one invoke per call joined by
// "\n", "\n</｜DSML｜tool_calls>" (official encoder layout). Arguments that parse as a JSON
// object become one parameter per member in the client's order (strings raw with
// string="true", other values as Python-style JSON with string="false"); anything else
// becomes a single string parameter "arguments" holding the raw text. Empty when `calls` is.
// When `client_spans` is set it receives the [begin, end) byte ranges of the block that hold
// client text (names, parameter keys and values), relative to the block's start.
std::string render_tool_calls(const std::vector<tool_call>& calls,
                              std::vector<std::pair<size_t, size_t>>* client_spans = nullptr);

// The start of a reply that must call a tool (tool_choice "required", or a named tool): the
// canonical block opening "\n\n<｜DSML｜tool_calls>\n", and for a named tool its invoke
// opening. In three pieces so that the name, client text, is tokenized as text: `before` and
// `after` are template text (DSML markers), `name` the attribute-escaped name ("" and `after`
// empty when no tool is named).
struct forced_call_start {
    std::string before;
    std::string name;
    std::string after;
};
forced_call_start forced_tool_call_start(std::string_view name);

// The block a history render uses for an assistant message: raw_dsml when attached, else the
// canonical block.
std::string dsml_block(const message& assistant);

// The value of a string="true" parameter as written: every "</｜DSML｜parameter>" inside it
// has its '<' replaced by "&lt;". Everything else ('&', '>', "&&"…) stays literal.
std::string escape_param_close(std::string_view value);

enum class parse_status {
    no_tool_calls,  // no tool start found (or none after the last </think> when thinking)
    ok,             // one complete block parsed
    malformed,      // a tool start was found but the block breaks the grammar
    unterminated,   // a tool start was found but the text ended inside the block
};

const char* parse_status_name(parse_status s);

struct parsed_tool_call {
    std::string id;  // empty: the parser never invents ids (see tool_id.h)
    std::string name;
    std::string arguments;  // {"k": v, ...}: strings JSON-quoted, JSON values minified
};

struct parse_result {
    parse_status status = parse_status::no_tool_calls;
    // Visible text: after the reasoning, up to the tool block minus trailing ASCII whitespace.
    std::string content;
    // Reasoning (before the first </think>, a leading <think> dropped); nullopt when the text
    // has no </think> and thinking is off.
    std::optional<std::string> reasoning;
    std::vector<parsed_tool_call> calls;  // only when status == ok
    // The exact block bytes, from the tool start (including a matched leading "\n\n") through
    // the closing tag; what exact replay remembers. Only when status == ok.
    std::string raw_dsml;
    dsml_variant variant = dsml_variant::full;
    size_t tool_start = std::string_view::npos;  // offset of the tool start, if any
    // Failures: what went wrong and where; invokes completed before the failure (never to be
    // executed, useful for diagnostics).
    std::string error;
    size_t error_offset = 0;
    std::vector<parsed_tool_call> partial_calls;
};

// Authoritative parse of one finished generation. In thinking mode only text after the last
// </think> is searched for a tool block (DSML quoted inside reasoning is not a call). Lenient:
// whitespace between tags, missing string attribute (treated as "true"), parameters nested
// in a parameter without a string attribute (recovered as a JSON object), short and plain
// variants. Never throws; bad input yields malformed / unterminated with a message.
parse_result parse_tool_calls(std::string_view text, bool thinking);

// Splits reasoning from content: drops a leading "<think>"; with a "</think>", reasoning is
// what precedes the first one and content what follows.
void split_reasoning(std::string_view text, bool thinking, std::optional<std::string>* reasoning,
                     std::string* content);

}  // namespace magnetar::chat
