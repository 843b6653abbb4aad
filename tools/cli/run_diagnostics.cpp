// Diagnostics of `magnetar run` (see run_diagnostics.h).
#include "cli/run_diagnostics.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "cli/generation.h"
#include "core/format.h"
#include "tokenizer/byte_level.h"

namespace magnetar::cli {

std::string json_token_text(std::string_view bytes) {
    const bool valid = byte_level::is_valid_utf8(bytes);
    std::string out = "\"";
    for (unsigned char c : bytes) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20 || c == 0x7F || (c >= 0x80 && !valid)) {
                    out += strfmt("\\u%04x", c);
                } else {
                    out.push_back(static_cast<char>(c));
                }
        }
    }
    return out + "\"";
}

namespace {

std::string token_json(const Engine& engine, int32_t id) {
    const std::string bytes = engine.token_bytes(id);
    std::string out = strfmt("{\"id\":%d,\"text\":", id) + json_token_text(bytes) + ",\"bytes\":[";
    for (size_t i = 0; i < bytes.size(); ++i) {
        out += strfmt(i ? ",%u" : "%u", static_cast<unsigned char>(bytes[i]));
    }
    return out + "]}";
}

// %.9g, with the non-finite values JSON cannot hold written as null.
std::string number(double v) {
    return std::isfinite(v) ? strfmt("%.9g", v) : "null";
}

}  // namespace

std::string logprobs_json(const Engine& engine, int64_t prompt_tokens, int64_t n_ctx, int top_k,
                          const std::vector<logprob_step>& steps) {
    std::string out = strfmt(
        "{\"source\":\"magnetar\",\"prompt_tokens\":%lld,\"ctx\":%lld,"
        "\"top_k\":%d,\"steps\":[",
        static_cast<long long>(prompt_tokens), static_cast<long long>(n_ctx), top_k);
    for (size_t i = 0; i < steps.size(); ++i) {
        out += i ? ",\n" : "\n";
        out += strfmt("{\"step\":%zu,\"selected\":", i) + token_json(engine, steps[i].selected) +
               ",\"top_logprobs\":[";
        for (size_t j = 0; j < steps[i].top.size(); ++j) {
            const token_logprob& t = steps[i].top[j];
            out += (j ? "," : "") + std::string("{\"token\":") + token_json(engine, t.id) +
                   ",\"logit\":" + number(t.logit) + ",\"logprob\":" + number(t.logprob) + "}";
        }
        out += "]}";
    }
    return out + "\n]}\n";
}

perplexity_result score_perplexity(const Engine& engine, const std::vector<int32_t>& tokens,
                                   int64_t n_ctx, int64_t max_scored) {
    perplexity_result r;
    r.tokens = static_cast<int64_t>(tokens.size());
    if (r.tokens <= kPerplexityContext) {
        throw std::runtime_error("perplexity: the text has " + std::to_string(r.tokens) +
                                 " tokens; more than " + std::to_string(kPerplexityContext) +
                                 " are needed");
    }
    const int64_t n_score =
        std::min({r.tokens - kPerplexityContext, max_scored, n_ctx - kPerplexityContext});
    if (n_score <= 0) throw std::runtime_error("perplexity: nothing to score (check -n and --ctx)");

    // Scored in batches with the logits of every position; a batch's size bounds the memory
    // the all-positions logits take ([batch, n_vocab] floats).
    constexpr int64_t kBatch = 128;
    session_options so;
    so.n_ctx = kPerplexityContext + n_score;
    so.chunk_size = kBatch;
    so.all_logits = true;
    so.checkpoint_interval = 0;
    std::unique_ptr<Session> s;
    check(engine.create_session(so, &s));
    const int32_t* p = tokens.data();
    check(s->eval(std::span<const int32_t>(p, kPerplexityContext)));
    const int64_t end = kPerplexityContext + n_score;
    r.nll -= token_logprob_of(s->logits(), p[kPerplexityContext]);
    r.scored = 1;
    // Positions kPerplexityContext .. end - 2 are evaluated; row i of a batch starting at a
    // predicts the token at a + i + 1. The last scored token is never evaluated.
    for (int64_t a = kPerplexityContext; a < end - 1;) {
        if (interrupted()) throw std::runtime_error("perplexity: interrupted");
        const int64_t b = std::min(a + kBatch, end - 1);
        check(s->eval(std::span<const int32_t>(p + a, static_cast<size_t>(b - a))));
        for (int64_t i = 0; i < b - a; ++i) {
            r.nll -= token_logprob_of(s->logits_at(i), p[a + i + 1]);
            ++r.scored;
        }
        a = b;
    }
    return r;
}

std::string perplexity_line(const perplexity_result& r) {
    const double avg = r.scored > 0 ? r.nll / static_cast<double>(r.scored) : 0.0;
    return strfmt("tokens=%lld scored=%lld nll=%.6f avg_nll=%.6f ppl=%.6f",
                  static_cast<long long>(r.tokens), static_cast<long long>(r.scored), r.nll, avg,
                  std::exp(avg));
}

}  // namespace magnetar::cli
