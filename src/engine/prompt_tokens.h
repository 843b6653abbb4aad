// Tokenization of a rendered chat prompt that keeps client text from injecting control tokens.
//
// A rendered prompt is template text (BOS, role markers, thinking markers, DSML syntax) with
// client text inside it (chat::render_options::client_spans). Tokenizing the whole string as
// rendered chat (protocol §1.6) matches every special literal, including one a user typed. Here
// client spans that contain a special literal are tokenized as plain text on their own; every
// other span stays part of the surrounding rendered text, so ordinary prompts tokenize exactly
// as the official encoder does.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace magnetar {

void encode_rendered_prompt(const tokenizer& tok, std::string_view text,
                            const std::vector<std::pair<size_t, size_t>>& client_spans,
                            std::vector<int32_t>& out);

}  // namespace magnetar
