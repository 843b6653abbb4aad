// Prompt construction for the server: rendering with untrusted client text, tokenization that
// keeps client text from injecting control tokens, and the think-mode resolution of a request.
//
// Owns: the prompt of a request (rendered text, trusted control-token positions, tokens), the
// check of a cached prefix against a prompt, think-mode resolution (protocol §2.1).
// Does not own: the prompt layout (src/chat/renderer), the special-literal matcher and trusted
// tokenization (src/tokenizer/trusted_specials.h, shared with Engine::tokenize_chat), BPE
// (src/tokenizer), JSON parsing of requests (api_*.cpp).
//
// Why spans: the renderer produces one string in which template literals (<｜User｜>,
// <think>, the DSML markers of a replayed block...) and client text are mixed. Tokenizing it
// with encode_chat() would turn a literal typed by a user into a control token. So the
// renderer reports where client text lies (chat::render_options::client_spans); the special
// literals outside those spans are the trusted ones, and the text is tokenized with exactly
// those as control tokens and everything between them as plain text. Without client literals
// the result equals encode_chat() of the text. (Rendering twice, once with client literals
// masked by same-length filler, broke on escaping: names and arguments holding '<' or '>'
// rendered to different lengths and valid requests were refused.)
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/message.h"
#include "chat/renderer.h"
#include "tokenizer/trusted_specials.h"

namespace magnetar {
class tokenizer;
}

namespace magnetar::server {

// A rendered prompt, its tokens and its trusted control-token positions.
struct prompt {
    std::string text;
    std::vector<trusted_special> specials;
    std::vector<int32_t> tokens;
};

// Whether `cached` (tokens already evaluated, or stored on disk) may stand for the first bytes
// of `in`, the prompt being served: its bytes must spell a prefix of in.text, every control
// token in it must sit exactly where the prompt has a trusted special with the same id, every
// trusted special inside that prefix must be such a token, and no trusted special may straddle
// the prefix's end. Equal bytes alone are not enough: a control token and a client's
// plain-text spelling of it decode to the same bytes, so a byte match would let user text run
// as control tokens, or a forged turn stand in for a real one. On success *cut is the prefix's
// length in bytes.
bool cached_prefix_matches(const tokenizer& tok, std::span<const int32_t> cached, const prompt& in,
                           size_t* cut);

// Renders `messages` / `tools` and tokenizes with the template's literals as the only control
// tokens; raw_dsml blocks (exact replay of sampled bytes) are template text. Throws
// magnetar::Error where the renderer does (tool schemas nested too deeply).
prompt build_chat_prompt(const tokenizer& tok, const special_literals& lits,
                         const std::vector<chat::message>& messages, const chat::tool_list& tools,
                         const chat::render_options& options);

// /v1/completions: BOS + (Think Max prefix) + "You are a helpful assistant" + USER + prompt +
// ASSISTANT + <think> / </think> (protocol §2.6); the prompt text is client text.
prompt build_completion_prompt(const tokenizer& tok, const special_literals& lits,
                               std::string_view user_prompt, chat::think_mode mode, uint64_t n_ctx);

// Think-mode resolution of protocol §2.1. Inputs are the already-typed request fields.
struct think_request {
    std::optional<bool> enabled;  // thinking: bool / {type} ; think: bool
    std::optional<std::string>
        effort;              // reasoning_effort / output_config.effort / reasoning.effort
    bool responses = false;  // effort "none" also disables (Responses)
    std::string model;
};
// Returns nullopt for an unknown effort string.
std::optional<chat::think_mode> resolve_think_mode(const think_request& r, uint64_t n_ctx);

}  // namespace magnetar::server
