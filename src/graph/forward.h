// The DeepSeek V4 forward pass, written once against the backend op interface.
//
// Owns: the order of ops for one chunk of tokens (embedding and HC expansion, each layer's
// attention and FFN sub-layers with their HC pre/post mixes, the output head, the MTP block),
// the names of the intermediates (`blk.3.attn_out`, `mtp.kv`, `result_norm`) and the scratch
// each step takes from the arena. Does not own: arithmetic (the backend), cache layout
// (src/kv) or scheduling of chunks (src/engine).
//
// A chunk is n tokens at positions p0 .. p0 + n - 1. Every op sees the whole chunk; per-token
// causality is carried by positions (raw window, compressed-row visibility), so the chunk size
// never changes a token's values.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace magnetar::graph {

// Receiver of named intermediates (diagnostics). The forward pass asks wants() first and only
// copies a tensor to the host for names that are wanted.
class dump_sink {
  public:
    virtual ~dump_sink() = default;
    virtual bool wants(const std::string& name) const = 0;
    virtual void rows(const std::string& name, int64_t first_pos, int64_t n_rows, int64_t width,
                      const float* data) = 0;
};

// Directional steering (docs/steering.md): after each main-model layer's attention and FFN
// sub-layer outputs y [n, D] (before the HC post-mix), y <- y - s * v * dot(v, y) with the
// layer's unit direction v and that sub-layer's scale s. The MTP block and the V4.1 DSpark
// stages are not steered.
struct steering {
    std::vector<tensor> directions;  // [n_layer] of [D] F32 on the backend (empty: not steered)
    float ffn = 0.0f;
    float attn = 0.0f;
    bool active() const { return !directions.empty() && (ffn != 0.0f || attn != 0.0f); }
};

struct chunk_request {
    int64_t p0 = 0;
    int64_t n = 0;
    const int32_t* tokens = nullptr;  // host ids of the chunk [n]
    // Head rows: all rows, or only the last one, or none.
    bool logits_all = false;
    bool logits_last = false;
    float* logits = nullptr;  // host [rows, n_vocab]
    // MTP block (models with MTP): advance its window over this chunk; its draft logits for
    // every MTP row when mtp_logits (host [n, n_vocab]; the number of rows is returned).
    bool mtp = false;
    bool mtp_logits = false;
    float* mtp_out = nullptr;
    // Polled before every layer; true stops the chunk (chunk_result::cancelled). The cache is
    // then partly updated: the caller rolls the small state back (kv::cache::save_small).
    const std::function<bool()>* cancel = nullptr;
    // Pipeline stage (src/dist): only layers [layer_begin, layer_end) run (layer_end is
    // clamped to n_layer). The first stage (layer_begin 0) embeds the tokens, a later one
    // starts from hc_in; the last stage (layer_end n_layer) runs the head and the MTP block,
    // an earlier one writes its final HC state to hc_out instead. The defaults are the whole
    // model. tokens are needed by the first stage and by the MTP block.
    uint32_t layer_begin = 0;
    uint32_t layer_end = UINT32_MAX;
    const float* hc_in = nullptr;  // host [n, n_hc*D]
    float* hc_out = nullptr;       // host [n, n_hc*D]
    // Last stage: the final HC state of every row (before the head), host [n, n_hc*D]; a
    // speculative step takes the MTP block's next input from the row it keeps.
    float* hc_final = nullptr;
    // Directional steering of the main layers (null or inactive: none).
    const steering* steer = nullptr;
};

// Greedy MTP drafting (spec §5.7 recursion, §12.4): step 0 feeds the MTP block the main
// model's final state at position p0 (the state the cache keeps for the next token) with the
// embedding of `token`; step k >= 1 feeds the block's own output state of step k - 1 with the
// embedding of draft k - 1, at position p0 + k. Each step's draft is its argmax (ties to the
// lower id); drafting stops after max_steps drafts, or before a draft whose top-1 minus top-2
// logit is below min_margin. The steps write the MTP block's raw ring at p0 .. p0 + k; the
// next chunk rewrites those rows from the main model's states.
// The first maximum of a logits row and its margin over the runner-up (the drafts' argmax and
// the confidence that draft_request::min_margin tests).
int32_t argmax_margin(const float* row, size_t n, float* margin);

struct draft_request {
    int64_t p0 = 0;
    int32_t token = 0;
    int max_steps = 0;
    float min_margin = 0.0f;
    int32_t* drafts = nullptr;  // host [max_steps]
    float* logits = nullptr;    // host [n_vocab] scratch (the latest step's MTP logits)
};

// One token of each of several sequences (sessions), evaluated as one pass: every weight is
// read once for all of them, and each row's values are those a one-token chunk of its own
// sequence gives, bit for bit (row-wise ops never depend on the number of rows).
struct batch_row {
    int64_t pos = 0;  // the token's position (its sequence's n_past)
    int32_t token = 0;
    kv::cache* cache = nullptr;  // the sequence's cache (all layers; distinct per row)
    const steering* steer = nullptr;
};

struct batch_request {
    std::span<const batch_row> rows;
    float* logits = nullptr;  // host [rows, n_vocab]: every row's next-token logits
    // Advance the MTP block of every row (models with one; each row's pos >= 1), and its
    // draft logits when mtp_logits (host mtp_out [rows, n_vocab]).
    bool mtp = false;
    bool mtp_logits = false;
    float* mtp_out = nullptr;
};

struct chunk_result {
    int64_t mtp_first_pos = 0;  // position of the first MTP row of this chunk
    int64_t mtp_rows = 0;
    bool cancelled = false;
};

// Per-thread backend scratch a session of n_ctx tokens needs (backend::reserve).
backend::limits scratch_limits(const hparams& hp, int64_t n_ctx);

// Scratch arena bytes for chunks of up to `chunk` tokens over layers [layer_begin, layer_end)
// with every optional output on: the forward pass run against a backend that executes nothing.
size_t measure_arena(const model& m, kv::cache& cache, int64_t chunk, uint32_t layer_begin,
                     uint32_t layer_end, bool mtp);
// Scratch arena bytes for a batch of `rows` sequences (forward::run_batch with MTP draft logits
// when mtp); `cache` stands in for every row's.
size_t measure_batch_arena(const model& m, kv::cache& cache, int64_t rows, bool mtp);

class forward {
  public:
    forward(const model& m, backend::backend& be) : m_(m), be_(be) {}

    // Runs one chunk, updating `cache`. Scratch comes from `ar` (reset at the start). Returns
    // what the MTP block produced.
    chunk_result run(const chunk_request& req, kv::cache& cache, arena& ar, dump_sink* dump) const;
    // Runs one token of each row (batch_request), updating each row's cache. Scratch comes
    // from `ar` (reset at the start).
    void run_batch(const batch_request& req, arena& ar) const;
    // Drafts with the MTP block (models with one); returns the number of drafts written.
    int draft(const draft_request& req, kv::cache& cache, arena& ar) const;

  private:
    const model& m_;
    backend::backend& be_;
};

}  // namespace magnetar::graph
