// Quality scoring of `magnetar score`: a reference model's next-token distributions saved over
// a token stream, and another model's divergence from them (llama.cpp's --kl-divergence, ds4's
// quality testing). The formats and the statistics are documented in docs/quality.md.
//
// The reference keeps, per scored position, its top-K tokens with their log-probabilities and
// the log of the remaining mass, so a file stays small for a 129,280-token vocabulary. The
// divergence is computed over those K + 1 bins: exact when the reference puts all its mass on
// its top K, otherwise a lower bound of the full KL divergence (merging outcomes never
// increases it).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace magnetar::cli {

// One reference position: its top-K ids (descending probability), their log-probabilities,
// log(1 - sum of their probabilities) (-inf when nothing remains), and the log-probability of
// the token that actually follows.
struct ref_position {
    std::vector<int32_t> ids;
    std::vector<float> logp;
    float rest = 0;
    float target = 0;
};

// A chunk of the token stream: `tokens` (n_ctx ids) evaluated from position 0; positions
// 0 .. n_ctx - 2 are scored (each predicts the next token). `greedy` is the reference's greedy
// continuation of the chunk's first greedy_prompt tokens.
struct ref_chunk {
    std::vector<int32_t> tokens;
    std::vector<ref_position> positions;
    std::vector<int32_t> greedy;
};

struct ref_file {
    uint32_t n_vocab = 0;
    uint32_t top_k = 0;
    uint32_t n_ctx = 0;
    uint32_t greedy_prompt = 0;
    uint32_t greedy_tokens = 0;
    std::string model;  // file name of the reference model (informational)
    std::vector<ref_chunk> chunks;
};

// Throws magnetar::Error naming the file on any I/O problem; read_ref also on a bad magic,
// version, size or an id outside [0, n_vocab).
void write_ref(const std::string& path, const ref_file& r);
ref_file read_ref(const std::string& path);

// The reference summary of one position's logits.
ref_position summarise(std::span<const float> logits, uint32_t top_k, int32_t target);

// What the scored model gives at one reference position.
struct position_score {
    double kld = 0;     // over the reference's K + 1 bins
    double nll = 0;     // -log p(target)
    bool top1 = false;  // same most likely token as the reference
};

position_score score_position(const ref_position& ref, std::span<const float> logits,
                              int32_t target);

// Log-probability of one id under logits (a full log-softmax, in double).
double token_logprob(std::span<const float> logits, int32_t id);

// The first maximum.
int32_t argmax_of(std::span<const float> logits);

// Summary statistics of a sample.
struct distribution {
    double mean = 0, median = 0, p99 = 0, max = 0;
};
distribution describe(std::vector<double> values);

// Longest common prefix of two id sequences.
size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b);

}  // namespace magnetar::cli
