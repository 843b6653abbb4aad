// Pieces of the DSML grammar shared by the authoritative parser and the streaming projection,
// so both read tags and attributes identically. Internal to src/chat.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/dsml.h"

namespace magnetar::chat::detail {

// The spelled-out markers of one variant.
struct dsml_tags {
    std::string open_tc;       // <D tool_calls>
    std::string close_tc;      // </D tool_calls>
    std::string open_invoke;   // <D invoke   (attributes and '>' follow)
    std::string close_invoke;  // </D invoke>
    std::string open_param;    // <D parameter
    std::string close_param;   // </D parameter>
};

const dsml_tags& tags_for(dsml_variant v);

inline bool is_ascii_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

using attr_list = std::vector<std::pair<std::string, std::string>>;

// Parses ` name="value" string="true"` (values entity-unescaped). False on anything that is
// not a sequence of NAME="TEXT" pairs separated by whitespace.
bool parse_attrs(std::string_view text, attr_list* out);

// First value of attribute `name`, or nullptr.
const std::string* find_attr(const attr_list& attrs, std::string_view name);

// After a tag name: the tag continues with whitespace or ends with '>'.
inline bool tag_name_ends(char c) {
    return c == '>' || is_ascii_ws(c);
}

}  // namespace magnetar::chat::detail
