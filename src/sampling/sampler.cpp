// The sampler (protocol §4.2) and seed derivation (§4.3).
//
// Precision: weights w = exp((l - l_max) / T) are float; the sums (P, the kept mass, the draw
// r) are double. The min-p test compares w against min_p directly: w_0 = exp(0) = 1 exactly,
// so "w_c / P < (w_0 / P) * min_p" of the spec is the same test without the division noise.
#include "magnetar/sampler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <ctime>
#include <limits>

#include "core/error.h"

namespace magnetar {

namespace {

// Descending logit, ties lower id first: the one candidate order used everywhere.
bool ranks_before(float la, int32_t ia, float lb, int32_t ib) {
    return la > lb || (la == lb && ia < ib);
}

std::atomic<uint64_t> g_seed_sequence{0};

}  // namespace

uint64_t derive_seed(uint64_t sequence) {
    static const int anchor = 0;  // its address carries the per-process ASLR offset
    const auto wall = static_cast<uint64_t>(std::time(nullptr));
    const auto ticks =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const auto address = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&anchor));
    const uint64_t seed =
        (wall << 32) ^ (sequence << 1) ^ address ^ (ticks * 0x9E3779B97F4A7C15ull);
    return seed != 0 ? seed : sampling_rng::k_zero_state;
}

sampler::sampler(const sampling_params& params, size_t n_vocab)
    : params_(params),
      seed_(params.seed != 0 ? params.seed : derive_seed(g_seed_sequence.fetch_add(1))),
      rng_(seed_) {
    scratch_.reserve(n_vocab);
}

int32_t sampler::argmax(std::span<const float> logits) {
    MAGNETAR_ASSERT(!logits.empty(), "argmax of an empty logit vector");
    size_t best = 0;
    while (best < logits.size() && std::isnan(logits[best])) ++best;
    if (best == logits.size()) return 0;  // every value NaN
    float m = logits[best];
    for (size_t i = best + 1; i < logits.size(); ++i) {
        if (logits[i] > m) {  // false for NaN
            m = logits[i];
            best = i;
        }
    }
    return static_cast<int32_t>(best);
}

int32_t sampler::sample(std::span<const float> logits) {
    return sample(logits, params_);
}

bool has_penalties(const sampling_params& p) {
    // NaN compares unequal: treated as on, and penalize() leaves such a value's effect to IEEE.
    return p.penalty_last_n != 0 &&
           (p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f);
}

bool sampler::penalizes(const sampling_params& params) const {
    return !history_.empty() && params_.penalty_last_n != 0 && has_penalties(params);
}

void sampler::accept(int32_t id) {
    MAGNETAR_ASSERT(id >= 0, "accept: negative token id");
    history_.push_back(id);
    const int32_t n = params_.penalty_last_n;
    if (n == 0) return;
    if (static_cast<size_t>(id) >= counts_.size()) counts_.resize(static_cast<size_t>(id) + 1, 0);
    ++counts_[static_cast<size_t>(id)];
    if (n > 0 && history_.size() > static_cast<size_t>(n)) {
        --counts_[static_cast<size_t>(history_[history_.size() - 1 - static_cast<size_t>(n)])];
    }
}

void sampler::clear_history() {
    history_.clear();
    std::fill(counts_.begin(), counts_.end(), 0);
}

std::span<const float> sampler::penalize(std::span<const float> logits,
                                         const sampling_params& params) {
    penalized_.assign(logits.begin(), logits.end());
    const int32_t n = params_.penalty_last_n;
    const size_t size = history_.size();
    const size_t first =
        n < 0 || static_cast<size_t>(n) >= size ? 0 : size - static_cast<size_t>(n);
    const float rp = params.repeat_penalty;
    // Each distinct token once: its count is negated while applied, then restored.
    for (size_t i = first; i < size; ++i) {
        const auto id = static_cast<size_t>(history_[i]);
        const int32_t c = counts_[id];
        if (c <= 0) continue;
        counts_[id] = -c;
        if (id >= penalized_.size()) continue;
        float& l = penalized_[id];
        if (rp != 1.0f) l = l > 0.0f ? l / rp : l * rp;
        l -= static_cast<float>(c) * params.frequency_penalty + params.presence_penalty;
    }
    for (size_t i = first; i < size; ++i) {
        int32_t& c = counts_[static_cast<size_t>(history_[i])];
        if (c < 0) c = -c;
    }
    return penalized_;
}

int32_t sampler::sample(std::span<const float> logits, const sampling_params& params) {
    MAGNETAR_ASSERT(!logits.empty(), "sampling from an empty logit vector");
    if (penalizes(params)) return sample_plain(penalize(logits, params), params);
    return sample_plain(logits, params);
}

int32_t sampler::sample_plain(std::span<const float> logits, const sampling_params& params) {
    MAGNETAR_ASSERT(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                    "vocabulary larger than the token id range");
    const float t = params.temperature;
    if (t <= 0.0f) return argmax(logits);
    const float top_p = (params.top_p > 0.0f && params.top_p <= 1.0f) ? params.top_p : 1.0f;
    const float min_p = params.min_p >= 0.0f ? params.min_p : 0.0f;  // NaN -> 0 too
    const int32_t top_k = std::max(params.top_k, 0);

    // The best finite token: w = 1 there, and the answer for every degenerate case below.
    constexpr float inf = std::numeric_limits<float>::infinity();
    int32_t best = -1;
    float l_max = -inf;
    for (size_t i = 0; i < logits.size(); ++i) {
        const float l = logits[i];
        if (l > l_max && l < inf) {  // first finite maximum: NaN and -inf fail l > l_max
            best = static_cast<int32_t>(i);
            l_max = l;
        }
    }
    if (best < 0) return argmax(logits);

    if (top_k == 0 && top_p == 1.0f) return sample_all_min_p(logits, t, min_p, l_max, best);
    const int32_t k = std::min({top_k, k_sampling_max_top_k, static_cast<int32_t>(logits.size())});
    return sample_sorted(logits, t, k, top_p, min_p, l_max, best);
}

