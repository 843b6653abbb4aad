// Engine::decode_batch: one decode step of several sessions as one forward pass
// (graph::forward::run_batch), with each session's bookkeeping done as eval_locked does it
// for a one-token batch.
#include <algorithm>
#include <unordered_set>

#include "core/error.h"
#include "core/format.h"
#include "engine/engine_impl.h"

namespace magnetar {

namespace {

status check_batch(const Engine::impl& e, std::span<Session::impl* const> ss,
                   std::span<const int32_t> tokens) {
    if (ss.size() != tokens.size()) {
        return {status_code::invalid_argument,
                strfmt("decode_batch: %zu sessions but %zu tokens", ss.size(), tokens.size())};
    }
    if (ss.empty()) return {status_code::invalid_argument, "decode_batch: no sessions"};
    const uint32_t n_vocab = e.info.n_vocab;
    std::unordered_set<const Session::impl*> seen;
    for (size_t i = 0; i < ss.size(); ++i) {
        const Session::impl* s = ss[i];
        if (!s)
            return {status_code::invalid_argument, strfmt("decode_batch: session %zu is null", i)};
        if (s->eng != &e) {
            return {status_code::invalid_argument,
                    strfmt("decode_batch: session %zu belongs to another engine", i)};
        }
        if (!seen.insert(s).second) {
            return {status_code::invalid_argument,
                    strfmt("decode_batch: session %zu appears twice", i)};
        }
        if (s->n_past + 1 > s->opts.n_ctx) {
            return {status_code::context_full,
                    strfmt("decode_batch: session %zu is full (%lld tokens)", i,
                           static_cast<long long>(s->n_past))};
        }
        if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab) {
            return {status_code::invalid_argument,
                    strfmt("decode_batch: token %zu has id %d, expected 0..%u", i, tokens[i],
                           n_vocab - 1)};
        }
    }
    return {};
}

// Whether a session can share the pass: a whole V4 model in this process, and a previous
// position for its MTP block.
bool joins_batch(const Session::impl& s) {
    if (s.eng->pipe) return false;
    kv::cache* c = s.tl->v4_cache();
    if (!c || c->layer_begin() != 0 || c->layer_end() < s.eng->m->hp().n_layer) return false;
    return !s.tl->has_mtp() || s.n_past >= 1;
}

}  // namespace

status Engine::decode_batch(std::span<Session* const> sessions,
                            std::span<const int32_t> tokens) const {
    impl& e = *impl_;
    std::vector<Session::impl*> ss;
    ss.reserve(sessions.size());
    for (Session* s : sessions) ss.push_back(s ? s->impl_.get() : nullptr);
    if (status st = check_batch(e, ss, tokens); !st.ok()) return st;

    std::lock_guard<std::mutex> lock(e.eval_mutex);
    std::vector<size_t> shared;
    for (size_t i = 0; i < ss.size(); ++i)
        if (joins_batch(*ss[i])) shared.push_back(i);
    if (shared.size() < 2) shared.clear();  // one alone gains nothing (and keeps graph steps)
    for (size_t i = 0; i < ss.size(); ++i) {
        if (std::find(shared.begin(), shared.end(), i) != shared.end()) continue;
        if (status st = ss[i]->eval_locked(tokens.subspan(i, 1), eval_options{}); !st.ok()) {
            // Sessions before it advanced, the others did not: say which one failed.
            return {st.code(), strfmt("decode_batch: session %zu: %s", i, st.message().c_str())};
        }
    }
    if (shared.empty()) return {};

    const hparams& hp = e.m->hp();
    const size_t n_vocab = hp.n_vocab;
    const size_t n = shared.size();
    bool mtp = false, mtp_logits = false;
    std::vector<graph::batch_row> rows;
    rows.reserve(n);
    for (const size_t i : shared) {
        Session::impl& s = *ss[i];
        rows.push_back({s.n_past, tokens[i], s.tl->v4_cache(), &s.steer});
        mtp = mtp || s.tl->has_mtp();
        mtp_logits = mtp_logits || (s.tl->has_mtp() && s.opts.mtp_logits);
    }
    try {
        const size_t need =
            graph::measure_batch_arena(*e.m, *rows.front().cache, static_cast<int64_t>(n), mtp);
        if (need > e.batch_bytes) {
            if (e.batch_buffer) e.be->free_buffer(e.batch_buffer);
            e.batch_buffer = nullptr;
            e.batch_bytes = 0;
            e.batch_buffer = e.be->alloc_buffer(need);
            e.batch_bytes = need;
            e.batch_ar = arena(e.batch_buffer, e.batch_bytes);
        }
    } catch (const Error& err) {
        return {status_code::internal, strfmt("decode_batch: %s", err.what())};
    }
    e.batch_logits.resize(n * n_vocab);
    if (mtp_logits) e.batch_mtp_logits.resize(n * n_vocab);
    graph::batch_request req;
    req.rows = rows;
    req.logits = e.batch_logits.data();
    req.mtp = mtp;
    req.mtp_logits = mtp_logits;
    req.mtp_out = mtp_logits ? e.batch_mtp_logits.data() : nullptr;
    try {
        graph::forward(*e.m, *e.be).run_batch(req, e.batch_ar);
        e.be->synchronize();
    } catch (const Error& err) {
        e.be->synchronize();
        for (const size_t i : shared) {
            Session::impl& s = *ss[i];
            s.tl->clear();
            s.checkpoints.clear();
            s.tokens.clear();
            s.n_past = 0;
            s.n_logit_rows = 0;
            s.n_mtp_rows = 0;
        }
        return {status_code::internal, strfmt("decode_batch: %s", err.what())};
    }

    for (size_t r = 0; r < n; ++r) {
        Session::impl& s = *ss[shared[r]];
        if (s.logits.size() < n_vocab) s.logits.resize(n_vocab);
        std::copy_n(e.batch_logits.data() + r * n_vocab, n_vocab, s.logits.data());
        s.n_logit_rows = 1;
        s.mtp_first_pos = s.n_past > 0 ? s.n_past - 1 : 0;
        s.n_mtp_rows = s.tl->has_mtp() ? 1 : 0;
        if (s.tl->has_mtp() && s.opts.mtp_logits) {
            if (s.mtp_logits.size() < n_vocab) s.mtp_logits.resize(n_vocab);
            std::copy_n(e.batch_mtp_logits.data() + r * n_vocab, n_vocab, s.mtp_logits.data());
        }
        s.n_past += 1;
        s.tokens.push_back(rows[r].token);
        const int64_t every = s.opts.checkpoint_interval;
        if (every > 0 && s.n_past % every == 0) s.take_checkpoint();
    }
    return {};
}

}  // namespace magnetar
