// The JSONL documents of `magnetar render` and `magnetar score cases`: one JSON object per line,
// plain text ({"text"}) or a conversation ({"messages", "tools", "mode"}), rendered with the
// chat template and tokenized with the control-token guard (docs/tokenizer.md "render").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace magnetar {
class tokenizer;
class special_literals;
}  // namespace magnetar

namespace magnetar::cli {

// One document, ready to tokenize: the rendered text and the client spans (empty for plain
// text, which is tokenized without control tokens apart from BOS and EOS).
struct document {
    std::string text;
    std::vector<std::pair<size_t, size_t>> client_spans;
    bool chat = false;
};

// The object on one line; throws magnetar::Error naming `where` (FILE:LINE).
nlohmann::ordered_json parse_json_line(const std::string& line, const std::string& where);

// {"text": ...} -> BOS + text + EOS; {"messages": [...], "tools": [...], "mode": ...} -> the
// rendered conversation, with the generation prompt when it does not end with an assistant.
// Other keys are ignored (callers read their own). Throws magnetar::Error naming `where`.
document parse_document(const nlohmann::ordered_json& j, const std::string& where);

std::vector<int32_t> tokenize_document(const tokenizer& tok, const special_literals& lits,
                                       const document& d);

// A string member ("" when absent or null); throws when it is not a string.
std::string string_field(const nlohmann::ordered_json& obj, const char* key,
                         const std::string& where);

// Calls fn(line, "FILE:N") for every non-blank line of `path` ("-": standard input).
void for_each_line(const std::string& path,
                   const std::function<void(const std::string&, const std::string&)>& fn);

}  // namespace magnetar::cli
