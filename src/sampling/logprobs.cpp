// Log-probabilities (protocol §4.4): raw logits, no temperature, double precision, non-finite
// logits ignored.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "magnetar/sampler.h"

namespace magnetar {

double logsumexp(std::span<const float> logits) {
    double l_max = -std::numeric_limits<double>::infinity();
    bool any = false;
    for (const float l : logits) {
        if (!std::isfinite(l)) continue;
        l_max = std::max(l_max, static_cast<double>(l));
        any = true;
    }
    if (!any) return -std::numeric_limits<double>::infinity();
    double sum = 0.0;
    for (const float l : logits) {
        if (std::isfinite(l)) sum += std::exp(static_cast<double>(l) - l_max);
    }
    return l_max + std::log(sum);
}

double token_logprob_of(std::span<const float> logits, int32_t id) {
    MAGNETAR_ASSERT(id >= 0 && static_cast<size_t>(id) < logits.size(),
                    "token id outside the logits");
    const float l = logits[static_cast<size_t>(id)];
    if (!std::isfinite(l)) return -std::numeric_limits<double>::infinity();
    return static_cast<double>(l) - logsumexp(logits);
}

void top_logprobs(std::span<const float> logits, int k, std::vector<token_logprob>& out) {
    out.clear();
    if (k <= 0) return;
    const size_t n_keep = std::min(static_cast<size_t>(k), logits.size());
    // Descending logit, ties lower id first. Used as a heap order, the top is the worst kept.
    auto order = [](const token_logprob& a, const token_logprob& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    };
    out.reserve(n_keep);
    for (size_t i = 0; i < logits.size(); ++i) {
        const float l = logits[i];
        if (!std::isfinite(l)) continue;
        const token_logprob e{static_cast<int32_t>(i), l, 0.0};
        if (out.size() < n_keep) {
            out.push_back(e);
            std::push_heap(out.begin(), out.end(), order);
        } else if (order(e, out.front())) {
            std::pop_heap(out.begin(), out.end(), order);
            out.back() = e;
            std::push_heap(out.begin(), out.end(), order);
        }
    }
    std::sort_heap(out.begin(), out.end(), order);
    const double lse = logsumexp(logits);
    for (token_logprob& e : out) e.logprob = static_cast<double>(e.logit) - lse;
}

}  // namespace magnetar
