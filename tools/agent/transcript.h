// The agent's conversation as the model sees it: the messages, the prompt text they render to
// and its tokens, kept in step so that every new piece only appends.
//
// The system message carries the built-in tool contract, rendered as template text: its DSML
// markers and thinking markers are control tokens. Everything a person or a tool wrote (the
// system text given with -sys, user messages, tool results) is client text, tokenized with the
// special-token literals in it as plain text (tokenizer/trusted_specials.h). The assistant's
// replies are kept as the model sampled them, tokens and bytes, so the live session never
// re-evaluates them; the message form of a reply (reasoning, visible text, the sampled DSML
// block as raw_dsml) renders to exactly those bytes, which is what the transcript checks on
// every append and what lets it be rebuilt from messages (compaction, a saved session).
//
// Owns: the message list, the rendered text, the tokens, their agreement. Does not own: the
// prompt layout (src/chat/renderer), evaluation (agent.h), the tools (tools.h).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "chat/message.h"
#include "chat/renderer.h"

namespace magnetar {
class tokenizer;
class special_literals;
}  // namespace magnetar

namespace magnetar::agent {

// The tool contract of tools.h as the chat template's tool list (OpenAI function shape).
chat::tool_list contract_tools();

// The agent's part of the system message (what it is, where it works, how results come back);
// the user's -sys text follows it.
std::string agent_preamble(const std::string& workdir);

class transcript {
  public:
    // A conversation of one system message (`system`, which may be empty) under `mode`, for a
    // context of n_ctx tokens (Think Max needs a large one, chat::effective_think_mode).
    transcript(const tokenizer& tok, std::string system, chat::think_mode mode, uint64_t n_ctx);
    // A saved conversation: the messages must render to `text` and `tokens` must spell it
    // (their bytes; ids in the vocabulary). Throws magnetar::Error naming the mismatch.
    static transcript restore(const tokenizer& tok, std::vector<chat::message> messages,
                              chat::think_mode mode, uint64_t n_ctx, const std::string& text,
                              std::vector<int32_t> tokens);

    // A user message and the assistant opening after it (<｜Assistant｜> and <think> or
    // </think>).
    void add_user(const std::string& text);
    // Tool results, one message each in call order, then the assistant opening.
    void add_tool_results(const std::vector<std::string>& results);
    // The reply the model sampled after the latest opening: its tokens (without a stopping
    // EOS) and their bytes. A reply that stopped inside its thinking block gets </think>; every
    // reply gets EOS. Throws magnetar::Error when the reply's message form would not render to
    // the sampled bytes (a transcript that would drift from the session).
    chat::message add_reply(std::span<const int32_t> tokens, const std::string& bytes);

    // Whether the transcript ends with an assistant opening (a reply is due).
    bool awaiting_reply() const { return awaiting_; }
    bool thinking() const { return mode_ != chat::think_mode::nothink; }
    chat::think_mode mode() const { return mode_; }

    const std::vector<chat::message>& messages() const { return messages_; }
    const std::string& text() const { return text_; }
    const std::vector<int32_t>& tokens() const { return tokens_; }
    // Tokens and bytes of the system part alone (BOS, contract, system text): the prefix every
    // session of one setup shares.
    size_t base_tokens() const { return base_tokens_; }
    const std::string& base_text() const { return base_text_; }

    // The same conversation rebuilt from messages (rendered and tokenized afresh): compaction
    // and saved sessions. `messages` must start with the system message; an assistant opening
    // is added when the last message is user-like.
    static transcript from_messages(const tokenizer& tok, std::vector<chat::message> messages,
                                    chat::think_mode mode, uint64_t n_ctx);

    // The messages as JSON ({"role", "content", "reasoning_content", "raw_dsml"}) and back;
    // from_json throws magnetar::Error naming what is wrong.
    static nlohmann::json messages_to_json(const std::vector<chat::message>& messages);
    static std::vector<chat::message> messages_from_json(const nlohmann::json& j);

  private:
    transcript(const tokenizer& tok, chat::think_mode mode, uint64_t n_ctx);
    // The messages rendered; *spans receives where client text lies.
    std::string render(bool generation_prompt, std::vector<std::pair<size_t, size_t>>* spans) const;
    // Renders the messages and appends the bytes past text_ (which must be a prefix of the
    // render) as trusted-special tokens.
    void extend(bool generation_prompt);

    const tokenizer* tok_;
    std::shared_ptr<const special_literals> lits_;
    chat::think_mode mode_;
    uint64_t n_ctx_;
    chat::tool_list tools_;
    std::vector<chat::message> messages_;
    std::string text_;
    std::vector<int32_t> tokens_;
    std::string base_text_;
    size_t base_tokens_ = 0;
    bool awaiting_ = false;
};

}  // namespace magnetar::agent
