// Per-session attention state of a DeepSeek V4.1 model (spec v41.md §5.4): for every block
// (backbone layers and DSpark stages) its window ring of packed FP8 rows; for every KV source
// its compressed-row cache and index-key cache, both packed (§5.4 canonical rows: 288 B and
// 68 B at the released shape, so 890 B of global KV per token), and for ratio >= 2 sources the
// pending rows of an incomplete group; the Engram history of compressed token ids; and the
// shared attention runtime.
//
// Owns: the layout of that state (one backend buffer), clearing it, the byte counts the session
// reports, and the small-state copy used for checkpoints. Does not own what is written (the
// backend's V4.1 ops, driven by graph/forward41).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/hparams.h"

namespace magnetar::kv {

// A layer's state. Rows are I8 byte rows of the canonical packed formats.
struct layer41_state {
    uint32_t ratio = 0;
    tensor ring;  // [W, Dh + Dh/32] window rows, row = position mod W
    // KV sources only:
    tensor comp_rows;  // [n_ctx / r, Dh/2 + Dh/16] main compressed KV entries
    tensor idx_rows;   // [n_ctx / r, DI/2 + DI/32] index keys
    tensor state_a;    // [r, Dh] F32 pending compressor rows (ratio >= 2), slot = pos mod r
    tensor state_b;    // [r, Dh] F32 (gate scores; -inf when empty)
};

// The shared attention runtime of spec v41.md §3.7, one per session (never a process global:
// two sessions never see each other's slots). The per-call lists live in the forward pass's
// scratch; what persists across calls is only the official-compatible index-key slot (§9.2).
struct attention_runtime {
    // Official-compatible mode (§9.2): the last KV source that published index keys, -1: none.
    int32_t published_index_k = -1;
};

struct usage41 {
    uint64_t global_bytes = 0;          // compressed rows + index keys (capacity for n_ctx tokens)
    uint64_t window_bytes = 0;          // window rings, DSpark stages included
    uint64_t pending_bytes = 0;         // compressor pending rows (FP32)
    uint64_t engram_bytes = 0;          // Engram history (host)
    double global_bytes_per_token = 0;  // growth of the global KV per token (§5.4)
};

class cache41 {
  public:
    // Throws magnetar::Error when the buffer cannot be allocated.
    cache41(backend::backend& be, const hparams& hp, int64_t n_ctx, bool with_dspark);
    // Bytes such a cache allocates: its backend buffer plus the Engram history reserved on the
    // host, for sizing a session before allocating it. Throws magnetar::Error on overflow.
    static uint64_t buffer_bytes(const hparams& hp, int64_t n_ctx, bool with_dspark);
    ~cache41();
    cache41(const cache41&) = delete;
    cache41& operator=(const cache41&) = delete;

    // Empty timeline: rows zeroed, pending scores -inf, history cleared, runtime reset.
    void clear();
    // The same empty timeline without touching the packed compressed rows and index keys (the
    // cost no longer grows with n_ctx): rings zeroed, pending rows emptied (values 0, scores
    // -inf), history cleared, runtime slot reset. Safe because nothing reads a packed row the
    // current timeline has not written: entry j of a source is read (attention through a
    // top-k list, the indexer scoring visible keys) only by a query at q with
    // j < floor((q+1)/r), and the source writes entry j once position j*r + r - 1 has been
    // evaluated, before any layer of that chunk reads it (in the official-compatible mode of
    // §9.2 too: the slot, reset here, only names a source that published in this timeline,
    // whose written keys cover the rows read). A ring slot is read only for the
    // positions max(0, q-W+1) .. p0-1 of earlier chunks (a draft: the min(W, last+1) slots
    // written), and the r pending slots of a group are all written before the group pools.
    void clear_small();

    int64_t n_ctx() const { return n_ctx_; }
    uint32_t n_blocks() const { return static_cast<uint32_t>(layers_.size()); }
    // Backbone layer il < n_layer, or DSpark stage n_layer + s.
    layer41_state& layer(uint32_t il) { return layers_[il]; }
    const layer41_state& layer(uint32_t il) const { return layers_[il]; }
    // Compressed token id of every evaluated position (-1 marks a dead, image-span token).
    std::vector<int64_t>& engram_history() { return engram_history_; }
    attention_runtime& runtime() { return runtime_; }
    const usage41& bytes() const { return usage_; }

    // The small state (rings, pending rows, runtime slot): everything overwritten as tokens
    // arrive. The packed rows and the history are append-only by position.
    void save_small(std::vector<uint8_t>& out) const;
    void load_small(const std::vector<uint8_t>& in);

  private:
    backend::backend& be_;
    int64_t n_ctx_;
    void* buffer_ = nullptr;
    std::vector<layer41_state> layers_;
    std::vector<int64_t> engram_history_;
    attention_runtime runtime_;
    usage41 usage_;
    std::vector<tensor> small_;
    uint64_t small_bytes_ = 0;
};

// Bytes of global KV (compressed rows + index keys) one token adds (spec v41.md §5.4): the sum
// over KV sources of (main row + index key row) / ratio. 890 at the released shape.
double global_kv_bytes_per_token(const hparams& hp);

}  // namespace magnetar::kv
