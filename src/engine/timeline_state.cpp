// The two timeline states behind Session: DeepSeek V4 (kv::cache + graph::forward) and
// DeepSeek V4.1 (kv::cache41 + graph::forward41).
#include "engine/timeline_state.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/format.h"
#include "graph/forward41.h"
#include "kv/cache41.h"
#include "kv/payload.h"
#include "kv/payload41.h"

namespace magnetar {

int timeline_state::draft(const graph::draft_request&, arena&) {
    throw Error("speculative decoding needs a DeepSeek V4 model with an MTP block");
}

void timeline_state::set_mtp_state(const float*) {
    throw Error("speculative decoding needs a DeepSeek V4 model with an MTP block");
}

namespace {

// ---------------------------------------------------------------------------------------------
// DeepSeek V4
// ---------------------------------------------------------------------------------------------

class v4_timeline final : public timeline_state {
  public:
    v4_timeline(const model& m, backend::backend& be, int64_t n_ctx, bool with_mtp, uint32_t l0,
                uint32_t l1)
        : m_(m), be_(be), cache_(be, m.hp(), n_ctx, with_mtp, l0, l1), fwd_(m, be) {
        be.reserve(graph::scratch_limits(m.hp(), n_ctx));
    }

    graph::chunk_result run(const graph::chunk_request& req, arena& ar,
                            graph::dump_sink* dump) override {
        return fwd_.run(req, cache_, ar, dump);
    }
    size_t arena_bytes(int64_t chunk, bool) override {
        // Every optional output on (all logits, MTP), against a backend that executes nothing.
        return graph::measure_arena(m_, cache_, chunk, cache_.layer_begin(), cache_.layer_end(),
                                    cache_.has_mtp());
    }
    void clear() override { cache_.clear_small(); }
    void save_small(small_copy& out) const override { cache_.save_small(out.floats); }
    void load_small(const small_copy& in, int64_t) override { cache_.load_small(in.floats); }
    bool has_mtp() const override { return cache_.has_mtp(); }
    int draft(const graph::draft_request& req, arena& ar) override {
        if (!cache_.has_mtp()) return timeline_state::draft(req, ar);
        return fwd_.draft(req, cache_, ar);
    }
    int64_t hc_row_floats() const override {
        return static_cast<int64_t>(m_.hp().n_hc) * m_.hp().n_embd;
    }
    void set_mtp_state(const float* row) override {
        if (!cache_.has_mtp()) timeline_state::set_mtp_state(row);
        be_.upload(cache_.mtp_prev_hc(), row);
    }
    bool completes_block(int64_t first, int64_t last) const override {
        const hparams& hp = m_.hp();
        const uint32_t l1 = std::min(cache_.layer_end(), hp.n_layer);
        for (uint32_t il = cache_.layer_begin(); il < l1; ++il) {
            const int64_t r = hp.compress_ratio(il);
            if (r == 0) continue;
            // The first block end at or after `first`: the position p with (p + 1) % r == 0.
            const int64_t end = (first + r) / r * r - 1;
            if (end <= last) return true;
        }
        return false;
    }
    void memory(session_memory& m) const override {
        const kv::usage& u = cache_.bytes();
        m.growing_bytes = u.growing_bytes;
        m.raw_window_bytes = u.raw_window_bytes;
        m.frontier_bytes = u.frontier_bytes;
    }

    uint64_t payload_size(int64_t n_tokens) const override {
        return kv::payload_size(m_.hp(), n_tokens);
    }
    void write_payload(int64_t chunk, std::span<const int32_t> tokens,
                       std::span<const float> logits, const byte_sink& sink) const override {
        kv::write_payload(be_, m_.hp(), cache_, chunk, tokens, logits, sink);
    }
    void read_payload(const byte_source& source, uint64_t size, std::vector<int32_t>* tokens,
                      std::vector<float>* logits) override {
        kv::read_payload(be_, m_.hp(), cache_, source, size, tokens, logits);
    }

    status read_state(const std::string& name, int64_t n_past, std::vector<float>* data,
                      int64_t* width) const override {
        unsigned il = 0;
        char what[32] = {0};
        if (std::sscanf(name.c_str(), "blk.%u.%31s", &il, what) != 2 || il >= m_.hp().n_layer) {
            return {status_code::invalid_argument,
                    strfmt("read_state: unknown state '%s'", name.c_str())};
        }
        if (il < cache_.layer_begin() || il >= cache_.layer_end()) {
            return {status_code::unsupported,
                    strfmt("read_state: layer %u is held by another pipeline stage", il)};
        }
        const kv::layer_state& st = cache_.layer(il);
        const std::string w = what;
        tensor rows;
        if (w == "comp_rows" && st.ratio != 0) {
            rows = view_rows(st.comp_rows, 0, n_past / st.ratio);
        } else if (w == "index_rows" && st.ratio == 4) {
            rows = view_rows(st.idx_rows, 0, n_past / 4);
        } else {
            return {status_code::invalid_argument,
                    strfmt("read_state: layer %u has no state '%s'", il, what)};
        }
        data->resize(static_cast<size_t>(rows.n_elements()));
        if (!data->empty()) be_.download(rows, data->data());
        *width = rows.ne[0];
        return {};
    }

