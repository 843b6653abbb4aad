// JSON and entity text utilities shared by the chat renderer and the DSML code.
//
// Owns: byte-exact serialisers (the official encoder's Python `json.dumps(ensure_ascii=False)`
// layout, and the compact client-facing layout), whitespace minification, XML-style entity
// escaping of DSML attributes and string values. Does not own: JSON parsing, which is
// nlohmann::json's job.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace magnetar::chat {

// Nesting deeper than this is refused by the serialisers (they recurse).
inline constexpr int kMaxJsonDepth = 256;

// Serialises like Python's `json.dumps(v, ensure_ascii=False)`: ", " and ": " separators,
// member order kept, non-ASCII verbatim, floats in Python repr form ("1.0", "1e-05",
// "1e+16"). Throws magnetar::Error when nesting exceeds kMaxJsonDepth.
std::string python_json_dumps(const nlohmann::ordered_json& v);

// Appends a JSON string literal (with quotes) escaped the way Python's json module does:
// \" \\ \b \f \n \r \t, other bytes below 0x20 as \u00xx, everything else verbatim.
void append_python_json_string(std::string& out, std::string_view s);

// Appends the body of a compact client-facing JSON string (no quotes): \" \\ \n \r \t,
// other bytes below 0x20 as \u00xx; '/', 0x7f and non-ASCII verbatim.
void append_json_string_body(std::string& out, std::string_view s);

// `s` as a compact client-facing JSON string literal, quotes included.
std::string json_quote(std::string_view s);

// Removes ASCII whitespace outside JSON string literals (escapes inside strings are honoured).
// Does not validate.
std::string json_minify(std::string_view s);

// Parses `text` as a JSON object and re-serialises it compactly ({"k":v,...}, string escapes
// as append_json_string_body). Anything that is not a parsable JSON object becomes "{}".
std::string compact_json_object(std::string_view text);

// Replaces & < > " by their entities (DSML attribute values written by the canonical writer).
std::string attr_escape(std::string_view s);

// Replaces &amp; &lt; &gt; &quot; &apos; by their characters; any other '&' stays literal.
std::string entity_unescape(std::string_view s);

// Length of the longest suffix of `s` that is a proper prefix of one of the five entities
// above (a trailing '&', "&am", "&quo"...), i.e. bytes a stream must hold back until the
// entity is complete or proven not to be one.
size_t partial_entity_suffix(std::string_view s);

// Number of trailing bytes of `s` that form an incomplete (but so far valid) UTF-8 sequence.
size_t incomplete_utf8_suffix(std::string_view s);

// Longest suffix of `s` that is a proper, non-empty prefix of `marker`.
size_t partial_marker_suffix(std::string_view s, std::string_view marker);

}  // namespace magnetar::chat
