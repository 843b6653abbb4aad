// Session: one token timeline. Schedules prefill chunks and decode steps over the forward pass,
// keeps the logits, and exposes the diagnostic taps.
#include <fnmatch.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/format.h"
#include "engine/engine_impl.h"

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
    const size_t v = n_vocab();
    const int64_t row = impl_->n_logit_rows > 0 ? impl_->n_logit_rows - 1 : 0;
    return {impl_->logits.data() + static_cast<size_t>(row) * v, v};
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
    impl_->cache->clear();
    impl_->n_past = 0;
    impl_->n_logit_rows = 0;
    impl_->n_mtp_rows = 0;
}

session_memory Session::memory() const {
    session_memory m;
    const kv::usage& u = impl_->cache->bytes();
    m.n_ctx = impl_->opts.n_ctx;
    m.growing_bytes = u.growing_bytes;
    m.raw_window_bytes = u.raw_window_bytes;
    m.frontier_bytes = u.frontier_bytes;
    m.scratch_bytes = impl_->arena_bytes;
    return m;
}

void Session::set_dump(std::vector<std::string> names, dump_fn fn) {
    impl_->sink.patterns = std::move(names);
    impl_->sink.fn = std::move(fn);
}

status Session::eval(std::span<const int32_t> tokens) {
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

    s.n_logit_rows = s.opts.all_logits ? n : 1;
    const size_t need = static_cast<size_t>(s.n_logit_rows) * n_vocab;
    if (s.logits.size() < need) s.logits.resize(need);
    const bool mtp = s.cache->has_mtp();
    const int64_t mtp_rows = mtp ? (s.n_past > 0 ? n : n - 1) : 0;
    if (s.opts.mtp_logits && s.mtp_logits.size() < static_cast<size_t>(mtp_rows) * n_vocab) {
        s.mtp_logits.resize(static_cast<size_t>(mtp_rows) * n_vocab);
    }
    s.n_mtp_rows = 0;
    s.mtp_first_pos = s.n_past > 0 ? s.n_past - 1 : 0;

    graph::dump_sink* sink = s.sink.fn && !s.sink.patterns.empty() ? &s.sink : nullptr;
    for (int64_t off = 0; off < n; off += s.opts.chunk_size) {
        graph::chunk_request req;
        req.p0 = s.n_past;
        req.n = std::min(s.opts.chunk_size, n - off);
        req.tokens = tokens.data() + off;
        const bool last_chunk = off + req.n == n;
        req.logits_all = s.opts.all_logits;
        req.logits_last = !s.opts.all_logits && last_chunk;
        req.logits = s.opts.all_logits ? s.logits.data() + static_cast<size_t>(off) * n_vocab
                                       : s.logits.data();
        req.mtp = mtp;
        req.mtp_logits = s.opts.mtp_logits;
        req.mtp_out = s.opts.mtp_logits
                          ? s.mtp_logits.data() + static_cast<size_t>(s.n_mtp_rows) * n_vocab
                          : nullptr;
        const graph::chunk_result r = s.fwd->run(req, *s.cache, s.ar, sink);
        s.n_mtp_rows += r.mtp_rows;
        s.n_past += req.n;
    }
    s.eng->be->synchronize();
    return {};
}

status Session::read_state(const std::string& name, std::vector<float>* data,
                           int64_t* width) const {
    const impl& s = *impl_;
    unsigned il = 0;
    char what[32] = {0};
    if (std::sscanf(name.c_str(), "blk.%u.%31s", &il, what) != 2 || il >= s.eng->info.n_layer) {
        return {status_code::invalid_argument,
                strfmt("read_state: unknown state '%s'", name.c_str())};
    }
    const kv::layer_state& st = s.cache->layer(il);
    const std::string w = what;
    tensor rows;
    if (w == "comp_rows" && st.ratio != 0) {
        rows = view_rows(st.comp_rows, 0, s.n_past / st.ratio);
    } else if (w == "index_rows" && st.ratio == 4) {
        rows = view_rows(st.idx_rows, 0, s.n_past / 4);
    } else {
        return {status_code::invalid_argument,
                strfmt("read_state: layer %u has no state '%s'", il, what)};
    }
    std::lock_guard<std::mutex> lock(s.eng->eval_mutex);
    data->resize(static_cast<size_t>(rows.n_elements()));
    if (!data->empty()) s.eng->be->download(rows, data->data());
    *width = rows.ne[0];
    return {};
}

}  // namespace magnetar