// Fast path (top_k off, top_p 1): keep w >= min_p, walk in vocabulary order. No sort.
int32_t sampler::sample_all_min_p(std::span<const float> logits, float t, float min_p, float l_max,
                                  int32_t best) {
    // Logits below l_skip have w < min_p / e, so they need no exp(). The margin of a factor e
    // absorbs every rounding in this bound (computed in double); -inf when min_p is 0.
    const double l_skip = static_cast<double>(l_max) +
                          static_cast<double>(t) * (std::log(static_cast<double>(min_p)) - 1.0);
    scratch_.clear();
    double kept_sum = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
        const float l = logits[i];
        if (!std::isfinite(l) || static_cast<double>(l) < l_skip) continue;
        const float w = std::exp((l - l_max) / t);
        if (w >= min_p) {
            scratch_.push_back({static_cast<int32_t>(i), l, w});
            kept_sum += w;
        }
    }
    return draw_from(scratch_, kept_sum, best);
}

// Sorted path: the top-k candidates (k > 0) or every finite logit (k == 0), in descending
// order; cut by min-p, then by top-p after including the token; walk in descending order.
int32_t sampler::sample_sorted(std::span<const float> logits, float t, int32_t k, float top_p,
                               float min_p, float l_max, int32_t best) {
    auto order = [](const candidate& a, const candidate& b) {
        return ranks_before(a.logit, a.id, b.logit, b.id);
    };
    scratch_.clear();
    double total = 0.0;  // P: the tempered mass of all candidates, pruned or not
    if (k > 0) {
        // Partial selection: a heap of the k best so far whose top is the worst of them.
        const auto n_keep = static_cast<size_t>(k);
        for (size_t i = 0; i < logits.size(); ++i) {
            const float l = logits[i];
            if (!std::isfinite(l)) continue;
            const candidate c{static_cast<int32_t>(i), l, 0.0f};
            if (scratch_.size() < n_keep) {
                scratch_.push_back(c);
                std::push_heap(scratch_.begin(), scratch_.end(), order);
            } else if (order(c, scratch_.front())) {
                std::pop_heap(scratch_.begin(), scratch_.end(), order);
                scratch_.back() = c;
                std::push_heap(scratch_.begin(), scratch_.end(), order);
            }
        }
        std::sort_heap(scratch_.begin(), scratch_.end(), order);
        for (candidate& c : scratch_) {
            c.w = std::exp((c.logit - l_max) / t);
            total += c.w;
        }
    } else {
        // Every finite logit counts in P, but only w >= min_p (and the top token) can survive
        // the min-p cut, so only those are candidates for ordering.
        for (size_t i = 0; i < logits.size(); ++i) {
            const float l = logits[i];
            if (!std::isfinite(l)) continue;
            const float w = std::exp((l - l_max) / t);
            total += w;
            if (w >= min_p || static_cast<int32_t>(i) == best) {
                scratch_.push_back({static_cast<int32_t>(i), l, w});
            }
        }
    }
    if (!(total > 0.0) || !std::isfinite(total)) return best;

    // The cuts usually stop within the first few hundred candidates, so only a growing prefix
    // is put in order. The order is total (ties by id), so this equals a full sort.
    size_t n_sorted = k > 0 ? scratch_.size() : 0;
    double kept_sum = 0.0;
    size_t n_kept = 0;
    for (bool done = false; !done && n_kept < scratch_.size(); ++n_kept) {
        if (n_kept == n_sorted) {
            const size_t grow = std::max<size_t>(256, n_sorted * 8);
            const auto first = scratch_.begin() + static_cast<std::ptrdiff_t>(n_sorted);
            if (grow >= scratch_.size() - n_sorted) {
                std::sort(first, scratch_.end(), order);
                n_sorted = scratch_.size();
            } else {
                const auto middle = first + static_cast<std::ptrdiff_t>(grow);
                std::nth_element(first, middle, scratch_.end(), order);
                std::sort(first, middle, order);
                n_sorted += grow;
            }
        }
        const candidate& c = scratch_[n_kept];
        if (n_kept > 0 && c.w < scratch_[0].w * min_p) break;  // min-p cut
        kept_sum += c.w;
        done = kept_sum / total >= top_p;  // nucleus cut, after including c
    }
    return draw_from(std::span<const candidate>(scratch_.data(), n_kept), kept_sum, best);
}

int32_t sampler::draw_from(std::span<const candidate> kept, double kept_sum, int32_t best) {
    if (kept.empty() || !(kept_sum > 0.0) || !std::isfinite(kept_sum)) return best;
    double r = static_cast<double>(rng_.next_float()) * kept_sum;
    for (const candidate& c : kept) {
        r -= c.w;
        if (r <= 0.0) return c.id;
    }
    return kept.back().id;  // rounding left r above zero
}

}  // namespace magnetar
