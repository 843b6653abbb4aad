// Token sampling: repetition penalties, greedy, temperature, top-k, min-p, top-p, and
// log-probabilities.
//
// Owns: the sampling parameters, the xorshift64* generator and its seeding, the sampler (one
// draw per non-greedy token, the history of the tokens it was told were taken, reusable scratch
// so the decode loop does not allocate), and the log-probability functions. Does not own:
// per-front-end defaults and request parsing (the front ends fill sampling_params), or the DSML
// greedy-on-syntax decision (the caller passes temperature 0 for those tokens). The algorithm
// follows protocol §4; docs/sampling.md says where this file had to choose (tie order, precision,
// degenerate inputs).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace magnetar {

// Defaults are those of the HTTP server and the CLI (protocol §4.1).
struct sampling_params {
    float temperature = 1.0f;  // <= 0: greedy
    int32_t top_k = 0;         // <= 0: off; otherwise capped at 1024 and the vocabulary
    float top_p = 1.0f;        // outside (0, 1]: treated as 1 (off)
    float min_p = 0.05f;       // relative to the top token; < 0 treated as 0
    uint64_t seed = 0;         // 0: derive a fresh, non-reproducible seed (derive_seed)
    // Repetition penalties over the sampler's history (sampler::accept), applied to the logits
    // before every other step (greedy included). For a token seen c > 0 times in the window:
    // repeat: a positive logit is divided by it, a negative one multiplied (llama.cpp's rule);
    // then logit -= c * frequency_penalty + presence_penalty (OpenAI's rule).
    float repeat_penalty = 1.0f;     // 1: off; > 1 discourages repeats, < 1 favours them
    float presence_penalty = 0.0f;   // 0: off
    float frequency_penalty = 0.0f;  // 0: off
    int32_t penalty_last_n = 64;     // the window: the last N taken tokens; -1: all; 0: none
};

// Whether `p` changes any logit through the penalties (a value off, or an empty window: no).
bool has_penalties(const sampling_params& p);

// The largest top_k honoured; larger values are capped.
inline constexpr int32_t k_sampling_max_top_k = 1024;

// xorshift64* (protocol §4.3). Deterministic: a seed gives the same sequence everywhere.
class sampling_rng {
  public:
    static constexpr uint64_t k_zero_state = 0x9E3779B97F4A7C15ull;  // replaces a zero seed
    static constexpr uint64_t k_multiplier = 0x2545F4914F6CDD1Dull;

    explicit sampling_rng(uint64_t seed = 0) { reseed(seed); }

    void reseed(uint64_t seed) { state_ = seed != 0 ? seed : k_zero_state; }
    uint64_t state() const { return state_; }

    uint64_t next_u64() {
        uint64_t x = state_;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state_ = x;
        return x * k_multiplier;
    }

    // Uniform in [0, 1) from the top 24 bits of the output: exact in float.
    float next_float() { return static_cast<float>((next_u64() >> 40) & 0xFFFFFFu) / 16777216.0f; }

  private:
    uint64_t state_;
};

// A fresh seed from wall-clock time, a sequence number and address entropy:
// (time << 32) ^ (sequence << 1) ^ address bits. NOT reproducible: use it only when the user
// gave no seed. Never returns 0.
uint64_t derive_seed(uint64_t sequence);

class sampler {
  public:
    // A zero params.seed is replaced by derive_seed(); seed() reports the seed in use so a
    // front end can echo it back for reproduction. n_vocab (optional) reserves the scratch up
    // front; otherwise the first call does.
    explicit sampler(const sampling_params& params = {}, size_t n_vocab = 0);

    // Samples one token from raw logits [n_vocab] with the stored parameters. Consumes one
    // RNG draw when a weighted choice is made (never for greedy or degenerate inputs).
    int32_t sample(std::span<const float> logits);
    // Same, with per-token parameters (e.g. temperature 0 and no penalties on DSML syntax);
    // params.seed is ignored, the sampler's generator is used; the penalty window is that of
    // the constructor's parameters.
    int32_t sample(std::span<const float> logits, const sampling_params& params);

    // Records a token as taken (generated): the penalties see it from the next sample on.
    // Front ends accept every token they generate, in order, whoever chose it.
    void accept(int32_t id);
    // Forgets the history (a new reply).
    void clear_history();
    const std::vector<int32_t>& history() const { return history_; }
    // Whether sample(logits, params) would change logits through the penalties now.
    bool penalizes(const sampling_params& params) const;

    // First index of the maximum, NaN ignored (+inf counts as a maximum); 0 when every value
    // is NaN. logits must not be empty.
    static int32_t argmax(std::span<const float> logits);

    const sampling_params& params() const { return params_; }
    uint64_t seed() const { return seed_; }
    sampling_rng& rng() { return rng_; }

  private:
    struct candidate {
        int32_t id;
        float logit;
        float w;  // exp((logit - l_max) / T)
    };

    int32_t sample_all_min_p(std::span<const float> logits, float t, float min_p, float l_max,
                             int32_t best);
    int32_t sample_sorted(std::span<const float> logits, float t, int32_t k, float top_p,
                          float min_p, float l_max, int32_t best);
    int32_t draw_from(std::span<const candidate> kept, double kept_sum, int32_t best);
    int32_t sample_plain(std::span<const float> logits, const sampling_params& params);
    // Writes the penalised logits into penalized_ and returns them.
    std::span<const float> penalize(std::span<const float> logits, const sampling_params& params);

    sampling_params params_;
    uint64_t seed_;
    sampling_rng rng_;
    std::vector<candidate> scratch_;  // [<= n_vocab], reused across calls
    std::vector<int32_t> history_;    // accepted tokens, in order
    std::vector<int32_t> counts_;     // [n_vocab] occurrences in the window (grown on demand)
    std::vector<float> penalized_;    // [n_vocab] the logits after the penalties
};

// ---------------------------------------------------------------------------------------------
// Log-probabilities (protocol §4.4): from raw logits (no temperature), in double.
// ---------------------------------------------------------------------------------------------

struct token_logprob {
    int32_t id;
    float logit;
    double logprob;
};

// log(sum(exp(l))) over the finite logits; -inf when none is finite.
double logsumexp(std::span<const float> logits);

// logits[id] - logsumexp(logits); -inf when logits[id] is not finite.
double token_logprob_of(std::span<const float> logits, int32_t id);

// The k largest finite logits with their log-probabilities, in descending order (ties: lower
// id first). out is cleared first; fewer than k entries when fewer are finite; k <= 0 gives
// an empty list.
void top_logprobs(std::span<const float> logits, int k, std::vector<token_logprob>& out);

}  // namespace magnetar
