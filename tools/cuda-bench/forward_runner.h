// Runs the forward pass (src/graph) over a kv::cache on any backend, the way a session does:
// scratch limits reserved, the arena sized by a measuring pass, chunks evaluated at explicit
// positions. Shared by the CUDA benchmark and the whole-model GPU tests; also the helper that
// maps a loaded model's weights into the CUDA backend's upload table.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/null_backend.h"
#include "core/arena.h"
#include "graph/forward.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace magnetar::cuda_tools {

// Copies the tensor data section of every GGUF file of `m` to the device once (progress bar).
inline uint64_t map_model_weights(backend::cuda_backend& be, const model& m) {
    uint64_t total = 0;
    auto map_file = [&](const gguf::reader& f) {
        if (f.tensors().empty()) return;
        const gguf::tensor_info& t0 = f.tensors().front();
        const uint8_t* base = f.tensor_data(t0) - t0.offset;
        const uint64_t bytes = f.file_size() - f.data_offset();
        be.map_host_region(base, bytes, f.path());
        total += bytes;
    };
    map_file(m.file());
    if (m.mtp_file() && m.mtp_file() != &m.file()) map_file(*m.mtp_file());
    return total;
}

// Backend scratch a context of n_ctx tokens needs (the engine's rule).
inline backend::limits limits_for(const hparams& hp, int64_t n_ctx) {
    backend::limits l;
    l.max_row =
        std::max<int64_t>({static_cast<int64_t>(hp.n_hc) * hp.n_embd, hp.n_embd, hp.n_q_lora,
                           hp.o_group_in(), static_cast<int64_t>(hp.n_o_group) * hp.n_o_lora,
                           hp.n_ff_exp, hp.n_expert, 2 * static_cast<int64_t>(hp.n_head_dim)});
    int64_t comp = 0;
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const uint32_t r = hp.compress_ratio(il);
        if (r == 4)
            comp = std::max<int64_t>(comp, std::min<int64_t>(n_ctx / 4, hp.n_indexer_top_k));
        if (r != 0 && r != 4) comp = std::max<int64_t>(comp, n_ctx / r);
    }
    l.max_keys = hp.n_swa + comp;
    l.max_index_rows = n_ctx / 4;
    return l;
}

class forward_runner {
  public:
    // A timeline of up to n_ctx tokens evaluated in chunks of at most max_chunk tokens.
    forward_runner(const model& m, backend::backend& be, int64_t n_ctx, int64_t max_chunk)
        : m_(m),
          be_(be),
          cache_(be, m.hp(), n_ctx, false),
          fwd_(m, be),
          cuda_(dynamic_cast<backend::cuda_backend*>(&be)) {
        be.reserve(limits_for(m.hp(), n_ctx));
        backend::null_backend nb;
        graph::forward probe(m, nb);
        arena measuring = arena::measuring();
        graph::chunk_request req;
        req.p0 = 1;
        req.n = max_chunk;
        req.logits_all = true;
        probe.run(req, cache_, measuring, nullptr);
        arena_bytes_ = measuring.peak();
        arena_buf_ = be.alloc_buffer(arena_bytes_);
        ar_ = arena(arena_buf_, arena_bytes_);
    }
    ~forward_runner() { be_.free_buffer(arena_buf_); }
    forward_runner(const forward_runner&) = delete;
    forward_runner& operator=(const forward_runner&) = delete;

    // Single-token evaluations run as one CUDA graph each (cuda_backend::graph_step) when on
    // and the backend is the CUDA one.
    void set_graph_steps(bool on) { graph_steps_ = on && cuda_ != nullptr; }

    // Evaluates tokens [0, n) at positions p0.. and returns the logits of every row (all) or of
    // the last row; none when neither is wanted.
    std::vector<float> eval(const int32_t* tokens, int64_t n, int64_t p0, bool all,
                            bool last = true) {
        graph::chunk_request req;
        req.p0 = p0;
        req.n = n;
        req.tokens = tokens;
        req.logits_all = all;
        req.logits_last = !all && last;
        std::vector<float> logits;
        if (all || last) logits.resize(static_cast<size_t>((all ? n : 1) * m_.hp().n_vocab));
        req.logits = logits.empty() ? nullptr : logits.data();
        if (graph_steps_ && n == 1) {
            cuda_->graph_step(p0, [&] { fwd_.run(req, cache_, ar_, nullptr); });
        } else {
            fwd_.run(req, cache_, ar_, nullptr);
        }
        be_.synchronize();
        return logits;
    }

    kv::cache& cache() { return cache_; }
    size_t arena_bytes() const { return arena_bytes_; }

  private:
    const model& m_;
    backend::backend& be_;
    kv::cache cache_;
    graph::forward fwd_;
    backend::cuda_backend* cuda_ = nullptr;
    bool graph_steps_ = false;
    void* arena_buf_ = nullptr;
    size_t arena_bytes_ = 0;
    arena ar_;
};

}  // namespace magnetar::cuda_tools
