// Diagnostics of `magnetar run` (protocol §7.2): the token dump, the logprob dump and
// perplexity scoring. Formats are documented in docs/cli.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "magnetar/engine.h"
#include "magnetar/sampler.h"

namespace magnetar::cli {

// A JSON string literal for token bytes: standard escapes when the bytes are valid UTF-8,
// otherwise every byte >= 0x80 written as \u00XX (the "bytes" array is then authoritative).
std::string json_token_text(std::string_view bytes);

// --dump-logprobs: one step per generated token.
struct logprob_step {
    int32_t selected = 0;
    std::vector<token_logprob> top;
};

// {"source":"magnetar","prompt_tokens":P,"ctx":C,"top_k":K,"steps":[...]} with every number
// at 9 significant digits.
std::string logprobs_json(const Engine& engine, int64_t prompt_tokens, int64_t n_ctx, int top_k,
                          const std::vector<logprob_step>& steps);

// --perplexity-file: plain-text tokenization, the first kPerplexityContext tokens as context,
// teacher-forced NLL over the rest (at most max_scored tokens, and what fits into n_ctx).
inline constexpr int64_t kPerplexityContext = 32;

struct perplexity_result {
    int64_t tokens = 0;  // tokens of the text
    int64_t scored = 0;
    double nll = 0;  // sum of -log p
};

perplexity_result score_perplexity(const Engine& engine, const std::vector<int32_t>& tokens,
                                   int64_t n_ctx, int64_t max_scored);

// "tokens=N scored=M nll=X avg_nll=Y ppl=Z"
std::string perplexity_line(const perplexity_result& r);

}  // namespace magnetar::cli
