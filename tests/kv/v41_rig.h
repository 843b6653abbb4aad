// Test fixture of the V4.1 cache tests: the generated `v41-tiny` model, a CPU backend (exact
// activations) and scratch for caches of up to max_ctx tokens, driving graph::forward41
// directly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/arena.h"
#include "graph/forward41.h"
#include "kv/cache41.h"
#include "model/forward_fixtures.h"
#include "model/hparams.h"
#include "model/model.h"

namespace magnetar::test {

struct v41_rig {
    std::unique_ptr<model> m;
    std::unique_ptr<backend::cpu_backend> be;
    void* buf = nullptr;
    std::unique_ptr<arena> ar;
    std::unique_ptr<graph::forward41> fwd;

    // logits_all: scratch for the logits of every position of a chunk.
    v41_rig(const std::string& weights, int64_t max_ctx, int64_t max_chunk, bool logits_all) {
        m = model::load(tiny_model("v41-tiny", weights));
        be = std::make_unique<backend::cpu_backend>(2, false, true);
        be->reserve(graph::forward41_limits(m->hp(), max_ctx));
        const size_t bytes =
            graph::forward41_scratch_bytes(*m, max_ctx, max_chunk, logits_all, true);
        buf = be->alloc_buffer(bytes);
        ar = std::make_unique<arena>(buf, bytes);
        fwd = std::make_unique<graph::forward41>(*m, *be);
    }
    ~v41_rig() { be->free_buffer(buf); }
    v41_rig(const v41_rig&) = delete;
    v41_rig& operator=(const v41_rig&) = delete;
    const hparams& hp() const { return m->hp(); }

    // Evaluates positions [p0, p1) in chunks of `chunk`; returns the logits of every position
    // (every_position) or of the last position of each chunk, concatenated.
    std::vector<float> eval(kv::cache41& c, const std::vector<int32_t>& toks, int64_t p0,
                            int64_t p1, int64_t chunk, bool official, bool every_position) {
        const size_t V = hp().n_vocab;
        std::vector<float> out;
        std::vector<float> rows(static_cast<size_t>(every_position ? chunk : 1) * V);
        graph::chunk41_options o;
        o.official_index_k = official;
        for (int64_t p = p0; p < p1;) {
            graph::chunk_request req;
            req.p0 = p;
            req.n = std::min(chunk, p1 - p);
            req.tokens = toks.data() + p;
            req.logits_all = every_position;
            req.logits_last = !every_position;
            req.logits = rows.data();
            fwd->run(req, c, *ar, nullptr, o);
            const size_t n_rows = every_position ? static_cast<size_t>(req.n) : 1;
            out.insert(out.end(), rows.begin(),
                       rows.begin() + static_cast<std::ptrdiff_t>(n_rows * V));
            p += req.n;
        }
        return out;
    }
};

}  // namespace magnetar::test
