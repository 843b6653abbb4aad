// The sampler (protocol §4.2): greedy, each filter alone and combined on hand-made logits,
// walk order, degenerate inputs, non-finite logits, a statistical check, reproducibility, and
// a full-size vocabulary against a slow reference written straight from the spec.
#include "magnetar/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "core/rng.h"

namespace magnetar {
namespace {

constexpr float k_nan = std::numeric_limits<float>::quiet_NaN();
constexpr float k_inf = std::numeric_limits<float>::infinity();

sampling_params make_params(float temperature, int32_t top_k, float top_p, float min_p,
                            uint64_t seed = 1) {
    sampling_params p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    return p;
}

// Logits whose tempered weights (T = 1) are proportional to `weights`.
std::vector<float> log_of(std::initializer_list<double> weights) {
    std::vector<float> out;
    for (const double w : weights) out.push_back(static_cast<float>(std::log(w)));
    return out;
}

// The weight the spec defines, computed as the sampler documents it (float exp).
float weight(const std::vector<float>& logits, int32_t id, float l_max, float t) {
    return std::exp((logits[static_cast<size_t>(id)] - l_max) / t);
}

// Replays the draw with an independent generator: r = U * sum(w over kept), walk `kept` in the
// given order subtracting w, first token where r <= 0, fallback the last.
int32_t replay_draw(sampling_rng& rng, const std::vector<float>& logits,
                    const std::vector<int32_t>& kept, float t) {
    float l_max = -k_inf;
    for (const float l : logits) {
        if (std::isfinite(l)) l_max = std::max(l_max, l);
    }
    double sum = 0.0;
    for (const int32_t id : kept) sum += weight(logits, id, l_max, t);
    double r = static_cast<double>(rng.next_float()) * sum;
    for (const int32_t id : kept) {
        r -= weight(logits, id, l_max, t);
        if (r <= 0.0) return id;
    }
    return kept.back();
}

// Checks that `params` on `logits` draws exactly what replaying the draw over `kept` (in walk
// order) gives, for many seeds. This pins the kept set, the walk order and the arithmetic.
void expect_kept(const std::vector<float>& logits, sampling_params params,
                 const std::vector<int32_t>& kept) {
    std::set<int32_t> seen;
    for (uint64_t seed = 1; seed <= 400; ++seed) {
        params.seed = seed;
        sampler s(params, logits.size());
        sampling_rng ref(seed);
        for (int i = 0; i < 4; ++i) {
            const int32_t got = s.sample(logits);
            const int32_t want = replay_draw(ref, logits, kept, params.temperature);
            ASSERT_EQ(got, want) << "seed " << seed << " draw " << i;
            seen.insert(got);
        }
    }
    EXPECT_EQ(seen, std::set<int32_t>(kept.begin(), kept.end()));
}

// ---------------------------------------------------------------------------------------------
// Greedy
// ---------------------------------------------------------------------------------------------

TEST(SamplerGreedy, FirstIndexOfTheMaximum) {
    const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
    EXPECT_EQ(sampler::argmax(logits), 1);
    for (const float t : {0.0f, -0.0f, -1.0f}) {
        sampler s(make_params(t, 0, 1.0f, 0.05f));
        EXPECT_EQ(s.sample(logits), 1);
    }
}

TEST(SamplerGreedy, ConsumesNoDraw) {
    sampler s(make_params(0.0f, 0, 1.0f, 0.05f, 77));
    const uint64_t before = s.rng().state();
    const std::vector<float> logits = {0.5f, 0.25f};
    for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(logits), 0);
    EXPECT_EQ(s.rng().state(), before);
}

TEST(SamplerGreedy, PerTokenOverrideUsesTheSameGenerator) {
    const std::vector<float> logits = log_of({1, 1, 1, 1});
    sampler s(make_params(1.0f, 0, 1.0f, 0.0f, 5));
    sampler t(make_params(1.0f, 0, 1.0f, 0.0f, 5));
    // Greedy tokens in between must not shift the stochastic sequence.
    for (int i = 0; i < 50; ++i) {
        EXPECT_EQ(s.sample(logits, make_params(0.0f, 0, 1.0f, 0.0f)), 0);
        EXPECT_EQ(s.sample(logits), t.sample(logits));
    }
}

TEST(SamplerGreedy, NonFiniteValues) {
    EXPECT_EQ(sampler::argmax(std::vector<float>{k_nan, 1.0f, 2.0f, k_nan}), 2);
    EXPECT_EQ(sampler::argmax(std::vector<float>{k_nan, -k_inf, -k_inf}), 1);
    EXPECT_EQ(sampler::argmax(std::vector<float>{1.0f, k_inf, k_nan}), 1);
    EXPECT_EQ(sampler::argmax(std::vector<float>{k_nan, k_nan}), 0);
}

// ---------------------------------------------------------------------------------------------
// Filters in isolation
// ---------------------------------------------------------------------------------------------

// w = [0.25, 1, 0.125, 0.5, 0.125]: ids out of rank order so the walk order is visible.
const std::vector<float> k_shuffled = log_of({2, 8, 1, 4, 1});

TEST(SamplerFilters, MinPFastPathWalksInVocabularyOrder) {
    // min_p 0.2 keeps w >= 0.2: ids 0, 1, 3, walked in id order.
    expect_kept(k_shuffled, make_params(1.0f, 0, 1.0f, 0.2f), {0, 1, 3});
    // min_p 0 keeps everything.
    expect_kept(k_shuffled, make_params(1.0f, 0, 1.0f, 0.0f), {0, 1, 2, 3, 4});
    // Negative min_p is treated as 0.
    expect_kept(k_shuffled, make_params(1.0f, 0, 1.0f, -3.0f), {0, 1, 2, 3, 4});
    // min_p 1 keeps only the top token.
    expect_kept(k_shuffled, make_params(1.0f, 0, 1.0f, 1.0f), {1});
}

TEST(SamplerFilters, TemperatureIsAppliedBeforeMinP) {
    const std::vector<float> logits = log_of({16, 4, 1});
    // T = 1: w = [1, 0.25, 0.0625], min_p 0.3 keeps only id 0.
    expect_kept(logits, make_params(1.0f, 0, 1.0f, 0.3f), {0});
    // T = 2: w = [1, 0.5, 0.25], the same min_p keeps ids 0 and 1.
    expect_kept(logits, make_params(2.0f, 0, 1.0f, 0.3f), {0, 1});
    // T = 4: w = [1, 0.707, 0.5].
    expect_kept(logits, make_params(4.0f, 0, 1.0f, 0.3f), {0, 1, 2});
}

TEST(SamplerFilters, TopKKeepsTheLargestWithLowerIdFirstOnTies) {
    const std::vector<float> logits = {1.0f, 5.0f, 3.0f, 5.0f, 2.0f};
    expect_kept(logits, make_params(1.0f, 2, 1.0f, 0.0f), {1, 3});
    expect_kept(logits, make_params(1.0f, 3, 1.0f, 0.0f), {1, 3, 2});
    // k = 1 with a tie: the lower id.
    expect_kept(logits, make_params(1.0f, 1, 1.0f, 0.0f), {1});
    // k beyond the vocabulary keeps it all, descending.
    expect_kept(logits, make_params(1.0f, 5000, 1.0f, 0.0f), {1, 3, 2, 4, 0});
}

TEST(SamplerFilters, TopKIsCappedAt1024) {
    const std::vector<float> logits(3000, 0.5f);  // all tied: the top 1024 are ids 0..1023
    sampler s(make_params(1.0f, 100000, 1.0f, 0.0f, 3), logits.size());
    int32_t max_id = 0;
    for (int i = 0; i < 2000; ++i) max_id = std::max(max_id, s.sample(logits));
    EXPECT_LE(max_id, 1023);
    EXPECT_GE(max_id, 1000);
}

TEST(SamplerFilters, TopPCutsAfterIncludingTheToken) {
    // Shares of P: id1 0.5, id3 0.25, id0 0.125, id2 0.0625, id4 0.0625; walked descending.
    expect_kept(k_shuffled, make_params(1.0f, 0, 0.7f, 0.0f), {1, 3});
    expect_kept(k_shuffled, make_params(1.0f, 0, 0.74f, 0.0f), {1, 3});
    expect_kept(k_shuffled, make_params(1.0f, 0, 0.45f, 0.0f), {1});
    expect_kept(k_shuffled, make_params(1.0f, 0, 0.8f, 0.0f), {1, 3, 0});
    // Equal logits: lower id first (the full-sort tie choice).
    expect_kept(log_of({4, 1, 4, 1}), make_params(1.0f, 0, 0.5f, 0.0f), {0, 2});
    expect_kept(log_of({4, 1, 4, 1}), make_params(1.0f, 0, 0.3f, 0.0f), {0});
}

TEST(SamplerFilters, TopPOutOfRangeMeansOff) {
    // top_p 0 and top_p > 1 become 1: the fast path (vocabulary order) with the min-p cut.
    expect_kept(k_shuffled, make_params(1.0f, 0, 0.0f, 0.2f), {0, 1, 3});
    expect_kept(k_shuffled, make_params(1.0f, 0, 1.5f, 0.2f), {0, 1, 3});
    expect_kept(k_shuffled, make_params(1.0f, 0, -0.5f, 0.2f), {0, 1, 3});
}

// ---------------------------------------------------------------------------------------------
// Filters combined
// ---------------------------------------------------------------------------------------------

TEST(SamplerFilters, TopPIsMeasuredOverTheTopKMass) {
    const std::vector<float> logits = log_of({8, 4, 2, 1, 1});
    // Over the full mass id 0 is 0.5 of P, so top_p 0.6 would also keep id 1; after top_k 2
    // id 0 is 2/3 of the truncated mass and is kept alone.
    expect_kept(logits, make_params(1.0f, 2, 0.6f, 0.0f), {0});
    expect_kept(logits, make_params(1.0f, 0, 0.6f, 0.0f), {0, 1});
}

TEST(SamplerFilters, MinPThenTopPOverTheUnprunedMass) {
    const std::vector<float> logits = log_of({8, 4, 2, 1, 1});  // w = 1, .5, .25, .125, .125
    // min_p 0.2 drops ids 3 and 4, but P still counts them (P = 2): cumulative shares are
    // 0.5, 0.75, 0.875, so top_p 0.8 keeps ids 0..2 (a P of the pruned mass would stop at 1).
    expect_kept(logits, make_params(1.0f, 0, 0.8f, 0.2f), {0, 1, 2});
    // top_p 0.95 would take more, min-p stops first.
    expect_kept(logits, make_params(1.0f, 0, 0.95f, 0.2f), {0, 1, 2});
    expect_kept(logits, make_params(1.0f, 0, 0.7f, 0.2f), {0, 1});
    // The same with top_k: min-p and top-p inside the top 4.
    expect_kept(logits, make_params(1.0f, 4, 0.95f, 0.2f), {0, 1, 2});
    expect_kept(logits, make_params(1.0f, 4, 0.99f, 0.1f), {0, 1, 2, 3});
}

TEST(SamplerFilters, TemperatureTopKMinPTopPTogether) {
    const std::vector<float> logits = log_of({1, 64, 16, 4, 32, 2});
    // T = 2: w by id = [1/8, 1, .5, .25, .707, .177]; top_k 4 -> ids 1, 4, 2, 3 (mass 2.457);
    // min_p 0.2 keeps all four; shares .407, .695, .898 -> top_p 0.85 keeps ids 1, 4, 2.
    expect_kept(logits, make_params(2.0f, 4, 0.85f, 0.2f), {1, 4, 2});
    // min_p 0.3 cuts id 3 (w .25) first.
    expect_kept(logits, make_params(2.0f, 4, 0.99f, 0.3f), {1, 4, 2});
}

// ---------------------------------------------------------------------------------------------
// Degenerate inputs and non-finite logits
// ---------------------------------------------------------------------------------------------

TEST(SamplerDegenerate, EmptyKeptSetReturnsTheBestTokenWithoutADraw) {
    // min_p > 1 on the fast path keeps nothing: the sum is zero, the best token is returned.
    sampler s(make_params(1.0f, 0, 1.0f, 1.5f, 9));
    const uint64_t before = s.rng().state();
    EXPECT_EQ(s.sample(k_shuffled), 1);
    EXPECT_EQ(s.rng().state(), before);
    // On the sorted path the top token is always kept.
    expect_kept(k_shuffled, make_params(1.0f, 0, 0.9f, 1.5f), {1});
    expect_kept(k_shuffled, make_params(1.0f, 3, 1.0f, 1.5f), {1});
}

TEST(SamplerDegenerate, NaNTemperatureReturnsTheBestToken) {
    for (const int32_t k : {0, 3}) {
        for (const float top_p : {1.0f, 0.9f}) {
            sampler s(make_params(k_nan, k, top_p, 0.05f));
            EXPECT_EQ(s.sample(k_shuffled), 1);
        }
    }
}

TEST(SamplerDegenerate, InfiniteTemperatureIsUniform) {
    expect_kept(k_shuffled, make_params(k_inf, 0, 1.0f, 0.05f), {0, 1, 2, 3, 4});
}

TEST(SamplerNonFinite, NonFiniteLogitsAreNeverSampled) {
    const std::vector<float> logits = {k_nan, 0.0f, -k_inf, 0.0f, k_inf, k_nan, -1.0f};
    // Best finite is 0.0 (id 1); id 6 has w = e^-1 = 0.37.
    expect_kept(logits, make_params(1.0f, 0, 1.0f, 0.05f), {1, 3, 6});
    expect_kept(logits, make_params(1.0f, 0, 1.0f, 0.5f), {1, 3});
    expect_kept(logits, make_params(1.0f, 2, 1.0f, 0.0f), {1, 3});
    expect_kept(logits, make_params(1.0f, 10, 1.0f, 0.0f), {1, 3, 6});
    expect_kept(logits, make_params(1.0f, 0, 0.99f, 0.0f), {1, 3, 6});
}

TEST(SamplerNonFinite, NoFiniteLogitFallsBackToArgmax) {
    for (const int32_t k : {0, 5}) {
        for (const float top_p : {1.0f, 0.5f}) {
            sampler s(make_params(1.0f, k, top_p, 0.05f, 11));
            const uint64_t before = s.rng().state();
            EXPECT_EQ(s.sample(std::vector<float>{k_nan, -k_inf, -k_inf}), 1);
            EXPECT_EQ(s.sample(std::vector<float>{-k_inf, k_nan, k_inf}), 2);
            EXPECT_EQ(s.sample(std::vector<float>{k_nan, k_nan}), 0);
            EXPECT_EQ(s.rng().state(), before);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics and reproducibility
// ---------------------------------------------------------------------------------------------

void expect_frequencies(const std::vector<float>& logits, const sampling_params& params,
                        const std::vector<double>& probs) {
    constexpr int n_draws = 200000;
    sampler s(params, logits.size());
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n_draws; ++i) ++counts[static_cast<size_t>(s.sample(logits))];
    for (size_t i = 0; i < probs.size(); ++i) {
        const double expected = n_draws * probs[i];
        const double sigma = std::sqrt(n_draws * probs[i] * (1.0 - probs[i]));
        if (probs[i] == 0.0) {
            EXPECT_EQ(counts[i], 0) << "token " << i;
        } else {
            EXPECT_NEAR(counts[i], expected, 4.0 * sigma) << "token " << i;
        }
    }
}

TEST(SamplerStatistics, FrequenciesMatchTheDistribution) {
    const std::vector<float> logits = log_of({0.4, 0.25, 0.2, 0.1, 0.05});
    // All kept (min_p 0), fast path.
    expect_frequencies(logits, make_params(1.0f, 0, 1.0f, 0.0f, 2024), {0.4, 0.25, 0.2, 0.1, 0.05});
    // Sorted path, the same distribution (top_k 5 keeps all).
    expect_frequencies(logits, make_params(1.0f, 5, 1.0f, 0.0f, 2025), {0.4, 0.25, 0.2, 0.1, 0.05});
    // min_p 0.3 relative to 0.4 drops ids 3 and 4 (w .25, .125): renormalised over .85.
    expect_frequencies(logits, make_params(1.0f, 0, 1.0f, 0.3f, 2026),
                       {0.4 / 0.85, 0.25 / 0.85, 0.2 / 0.85, 0.0, 0.0});
    // T = 0.5 squares the weights: .16, .0625, .04, .01, .0025 over .275.
    expect_frequencies(logits, make_params(0.5f, 0, 1.0f, 0.0f, 2027),
                       {0.16 / 0.275, 0.0625 / 0.275, 0.04 / 0.275, 0.01 / 0.275, 0.0025 / 0.275});
}

TEST(SamplerReproducibility, SameSeedSameSequence) {
    Rng gen(17);
    std::vector<float> logits(1000);
    for (float& l : logits) l = 2.0f * gen.normal();
    for (const auto& p :
         {make_params(1.0f, 0, 1.0f, 0.05f, 99), make_params(0.8f, 40, 0.9f, 0.05f, 99),
          make_params(1.2f, 0, 0.95f, 0.0f, 99)}) {
        sampler a(p);
        sampler b(p);
        sampling_params other = p;
        other.seed = 100;
        sampler c(other);
        int differences = 0;
        for (int i = 0; i < 500; ++i) {
            const int32_t x = a.sample(logits);
            ASSERT_EQ(x, b.sample(logits));
            differences += x != c.sample(logits) ? 1 : 0;
        }
        EXPECT_GT(differences, 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Full-size vocabulary against a slow reference
// ---------------------------------------------------------------------------------------------

// Protocol §4.2 written out literally: stable sorts over every candidate, the min-p test with
// the divisions as written, P summed in vocabulary order (the order the sampler documents).
int32_t reference_sample(const std::vector<float>& logits, const sampling_params& p,
                         sampling_rng& rng) {
    if (p.temperature <= 0.0f) return sampler::argmax(logits);
    const float top_p = (p.top_p <= 0.0f || p.top_p > 1.0f) ? 1.0f : p.top_p;
    const float min_p = p.min_p < 0.0f ? 0.0f : p.min_p;
    const float t = p.temperature;
    std::vector<int32_t> cand;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (std::isfinite(logits[i])) cand.push_back(static_cast<int32_t>(i));
    }
    if (cand.empty()) return sampler::argmax(logits);
    auto desc = [&](int32_t a, int32_t b) {
        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
    };
    double total = 0.0;  // P in vocabulary order, before any truncation
    if (p.top_k > 0) {
        const size_t k = std::min({static_cast<size_t>(p.top_k), size_t{1024}, logits.size()});
        std::stable_sort(cand.begin(), cand.end(), desc);
        if (cand.size() > k) cand.resize(k);
    }
    float l_max = -k_inf;
    for (const int32_t id : cand) l_max = std::max(l_max, logits[static_cast<size_t>(id)]);
    auto w = [&](int32_t id) { return std::exp((logits[static_cast<size_t>(id)] - l_max) / t); };

    std::vector<int32_t> kept;
    if (p.top_k <= 0 && top_p == 1.0f) {
        for (const int32_t id : cand) {
            if (w(id) >= min_p) kept.push_back(id);
        }
    } else {
        if (p.top_k > 0) {
            for (const int32_t id : cand) total += w(id);
        } else {
            for (const int32_t id : cand) total += w(id);
            std::stable_sort(cand.begin(), cand.end(), desc);
        }
        double kept_sum = 0.0;
        for (size_t i = 0; i < cand.size(); ++i) {
            const double wc = w(cand[i]);
            const double w0 = w(cand[0]);
            if (i > 0 && wc / total < (w0 / total) * static_cast<double>(min_p)) break;
            kept.push_back(cand[i]);
            kept_sum += wc;
            if (kept_sum / total >= top_p) break;
        }
    }
    if (kept.empty()) return cand[0];
    return replay_draw(rng, logits, kept, t);
}

TEST(SamplerLargeVocab, MatchesTheReferenceOn129280Tokens) {
    constexpr size_t n_vocab = 129280;
    Rng gen(4242);
    std::vector<float> logits(n_vocab);  // [n_vocab]
    for (float& l : logits) l = 3.0f * gen.normal();
    logits[5] = k_nan;
    logits[77] = -k_inf;
    logits[n_vocab - 1] = logits[123];  // a tie among the largest is unlikely; make one anyway

    const std::vector<sampling_params> cases = {
        make_params(1.0f, 0, 1.0f, 0.05f),     // defaults: fast path
        make_params(1.0f, 0, 1.0f, 0.0f),      // fast path, nothing pruned
        make_params(0.7f, 40, 1.0f, 0.05f),    // top-k
        make_params(1.0f, 0, 0.9f, 0.05f),     // full sort after min-p pruning
        make_params(1.3f, 0, 0.95f, 0.0f),     // full sort of everything
        make_params(1.0f, 5000, 0.8f, 0.01f),  // top-k capped at 1024
    };
    for (size_t c = 0; c < cases.size(); ++c) {
        for (uint64_t seed = 1; seed <= 4; ++seed) {
            sampling_params p = cases[c];
            p.seed = seed;
            sampler s(p, n_vocab);
            sampling_rng ref(seed);
            for (int i = 0; i < 2; ++i) {
                const int32_t got = s.sample(logits);
                ASSERT_GE(got, 0);
                ASSERT_LT(static_cast<size_t>(got), n_vocab);
                ASSERT_EQ(got, reference_sample(logits, p, ref))
                    << "case " << c << " seed " << seed << " draw " << i;
            }
        }
    }
}

TEST(SamplerLargeVocab, MatchesTheReferenceWithManyTies) {
    // Logits on a coarse grid: long runs of equal values, so the tie order and the growing
    // sorted prefix (256, then 2048, ...) are both exercised.
    constexpr size_t n_vocab = 6000;
    Rng gen(99);
    std::vector<float> logits(n_vocab);  // [n_vocab]
    for (float& l : logits) l = std::round(4.0f * gen.normal()) * 0.5f;
    const std::vector<sampling_params> cases = {
        make_params(1.0f, 0, 0.5f, 0.0f),    make_params(1.0f, 0, 0.99f, 0.0f),
        make_params(3.0f, 0, 0.999f, 0.0f),  make_params(2.0f, 0, 0.9f, 0.01f),
        make_params(1.0f, 700, 0.97f, 0.0f), make_params(1.0f, 0, 1.0f, 0.01f),
    };
    for (size_t c = 0; c < cases.size(); ++c) {
        for (uint64_t seed = 1; seed <= 20; ++seed) {
            sampling_params p = cases[c];
            p.seed = seed;
            sampler s(p, n_vocab);
            sampling_rng ref(seed);
            for (int i = 0; i < 3; ++i) {
                ASSERT_EQ(s.sample(logits), reference_sample(logits, p, ref))
                    << "case " << c << " seed " << seed << " draw " << i;
            }
        }
    }
}

TEST(SamplerLargeVocab, TopKDrawsStayInTheTopK) {
    constexpr size_t n_vocab = 129280;
    Rng gen(7);
    std::vector<float> logits(n_vocab);  // [n_vocab]
    for (float& l : logits) l = gen.normal();
    std::vector<int32_t> order(n_vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
    });
    const std::set<int32_t> top(order.begin(), order.begin() + 40);
    sampler s(make_params(5.0f, 40, 1.0f, 0.0f, 8), n_vocab);
    std::set<int32_t> seen;
    for (int i = 0; i < 300; ++i) {
        const int32_t id = s.sample(logits);
        ASSERT_TRUE(top.count(id)) << id;
        seen.insert(id);
    }
    EXPECT_GE(seen.size(), 30u);  // T = 5 flattens the 40: most of them appear
}

}  // namespace
}  // namespace magnetar
