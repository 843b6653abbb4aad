// Session: one token timeline. Schedules prefill chunks and decode steps over the forward pass,
// keeps the logits, and exposes the diagnostic taps. Written once over timeline_state (V4 or
// V4.1); the pipelined (MPI) paths run V4 models only.
#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/format.h"
#include "engine/engine_impl.h"
#include "kv/payload.h"

namespace magnetar {

bool name_dump_sink::wants(const std::string& name) const {
    if (!fn) return false;
    for (const std::string& p : patterns) {
        if (p == name || fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
    }
    return false;
}

void name_dump_sink::rows(const std::string& name, int64_t first_pos, int64_t n_rows, int64_t width,
                          const float* data) {
    fn(name, first_pos, n_rows, width, data);
}

Session::impl::~impl() {
    if (arena_buffer) eng->be->free_buffer(arena_buffer);
    if (dist_id >= 0) {
        try {
            eng->pipe->destroy_session(dist_id);
        } catch (const Error& e) {
            std::fprintf(stderr, "magnetar: warning: %s\n", e.what());
        }
    }
}

void Session::impl::fetch_logits() {
    if (!remote_logits || logits_fetched) return;
    eng->pipe->fetch_logits(dist_id, logits.data());
    n_logit_rows = 1;
    logits_fetched = true;
}

Session::Session(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
Session::~Session() = default;

int64_t Session::n_past() const {
    return impl_->n_past;
}
int64_t Session::n_ctx() const {
    return impl_->opts.n_ctx;
}
uint32_t Session::n_vocab() const {
    return impl_->eng->info.n_vocab;
}
int64_t Session::n_logit_rows() const {
    return impl_->n_logit_rows;
}
int64_t Session::mtp_first_pos() const {
    return impl_->mtp_first_pos;
}
int64_t Session::n_mtp_rows() const {
    return impl_->n_mtp_rows;
}

std::span<const float> Session::logits() const {
    impl_->fetch_logits();
    return impl_->last_logits();
}

std::span<const float> Session::logits_at(int64_t i) const {
    MAGNETAR_ASSERT(i >= 0 && i < impl_->n_logit_rows, "logits_at: row out of range");
    const size_t v = n_vocab();
    return {impl_->logits.data() + static_cast<size_t>(i) * v, v};
}

std::span<const float> Session::mtp_logits_at(int64_t j) const {
    MAGNETAR_ASSERT(j >= 0 && j < impl_->n_mtp_rows, "mtp_logits_at: row out of range");
    const size_t v = n_vocab();
    return {impl_->mtp_logits.data() + static_cast<size_t>(j) * v, v};
}

void Session::reset() {
    std::lock_guard<std::mutex> lock(impl_->eng->eval_mutex);
    impl_->tl->clear();
    if (impl_->eng->pipe) impl_->eng->pipe->clear(impl_->dist_id);
    impl_->checkpoints.clear();
    impl_->tokens.clear();
    impl_->n_past = 0;
    impl_->n_logit_rows = 0;
    impl_->n_mtp_rows = 0;
}

session_memory Session::memory() const {
    session_memory m;
    impl_->tl->memory(m);
    m.n_ctx = impl_->opts.n_ctx;
    m.scratch_bytes = impl_->arena_bytes;
    for (const impl::checkpoint& cp : impl_->checkpoints)
        m.checkpoint_bytes += cp.small.bytes() + cp.logits.size() * sizeof(float);
    return m;
}

void Session::set_dump(std::vector<std::string> names, dump_fn fn) {
    impl_->sink.patterns = std::move(names);
    impl_->sink.fn = std::move(fn);
}

status Session::eval(std::span<const int32_t> tokens, const eval_options& opts) {
    impl& s = *impl_;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const uint32_t n_vocab = s.eng->info.n_vocab;
    if (n == 0) return {status_code::invalid_argument, "eval: empty batch"};
    if (s.n_past + n > s.opts.n_ctx) {
        return {status_code::context_full,
                strfmt("eval: %lld tokens at position %lld exceed the context of %lld",
                       static_cast<long long>(n), static_cast<long long>(s.n_past),
                       static_cast<long long>(s.opts.n_ctx))};
    }
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab) {
            return {status_code::invalid_argument,
                    strfmt("eval: token %lld has id %d, expected 0..%u", static_cast<long long>(i),
                           tokens[i], n_vocab - 1)};
        }
    }
    std::lock_guard<std::mutex> lock(s.eng->eval_mutex);
    return s.eval_locked(tokens, opts);
}

status Session::impl::eval_pipelined(std::span<const int32_t> toks, const eval_options& o) {
    dist::pipeline& pipe = *eng->pipe;
    const int64_t n = static_cast<int64_t>(toks.size());
    const uint32_t n_vocab = eng->info.n_vocab;
    const int64_t target = n_past + n;
    const int64_t base = n_past;
    if (opts.all_logits) {
        if (logits.size() < static_cast<size_t>(n) * n_vocab)
            logits.resize(static_cast<size_t>(n) * n_vocab);
        n_logit_rows = 0;
    }
    n_mtp_rows = 0;
    mtp_first_pos = n_past > 0 ? n_past - 1 : 0;
    logits_fetched = false;
    // Answers arrive in order; each one finishes a chunk on every stage.
    int64_t answered = n_past;
    std::vector<int64_t> ends;  // n_past after each chunk sent
    size_t next_end = 0;
    pipe.on_reply = [&](const dist::eval_reply& r) {
        answered = ends[next_end++];
        remote_argmax = r.argmax;
        if (opts.all_logits) n_logit_rows = answered - base;
        if (o.progress) o.progress(answered, target);
    };
    graph::dump_sink* dsink = sink.fn && !sink.patterns.empty() ? &sink : nullptr;
    const int64_t every = opts.checkpoint_interval;
    const uint32_t flags = (opts.all_logits ? dist::eval_logits_all : 0u) |
                           (tl->has_mtp() || eng->info.has_mtp ? dist::eval_mtp : 0u);
    status st;
    try {
        for (int64_t off = 0; off < n;) {
            if (o.cancel && o.cancel()) {
                st = {status_code::cancelled,
                      strfmt("eval: cancelled at position %lld", static_cast<long long>(n_past))};
                break;
            }
            // Chunks end at absolute multiples of the (pipeline) chunk size and of the
            // checkpoint interval, as in a single process, so every stage checkpoints at the
            // same positions.
            int64_t end = (n_past / opts.chunk_size + 1) * opts.chunk_size;
            if (every > 0) end = std::min(end, (n_past / every + 1) * every);
            graph::chunk_request req;
            req.p0 = n_past;
            req.n = std::min(end, target) - n_past;
            req.tokens = toks.data() + off;
            req.layer_begin = v4().layer_begin();
            req.layer_end = v4().layer_end();
            req.hc_out = hc.data();
            tl->run(req, ar, dsink);
            eng->be->synchronize();
            float* dst =
                opts.all_logits ? logits.data() + static_cast<size_t>(off) * n_vocab : nullptr;
            const size_t dst_floats = opts.all_logits ? static_cast<size_t>(req.n) * n_vocab : 0;
            n_past += req.n;
            ends.push_back(n_past);
            pipe.send_eval(dist_id, req.p0, req.n, req.tokens, hc.data(), flags, dst, dst_floats);
            tokens.insert(tokens.end(), req.tokens, req.tokens + req.n);
            off += req.n;
            if (every > 0 && n_past % every == 0) take_checkpoint();
        }
        pipe.wait_all();
    } catch (const Error& e) {
        pipe.on_reply = nullptr;
        return {status_code::internal, e.what()};
    }
    pipe.on_reply = nullptr;
    if (!opts.all_logits) n_logit_rows = 1;
    return st;
}

status Session::impl::eval_locked(std::span<const int32_t> toks, const eval_options& o) {
    if (eng->pipe) return eval_pipelined(toks, o);
    const int64_t n = static_cast<int64_t>(toks.size());
    const uint32_t n_vocab = eng->info.n_vocab;
    const int64_t target = n_past + n;

    const int64_t rows = opts.all_logits ? n : 1;
    if (logits.size() < static_cast<size_t>(rows) * n_vocab)
        logits.resize(static_cast<size_t>(rows) * n_vocab);
    const bool mtp = tl->has_mtp();
    const int64_t mtp_rows = mtp ? (n_past > 0 ? n : n - 1) : 0;
    if (opts.mtp_logits && mtp_logits.size() < static_cast<size_t>(mtp_rows) * n_vocab) {
        mtp_logits.resize(static_cast<size_t>(mtp_rows) * n_vocab);
    }
    n_mtp_rows = 0;
    mtp_first_pos = n_past > 0 ? n_past - 1 : 0;
    if (opts.all_logits) n_logit_rows = 0;

    graph::dump_sink* dsink = sink.fn && !sink.patterns.empty() ? &sink : nullptr;
    const std::function<bool()>* cancel = o.cancel ? &o.cancel : nullptr;
    const int64_t every = opts.checkpoint_interval;
    for (int64_t off = 0; off < n;) {
        if (cancel && (*cancel)()) {
            return {status_code::cancelled,
                    strfmt("eval: cancelled at position %lld", static_cast<long long>(n_past))};
        }
        // The chunk ends at the next absolute multiple of the chunk size or of the checkpoint
        // interval, or at the end of the batch.
        int64_t end = (n_past / opts.chunk_size + 1) * opts.chunk_size;
        if (every > 0) end = std::min(end, (n_past / every + 1) * every);
        graph::chunk_request req;
        req.p0 = n_past;
        req.n = std::min(end, target) - n_past;
        req.tokens = toks.data() + off;
        // Every chunk leaves the logits of its last row, so a state cut short (cancellation)
        // or checkpointed at a chunk end still has the logits of its last position.
        req.logits_all = opts.all_logits;
        req.logits_last = !opts.all_logits;
        req.logits =
            opts.all_logits ? logits.data() + static_cast<size_t>(off) * n_vocab : logits.data();
        req.mtp = mtp;
        req.mtp_logits = opts.mtp_logits;
        req.steer = &steer;
        req.mtp_out = opts.mtp_logits
                          ? mtp_logits.data() + static_cast<size_t>(n_mtp_rows) * n_vocab
                          : nullptr;
        if (cancel && req.n > 1) {
            tl->save_small(rollback);
            req.cancel = cancel;
        }
        graph::chunk_result r;
        try {
            if (req.n == 1 && o.graph_steps && !dsink && eng->be->has_graph_steps()) {
                eng->be->graph_step(req.p0, [&] { r = tl->run(req, ar, nullptr); });
            } else {
                r = tl->run(req, ar, dsink);
            }
        } catch (const Error& e) {
            eng->be->synchronize();
            return {status_code::invalid_argument,
                    strfmt("eval: at position %lld: %s", static_cast<long long>(n_past), e.what())};
        }
        if (r.cancelled) {
            tl->load_small(rollback, n_past);
            eng->be->synchronize();
            return {status_code::cancelled,
                    strfmt("eval: cancelled at position %lld", static_cast<long long>(n_past))};
        }
        n_mtp_rows += r.mtp_rows;
        n_past += req.n;
        tokens.insert(tokens.end(), req.tokens, req.tokens + req.n);
        off += req.n;
        n_logit_rows = opts.all_logits ? off : 1;
        if (every > 0 && n_past % every == 0) take_checkpoint();
        if (o.progress) o.progress(n_past, target);
    }
    eng->be->synchronize();
    return {};
}

std::span<const float> Session::impl::last_logits() const {
    const size_t v = eng->info.n_vocab;
    const int64_t row = n_logit_rows > 0 ? n_logit_rows - 1 : 0;
    return {logits.data() + static_cast<size_t>(row) * v, v};
}

void Session::impl::take_checkpoint() {
    if (opts.max_checkpoints <= 0) return;
    eng->be->synchronize();
    while (!checkpoints.empty() && checkpoints.back().pos >= n_past) checkpoints.pop_back();
    checkpoint cp;
    if (static_cast<int>(checkpoints.size()) >= opts.max_checkpoints) {
        cp = std::move(checkpoints.front());  // reuse its buffers
        checkpoints.pop_front();
    }
    cp.pos = n_past;
    tl->save_small(cp.small);
    if (eng->pipe) {
        cp.logits.clear();  // the last stage keeps the logits row of its checkpoint
    } else {
        const std::span<const float> l = last_logits();
        cp.logits.assign(l.begin(), l.end());
    }
    checkpoints.push_back(std::move(cp));
}

void Session::impl::restore_checkpoint(const checkpoint& cp) {
    tl->load_small(cp.small, cp.pos);
    if (eng->pipe) {
        remote_argmax = eng->pipe->restore(dist_id, cp.pos);
        if (remote_logits) {
            logits_fetched = false;
        } else {
            eng->pipe->fetch_logits(dist_id, logits.data());
        }
    } else {
        std::copy(cp.logits.begin(), cp.logits.end(), logits.begin());
    }
    n_logit_rows = 1;
    n_mtp_rows = 0;
    n_past = cp.pos;
    tokens.resize(static_cast<size_t>(cp.pos));
    while (!checkpoints.empty() && checkpoints.back().pos > cp.pos) checkpoints.pop_back();
    eng->be->synchronize();
}

status Session::sync(std::span<const int32_t> toks, const eval_options& opts, sync_result* result) {
    impl& s = *impl_;
    const int64_t n = static_cast<int64_t>(toks.size());
    sync_result local;
    sync_result& r = result ? *result : local;
    r = sync_result{};
    if (n == 0) return {status_code::invalid_argument, "sync: empty token list"};
    if (n > s.opts.n_ctx) {
        return {status_code::context_full,
                strfmt("sync: %lld tokens exceed the context of %lld", static_cast<long long>(n),
                       static_cast<long long>(s.opts.n_ctx))};
    }
    const uint32_t n_vocab = s.eng->info.n_vocab;
    for (int64_t i = 0; i < n; ++i) {
        if (toks[i] < 0 || static_cast<uint32_t>(toks[i]) >= n_vocab) {
            return {status_code::invalid_argument,
                    strfmt("sync: token %lld has id %d, expected 0..%u", static_cast<long long>(i),
                           toks[i], n_vocab - 1)};
        }
    }
    std::lock_guard<std::mutex> lock(s.eng->eval_mutex);
    const int64_t common = common_prefix(toks);
    int64_t start = 0;
    if (common == s.n_past) {
        start = common;
    } else {
        // The latest checkpoint inside the common prefix; a checkpoint at n itself keeps the
        // logits of position n - 1, so nothing needs evaluating then.
        const impl::checkpoint* best = nullptr;
        for (const impl::checkpoint& cp : s.checkpoints) {
            if (cp.pos >= 1 && cp.pos <= common) best = &cp;
        }
        if (best) {
            s.restore_checkpoint(*best);
            r.from_checkpoint = true;
            start = s.n_past;
        } else {
            s.tl->clear();
            if (s.eng->pipe) s.eng->pipe->clear(s.dist_id);
            s.checkpoints.clear();
            s.tokens.clear();
            s.n_past = 0;
            s.n_logit_rows = 0;
            s.n_mtp_rows = 0;
            start = 0;
        }
    }
    r.reused = start;
    if (start == n) return {};
    status st = s.eval_locked(toks.subspan(static_cast<size_t>(start)), opts);
    r.evaluated = s.n_past - start;
    return st;
}

std::span<const int32_t> Session::tokens() const {
    return impl_->tokens;
}

int64_t Session::common_prefix(std::span<const int32_t> other) const {
    const std::vector<int32_t>& t = impl_->tokens;
    const size_t m = std::min(t.size(), other.size());
    size_t i = 0;
    while (i < m && t[i] == other[i]) ++i;
    return static_cast<int64_t>(i);
}

status Session::checkpoint() {
    impl& s = *impl_;
    if (s.opts.max_checkpoints <= 0)
        return {status_code::unsupported, "checkpoint: max_checkpoints is 0 for this session"};
    if (s.n_past == 0) return {status_code::invalid_argument, "checkpoint: empty timeline"};
    std::lock_guard<std::mutex> lock(s.eng->eval_mutex);
    s.take_checkpoint();
    if (s.eng->pipe) {
        try {
            s.eng->pipe->checkpoint(s.dist_id);
        } catch (const Error& e) {
            return {status_code::internal, e.what()};
        }
    }
    return {};
}

std::vector<int64_t> Session::checkpoint_positions() const {
    std::vector<int64_t> out;
    for (const impl::checkpoint& cp : impl_->checkpoints) out.push_back(cp.pos);
    return out;
}

status Session::rewind(int64_t pos) {
    impl& s = *impl_;
    if (pos == s.n_past) return {};
    if (pos == 0) {
        reset();
        return {};
    }
    std::lock_guard<std::mutex> lock(s.eng->eval_mutex);
    for (const impl::checkpoint& cp : s.checkpoints) {
        if (cp.pos == pos) {
            s.restore_checkpoint(cp);
            return {};
        }
    }
    std::string held;
    for (const impl::checkpoint& cp : s.checkpoints)
        held += strfmt("%s%lld", held.empty() ? "" : ", ", static_cast<long long>(cp.pos));
    return {status_code::invalid_argument,
            strfmt("rewind: no checkpoint at position %lld (n_past %lld; checkpoints: %s)",
                   static_cast<long long>(pos), static_cast<long long>(s.n_past),
                   held.empty() ? "none" : held.c_str())};
}

uint64_t Session::payload_size() const {
    return impl_->tl->payload_size(impl_->n_past);
}

status Session::save_payload(std::vector<uint8_t>* out) const {
    out->clear();
    out->reserve(payload_size());
    return save_payload([out](const void* p, size_t n) {
        const uint8_t* b = static_cast<const uint8_t*>(p);
        out->insert(out->end(), b, b + n);
        return true;
    });
}

status Session::save_payload(const byte_sink& sink) const {
    impl& s = *impl_;
    if (s.n_past == 0) return {status_code::invalid_argument, "save_payload: empty timeline"};
    std::lock_guard<std::mutex> lock(s.eng->eval_mutex);
    const hparams& hp = s.eng->m->hp();
    try {
        if (!s.eng->pipe) {
            s.tl->write_payload(s.payload_chunk, s.tokens, s.last_logits(), sink);
            return {};
        }
        // Pipelined: the other stages' layer sections first (nothing reaches the sink if the
        // pipeline fails), then the same bytes a single process writes.
        const uint32_t l1 = s.v4().layer_end();
        uint64_t remote = 0;
        for (uint32_t il = l1; il < hp.n_layer; ++il)
            remote += kv::payload_layer_size(hp, s.n_past, il);
        const std::vector<uint8_t> rest = s.eng->pipe->save_state(s.dist_id, s.n_past, remote);
        s.fetch_logits();
        s.eng->be->synchronize();
        kv::write_payload_head(hp, s.v4(), s.payload_chunk, s.tokens, s.last_logits(), sink);
        kv::write_payload_layers(*s.eng->be, hp, s.v4(), s.n_past, 0, l1, sink);
        if (!rest.empty() && !sink(rest.data(), rest.size()))
            throw Error("session payload: write failed");
    } catch (const Error& e) {
        return {status_code::internal, e.what()};
    }
    return {};
}

status Session::load_payload(std::span<const uint8_t> bytes) {
    size_t at = 0;
    return load_payload(
        [&](void* p, size_t n) {
            if (n > bytes.size() - at) return false;
            std::memcpy(p, bytes.data() + at, n);
            at += n;
            return true;
        },
        bytes.size());
}

status Session::load_payload(const byte_source& source, uint64_t size) {
    impl& s = *impl_;
    std::lock_guard<std::mutex> lock(s.eng->eval_mutex);
    s.checkpoints.clear();
    s.n_mtp_rows = 0;
    const hparams& hp = s.eng->m->hp();
    std::vector<float> row;
    bool sent = false;  // pipelined: the other stages have been asked to load
    try {
        if (!s.eng->pipe) {
            s.tl->read_payload(source, size, &s.tokens, &row);
        } else {
            // Every byte is read and the head checked before the other stages are asked to
            // load: a bad payload is refused here (and the timeline emptied everywhere, as a
            // single process empties it).
            kv::read_payload_head(hp, s.v4(), source, size, &s.tokens, &row);
            const int64_t n = static_cast<int64_t>(s.tokens.size());
            const uint32_t l1 = s.v4().layer_end();
            s.tl->clear();
            kv::read_payload_layers(*s.eng->be, hp, s.v4(), n, 0, l1, source);
            uint64_t remote = 0;
            for (uint32_t il = l1; il < hp.n_layer; ++il)
                remote += kv::payload_layer_size(hp, n, il);
            const size_t row_bytes = row.size() * sizeof(float);
            std::vector<uint8_t> rest(row_bytes + remote);
            std::memcpy(rest.data(), row.data(), row_bytes);
            if (remote > 0 && !source(rest.data() + row_bytes, remote))
                throw Error("session payload: read failed in the layers of the other stages");
            sent = true;
            s.remote_argmax = s.eng->pipe->load_state(s.dist_id, n, rest);
            s.logits_fetched = true;  // the row is here as well
        }
    } catch (const Error& e) {
        s.tl->clear();
        s.tokens.clear();
        s.n_past = 0;
        s.n_logit_rows = 0;
        if (sent) return {status_code::internal, e.what()};
        if (s.eng->pipe) {
            try {
                s.eng->pipe->clear(s.dist_id);  // the timeline is empty everywhere
            } catch (const Error& e2) {
                return {status_code::internal, strfmt("%s (then: %s)", e.what(), e2.what())};
            }
        }
        return {status_code::bad_payload, e.what()};
    }
    s.n_past = static_cast<int64_t>(s.tokens.size());
    std::copy(row.begin(), row.end(), s.logits.begin());
    s.n_logit_rows = 1;
    s.eng->be->synchronize();
    return {};
}

int32_t Session::argmax() const {
    if (impl_->remote_logits) return impl_->remote_argmax;
    return sampler::argmax(logits());
}

std::vector<token_logprob> Session::top_logprobs(int k) const {
    if (impl_->remote_logits && !impl_->logits_fetched)
        return impl_->eng->pipe->top_logprobs(impl_->dist_id, k);
    std::vector<token_logprob> out;
    magnetar::top_logprobs(logits(), k, out);
    return out;
}

double Session::logprob_of(int32_t id) const {
    MAGNETAR_ASSERT(id >= 0 && static_cast<uint32_t>(id) < n_vocab(),
                    "logprob_of: id outside the vocabulary");
    if (impl_->remote_logits && !impl_->logits_fetched)
        return impl_->eng->pipe->logprob_of(impl_->dist_id, id);
    return token_logprob_of(logits(), id);
}

int32_t Session::sample(sampler& smp) const {
    return sample(smp, smp.params());
}

int32_t Session::sample(sampler& smp, const sampling_params& params) const {
    // Pipelined: the last stage draws with this sampler's generator state, so the sequence of
    // draws is the one a single process makes. Penalties need the history: fetched logits.
    if (impl_->remote_logits && !impl_->logits_fetched && !smp.penalizes(params))
        return impl_->eng->pipe->sample(impl_->dist_id, smp, params);
    return smp.sample(logits(), params);
}

status Session::read_state(const std::string& name, std::vector<float>* data,
                           int64_t* width) const {
    const impl& s = *impl_;
    std::lock_guard<std::mutex> lock(s.eng->eval_mutex);
    return s.tl->read_state(name, s.n_past, data, width);
}

}  // namespace magnetar
