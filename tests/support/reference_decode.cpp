#include "support/reference_decode.h"

#include <algorithm>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>

#include "magnetar/session.h"

namespace magnetar::test {

std::vector<int32_t> penalised_greedy(const Engine& e, const std::vector<int32_t>& prompt,
                                      int64_t n, int64_t n_ctx, const penalties& pen) {
    session_options so;
    so.n_ctx = n_ctx;
    std::unique_ptr<Session> s;
    if (!e.create_session(so, &s).ok()) throw std::runtime_error("create_session");
    if (!s->eval(prompt).ok()) throw std::runtime_error("eval");
    std::vector<int32_t> out;
    for (int64_t i = 0; i < n; ++i) {
        std::vector<double> l(s->logits().begin(), s->logits().end());
        std::map<int32_t, int> count;
        const size_t window =
            pen.last_n < 0 ? out.size() : std::min(out.size(), static_cast<size_t>(pen.last_n));
        for (size_t j = out.size() - window; j < out.size(); ++j) ++count[out[j]];
        for (const auto& [id, c] : count) {
            double& x = l[static_cast<size_t>(id)];
            x = x > 0 ? x / pen.repeat : x * pen.repeat;
            x -= c * pen.frequency + pen.presence;
        }
        const auto id = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
        if (id == e.info().special.eos) break;
        out.push_back(id);
        if (i + 1 < n && !s->eval(std::span<const int32_t>(&id, 1)).ok()) {
            throw std::runtime_error("eval");
        }
    }
    return out;
}

}  // namespace magnetar::test