    kv::cache* v4_cache() override { return &cache_; }

  private:
    const model& m_;
    backend::backend& be_;
    mutable kv::cache cache_;  // layer() has no const overload
    graph::forward fwd_;
};

// ---------------------------------------------------------------------------------------------
// DeepSeek V4.1
// ---------------------------------------------------------------------------------------------

class v41_timeline final : public timeline_state {
  public:
    v41_timeline(const model& m, backend::backend& be, int64_t n_ctx, bool with_dspark)
        : m_(m),
          be_(be),
          cache_(be, m.hp(), n_ctx, with_dspark),
          fwd_(m, be),
          dspark_(with_dspark) {
        be.reserve(graph::forward41_limits(m.hp(), n_ctx));
    }

    graph::chunk_result run(const graph::chunk_request& req, arena& ar,
                            graph::dump_sink* dump) override {
        try {
            // The session's own attention runtime (kv::cache41::runtime), default index keys.
            return fwd_.run(req, cache_, ar, dump);
        } catch (const Error&) {
            // Refused before any attention state was written (the Engram lookup of the chunk's
            // tokens): only the history has grown.
            if (static_cast<int64_t>(cache_.engram_history().size()) > req.p0)
                cache_.engram_history().resize(static_cast<size_t>(req.p0));
            throw;
        }
    }
    size_t arena_bytes(int64_t chunk, bool logits_all) override {
        return graph::forward41_scratch_bytes(m_, cache_.n_ctx(), chunk, logits_all, dspark_);
    }
    // The packed rows are append-only and never read past what the timeline wrote.
    void clear() override { cache_.clear_small(); }
    void save_small(small_copy& out) const override { cache_.save_small(out.raw); }
    void load_small(const small_copy& in, int64_t pos) override {
        cache_.load_small(in.raw);
        // The history is append-only by position: cut it back to where the copy was taken.
        std::vector<int64_t>& h = cache_.engram_history();
        if (static_cast<int64_t>(h.size()) > pos) h.resize(static_cast<size_t>(pos));
    }
    bool has_mtp() const override { return false; }
    bool can_draft() const override { return dspark_; }
    // One DSpark block (spec v41.md §3.10) after the last position, at temperature 0.
    int draft(const graph::draft_request& req, arena& ar) override {
        if (!dspark_) return timeline_state::draft(req, ar);
        const graph::draft41 d = fwd_.draft(req.p0, req.token, cache_, ar);
        const size_t V = m_.hp().n_vocab;
        int made = 0;
        for (size_t k = 1; k < d.tokens.size() && made < req.max_steps; ++k) {
            float margin = 0.0f;
            graph::argmax_margin(d.logits.data() + (k - 1) * V, V, &margin);
            if (margin < req.min_margin) break;
            req.drafts[made++] = d.tokens[k];
        }
        return made;
    }
    // Any rejection restores the small state of before the step and evaluates the kept tokens
    // again (the window rings, pending groups and Engram history roll back that way).
    bool completes_block(int64_t, int64_t) const override { return true; }
    void memory(session_memory& m) const override {
        const kv::usage41& u = cache_.bytes();
        m.growing_bytes = u.global_bytes;
        m.raw_window_bytes = u.window_bytes;
        m.pending_bytes = u.pending_bytes;
        m.history_bytes = u.engram_bytes;
    }

    uint64_t payload_size(int64_t n_tokens) const override {
        return kv::payload41_size(m_.hp(), cache_, n_tokens);
    }
    void write_payload(int64_t chunk, std::span<const int32_t> tokens,
                       std::span<const float> logits, const byte_sink& sink) const override {
        kv::write_payload41(be_, m_.hp(), cache_, chunk, tokens, logits, sink);
    }
    void read_payload(const byte_source& source, uint64_t size, std::vector<int32_t>* tokens,
                      std::vector<float>* logits) override {
        kv::read_payload41(be_, m_.hp(), cache_, source, size, tokens, logits);
    }

    status read_state(const std::string& name, int64_t, std::vector<float>*,
                      int64_t*) const override {
        // comp_rows / index_rows are the V4 FP32 cache rows; V4.1 keeps packed FP8 / FP4 rows.
        return {status_code::unsupported,
                strfmt("read_state: '%s': DeepSeek V4.1 caches hold packed rows; read_state "
                       "names (blk.N.comp_rows, blk.N.index_rows) are DeepSeek V4 only",
                       name.c_str())};
    }

  private:
    const model& m_;
    backend::backend& be_;
    kv::cache41 cache_;
    graph::forward41 fwd_;
    bool dspark_;
};

}  // namespace

std::unique_ptr<timeline_state> make_v4_timeline(const model& m, backend::backend& be,
                                                 int64_t n_ctx, bool with_mtp, uint32_t l0,
                                                 uint32_t l1) {
    return std::make_unique<v4_timeline>(m, be, n_ctx, with_mtp, l0, l1);
}

std::unique_ptr<timeline_state> make_v41_timeline(const model& m, backend::backend& be,
                                                  int64_t n_ctx, bool with_dspark) {
    return std::make_unique<v41_timeline>(m, be, n_ctx, with_dspark);
}

}  // namespace magnetar
