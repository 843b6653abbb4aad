// Literal strings of the DeepSeek V4 chat protocol.
//
// Owns: the special-token literals the renderer writes and the parsers look for, and the
// fixed text blocks of the prompt (Think Max prefix). Does not own: token ids, which the
// tokenizer resolves by string at load (src/tokenizer).
#pragma once

#include <cstdint>
#include <string_view>

namespace magnetar::chat {

// The seven strings the tokenizer recognises as control tokens in rendered chat text. The bars
// are U+FF5C FULLWIDTH VERTICAL LINE, the '▁' is U+2581.
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";

// Official role marker of the `latest_reminder` role. Only a control token if the tokenizer
// recognises it; otherwise it is BPE-split like plain text.
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";

// Wrapper of one tool result inside a user turn.
inline constexpr std::string_view kToolResultOpen = "<tool_result>";
inline constexpr std::string_view kToolResultClose = "</tool_result>";

// Prepended to the prompt in Think Max mode (476 bytes, ends with a blank line). Identical to
// the official encoder's REASONING_EFFORT_MAX.
inline constexpr std::string_view kThinkMaxPrefix =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

// Think Max is honoured only when the allocated context is at least this large
// (384 Ki tokens); below it the mode silently degrades to normal thinking.
inline constexpr uint64_t kThinkMaxMinContext = 393216;

}  // namespace magnetar::chat
