// Tool call ids.
//
// Owns: the id format clients see ("call_" + 32 lowercase hex for OpenAI / Responses,
// "toolu_" + 32 hex for Anthropic), assigning ids to parsed calls without clashes, and the
// random source of every client-visible id (kernel CSPRNG: getrandom, then /dev/urandom).
// Does not own: remembering ids (replay_map.h).
#pragma once

#include <cstddef>
#include <cstdint>
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

// Fills `out` from the kernel's CSPRNG (getrandom(2); /dev/urandom when the system call is
// missing). Ids must not be guessable from earlier ones and must stay unique across fork(),
// so there is no user-space generator state. Throws std::runtime_error when neither source
// works (never falls back to a predictable mix).
void random_bytes(uint8_t* out, size_t n);
// 2 * n_bytes lowercase hex digits of random_bytes.
std::string random_hex(size_t n_bytes);

// A fresh id from 16 random bytes.
std::string make_tool_id(id_style style);

// Gives every call with an empty id a fresh one that differs from every other id in `calls`
// and for which `taken` (if set) returns false, e.g. ids already in the replay memory.
void assign_missing_ids(std::vector<parsed_tool_call>* calls, id_style style,
                        const std::function<bool(std::string_view)>& taken = {});

}  // namespace magnetar::chat
