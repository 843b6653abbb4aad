// Chat messages: the engine-neutral input of the renderer.
//
// Owns: the normalised message shape every HTTP API (chat completions, messages, responses)
// is converted into. Does not own: per-API JSON normalisation (the
// server front end) or tokenization (src/tokenizer).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace magnetar::chat {

enum class role {
    system,
    developer,  // rendered as a user turn (official encoder)
    user,
    assistant,
    tool,             // tool result; the "function" role maps here too
    latest_reminder,  // official role, rendered as <｜latest_reminder｜> + content
};

// "system", "developer", "user", "assistant", "tool", "function" (= tool), "latest_reminder";
// anything else is nullopt (front ends drop unknown roles).
std::optional<role> role_from_string(std::string_view s);
const char* role_name(role r);

// One tool call of an assistant message.
struct tool_call {
    std::string id;  // client-visible id ("call_…" / "toolu_…"); may be empty
    std::string name;
    std::string arguments;  // JSON text of the arguments object, as the client sent it
};

struct message {
    chat::role role = chat::role::user;
    std::string content;
    std::string reasoning_content;      // assistant only
    std::vector<tool_call> tool_calls;  // assistant only
    std::string tool_call_id;           // tool results: the call they answer
    std::string name;                   // tool results: the tool's name (not rendered)
    // Exact sampled DSML block to render instead of the canonical one (exact replay, see
    // replay_map::attach). Includes its leading "\n\n" when the model wrote one.
    std::optional<std::string> raw_dsml;
};

}  // namespace magnetar::chat
