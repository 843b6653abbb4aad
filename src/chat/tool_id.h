// Tool call ids.
//
// Owns: the id format clients see ("call_" + 32 lowercase hex for OpenAI / Responses,
// "toolu_" + 32 hex for Anthropic) and assigning ids to parsed calls without clashes. Does
// not own: remembering ids (replay_map.h).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/dsml.h"

namespace magnetar::chat {

enum class id_style {
    openai,     // call_<32 hex>
    anthropic,  // toolu_<32 hex>
};

// A fresh id from 16 random bytes (std::random_device; a time / process / counter mix when
// no random device is available).
std::string make_tool_id(id_style style);

// Gives every call with an empty id a fresh one that differs from every other id in `calls`
// and for which `taken` (if set) returns false, e.g. ids already in the replay memory.
void assign_missing_ids(std::vector<parsed_tool_call>* calls, id_style style,
                        const std::function<bool(std::string_view)>& taken = {});

}  // namespace magnetar::chat
