// Repetition penalties (repeat, presence, frequency over a window of accepted tokens): each rule
// on hand-made logits, the window edges, greedy, and draws against an unpenalised sampler fed
// logits penalised by a reference written straight from the rule.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "core/rng.h"
#include "magnetar/sampler.h"

namespace magnetar {
namespace {

// The rule, from the window's counts alone.
std::vector<float> reference(std::vector<float> logits, const std::vector<int32_t>& history,
                             const sampling_params& p) {
    if (p.penalty_last_n == 0) return logits;
    const size_t n = history.size();
    const size_t first = p.penalty_last_n < 0 || static_cast<size_t>(p.penalty_last_n) >= n
                             ? 0
                             : n - static_cast<size_t>(p.penalty_last_n);
    std::map<int32_t, int> counts;
    for (size_t i = first; i < n; ++i) ++counts[history[i]];
    for (const auto& [id, c] : counts) {
        float& l = logits[static_cast<size_t>(id)];
        if (p.repeat_penalty != 1.0f) l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
        l -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
    }
    return logits;
}

sampling_params greedy() {
    sampling_params p;
    p.temperature = 0.0f;
    return p;
}

TEST(SamplerPenalties, OffByDefault) {
    const sampling_params p;
    EXPECT_FALSE(has_penalties(p));
    sampler s(greedy());
    s.accept(0);
    s.accept(0);
    EXPECT_FALSE(s.penalizes(s.params()));
    EXPECT_EQ(s.sample(std::vector<float>{3.0f, 1.0f}), 0);
}

TEST(SamplerPenalties, RepeatDividesPositiveAndMultipliesNegativeLogits) {
    sampling_params p = greedy();
    p.repeat_penalty = 2.0f;
    sampler s(p);
    // 0 seen: 3 -> 1.5 < 2 (token 1 wins); then 1 seen too: 2 -> 1 < 1.5.
    const std::vector<float> logits{3.0f, 2.0f, -1.0f};
    EXPECT_EQ(s.sample(logits), 0);
    s.accept(0);
    EXPECT_EQ(s.sample(logits), 1);
    s.accept(1);
    EXPECT_EQ(s.sample(logits), 0);
    // A negative logit goes further down: -1 seen becomes -2, below an unseen -1.5.
    sampler n(p);
    n.accept(0);
    EXPECT_EQ(n.sample(std::vector<float>{-1.0f, -1.5f}), 1);
}

TEST(SamplerPenalties, FrequencyCountsOccurrencesPresenceCountsOnce) {
    sampling_params f = greedy();
    f.frequency_penalty = 0.6f;
    sampling_params pr = greedy();
    pr.presence_penalty = 0.6f;
    sampler sf(f);
    sampler sp(pr);
    for (sampler* s : {&sf, &sp}) {
        s->accept(0);
        s->accept(0);
    }
    // 0 seen twice: frequency 5 - 1.2 = 3.8 < 4; presence 5 - 0.6 = 4.4 > 4.
    const std::vector<float> logits{5.0f, 4.0f};
    EXPECT_EQ(sf.sample(logits), 1);
    EXPECT_EQ(sp.sample(logits), 0);
}

TEST(SamplerPenalties, NegativeValuesFavourRepeats) {
    sampling_params p = greedy();
    p.presence_penalty = -1.0f;
    sampler s(p);
    s.accept(1);
    EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.5f}), 1);
}

TEST(SamplerPenalties, WindowKeepsTheLastNTokens) {
    sampling_params p = greedy();
    p.presence_penalty = 10.0f;
    p.penalty_last_n = 2;
    sampler s(p);
    const std::vector<float> logits{3.0f, 2.0f, 1.0f, 0.0f};
    s.accept(0);
    s.accept(1);
    EXPECT_EQ(s.sample(logits), 2);  // 0 and 1 in the window
    s.accept(2);
    EXPECT_EQ(s.sample(logits), 0);  // 0 left it
    s.accept(0);
    s.accept(0);
    EXPECT_EQ(s.sample(logits), 1);  // window {0, 0}

    sampling_params all = p;
    all.penalty_last_n = -1;
    sampler a(all);
    for (int32_t id : {0, 1, 2}) a.accept(id);
    EXPECT_EQ(a.sample(logits), 3);

    sampling_params none = p;
    none.penalty_last_n = 0;
    sampler z(none);
    z.accept(0);
    EXPECT_FALSE(has_penalties(none));
    EXPECT_EQ(z.sample(logits), 0);
}

TEST(SamplerPenalties, PerTokenParametersCanTurnThemOff) {
    sampling_params p = greedy();
    p.repeat_penalty = 100.0f;
    sampler s(p);
    s.accept(0);
    const std::vector<float> logits{3.0f, 2.0f};
    EXPECT_EQ(s.sample(logits), 1);
    sampling_params off = p;
    off.repeat_penalty = 1.0f;
    EXPECT_EQ(s.sample(logits, off), 0);
    s.clear_history();
    EXPECT_TRUE(s.history().empty());
    EXPECT_EQ(s.sample(logits), 0);
}

TEST(SamplerPenalties, IdsOutsideTheRowAreIgnored) {
    sampling_params p = greedy();
    p.presence_penalty = 5.0f;
    sampler s(p);
    s.accept(7);
    EXPECT_EQ(s.sample(std::vector<float>{1.0f, 0.0f}), 0);
}

TEST(SamplerPenalties, DrawsMatchAnUnpenalisedSamplerOnReferenceLogits) {
    Rng g(7);
    const size_t n_vocab = 4096;
    for (int trial = 0; trial < 40; ++trial) {
        std::vector<float> logits(n_vocab);
        for (float& l : logits) l = g.normal() * 2.0f;
        sampling_params p;
        p.seed = 1000 + static_cast<uint64_t>(trial);
        p.temperature = 0.8f;
        p.top_k = trial % 3 == 0 ? 40 : 0;
        p.top_p = trial % 2 == 0 ? 0.9f : 1.0f;
        p.repeat_penalty = 1.3f;
        p.presence_penalty = 0.4f;
        p.frequency_penalty = 0.25f;
        p.penalty_last_n = trial % 4 == 0 ? -1 : 16 + trial;
        sampler pen(p, n_vocab);
        sampling_params plain_p = p;
        plain_p.repeat_penalty = 1.0f;
        plain_p.presence_penalty = plain_p.frequency_penalty = 0.0f;
        sampler plain(plain_p, n_vocab);
        // History: the sampler's own draws, with repeats of a few ids mixed in.
        for (int step = 0; step < 200; ++step) {
            const int32_t a = pen.sample(logits);
            const std::vector<float> ref = reference(logits, pen.history(), p);
            const int32_t b = plain.sample(ref);
            ASSERT_EQ(a, b) << "trial " << trial << " step " << step;
            pen.accept(step % 5 == 0 ? static_cast<int32_t>(g.below(8)) : a);
        }
    }
}

}  // namespace
}  // namespace magnetar
