// Log-probabilities (protocol §4.4) against a long double computation written here, top-k
// ordering and ties, non-finite logits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "magnetar/sampler.h"

namespace magnetar {
namespace {

constexpr float k_nan = std::numeric_limits<float>::quiet_NaN();
constexpr float k_inf = std::numeric_limits<float>::infinity();

long double naive_logsumexp(const std::vector<float>& logits) {
    long double sum = 0.0L;
    for (const float l : logits) {
        if (std::isfinite(l)) sum += std::exp(static_cast<long double>(l));
    }
    return std::log(sum);
}

TEST(Logprobs, LogsumexpMatchesANaiveSum) {
    const std::vector<float> small = {0.0f, 1.0f, 2.0f, -3.5f};
    EXPECT_NEAR(logsumexp(small), static_cast<double>(naive_logsumexp(small)), 1e-14);

    Rng gen(3);
    std::vector<float> big(129280);  // [n_vocab]
    for (float& l : big) l = 4.0f * gen.normal();
    EXPECT_NEAR(logsumexp(big), static_cast<double>(naive_logsumexp(big)), 1e-11);
}

TEST(Logprobs, LogsumexpIsStableForLargeLogits) {
    // exp(1000) overflows a double; the max-shifted form does not.
    const std::vector<float> logits = {1000.0f, 1000.0f};
    EXPECT_NEAR(logsumexp(logits), 1000.0 + std::log(2.0), 1e-12);
}

TEST(Logprobs, NonFiniteLogitsAreIgnored) {
    const std::vector<float> with = {k_nan, 1.0f, -k_inf, 2.0f, k_inf};
    const std::vector<float> without = {1.0f, 2.0f};
    EXPECT_EQ(logsumexp(with), logsumexp(without));
    EXPECT_EQ(token_logprob_of(with, 0), -std::numeric_limits<double>::infinity());
    EXPECT_EQ(token_logprob_of(with, 4), -std::numeric_limits<double>::infinity());
    EXPECT_NEAR(token_logprob_of(with, 3), 2.0 - std::log(std::exp(1.0) + std::exp(2.0)), 1e-14);

    const std::vector<float> none = {k_nan, -k_inf};
    EXPECT_EQ(logsumexp(none), -std::numeric_limits<double>::infinity());
    std::vector<token_logprob> out = {{1, 1.0f, 0.0}};
    top_logprobs(none, 3, out);
    EXPECT_TRUE(out.empty());
}

TEST(Logprobs, UseRawLogitsAndSumToOne) {
    const std::vector<float> logits = {0.5f, -1.0f, 2.25f, 0.0f};
    long double total = 0.0L;
    for (int32_t id = 0; id < 4; ++id) {
        const double lp = token_logprob_of(logits, id);
        EXPECT_NEAR(lp,
                    logits[static_cast<size_t>(id)] - static_cast<double>(naive_logsumexp(logits)),
                    1e-14);
        total += std::exp(static_cast<long double>(lp));
    }
    EXPECT_NEAR(static_cast<double>(total), 1.0, 1e-14);
}

TEST(Logprobs, TopKDescendingWithLowerIdFirstOnTies) {
    const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f, k_nan, 4.0f};
    std::vector<token_logprob> out;
    top_logprobs(logits, 4, out);
    ASSERT_EQ(out.size(), 4u);
    const int32_t want[] = {6, 1, 2, 4};
    const double lse = logsumexp(logits);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(out[i].id, want[i]);
        EXPECT_EQ(out[i].logit, logits[static_cast<size_t>(want[i])]);
        EXPECT_EQ(out[i].logprob, static_cast<double>(out[i].logit) - lse);
    }

    // More than the finite count: all finite ones, NaN left out.
    top_logprobs(logits, 100, out);
    ASSERT_EQ(out.size(), 6u);
    const int32_t all[] = {6, 1, 2, 4, 3, 0};
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(out[i].id, all[i]);

    top_logprobs(logits, 0, out);
    EXPECT_TRUE(out.empty());
    top_logprobs(logits, -2, out);
    EXPECT_TRUE(out.empty());
}

TEST(Logprobs, TopKOnAFullVocabulary) {
    Rng gen(11);
    std::vector<float> logits(129280);  // [n_vocab]
    for (float& l : logits) l = 2.0f * gen.normal();
    std::vector<token_logprob> out;
    top_logprobs(logits, 20, out);
    ASSERT_EQ(out.size(), 20u);
    for (size_t i = 1; i < out.size(); ++i) {
        EXPECT_TRUE(out[i - 1].logit > out[i].logit ||
                    (out[i - 1].logit == out[i].logit && out[i - 1].id < out[i].id));
    }
    // Nothing outside the list beats its last entry.
    size_t better = 0;
    for (const float l : logits) better += l > out.back().logit ? 1 : 0;
    EXPECT_EQ(better, 19u);
    EXPECT_EQ(out[0].id, sampler::argmax(logits));
    EXPECT_LT(out[0].logprob, 0.0);
}

}  // namespace
}  // namespace magnetar
