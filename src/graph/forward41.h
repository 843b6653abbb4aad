// The DeepSeek V4.1 forward pass (spec v41.md §3), written once against the backend op
// interface: Engram, single-pass mHC, the attention core with CSA2 (Full / Reindex / Reuse
// layers sharing work through the session's attention runtime), the V4.1 MoE and the F32 head.
//
// Owns: the order of ops for one chunk, where each bf16 rounding and QDQ of the reference graph
// happens, and the per-call lists of the shared attention runtime (top-k of the latest index
// source, the candidate blocks of the candidate source). Does not own: arithmetic (the
// backend), cache layout (kv/cache41) or the scheduling of chunks (the caller).
//
// A chunk is n tokens at positions p0 .. p0 + n - 1 of one sequence. Every query uses the
// decode layout of §5.2 and every selection the tie rule of §5.3, so decode, prefill and
// chunked prefill (any split, pairs included) give the same bits.
//
// A chunk allocates nothing on the heap once the host buffers below have grown to the largest
// chunk seen: device scratch comes from the arena, the Engram constants are computed once per
// forward41, and the backend's V4.1 ops work in their reserved per-thread scratch.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "graph/forward.h"
#include "kv/cache41.h"
#include "model/engram_hash.h"
#include "model/model.h"

namespace magnetar::graph {

// Discrete decisions taken from elsewhere (a test oracle): for "blk.{il}.topk" (index top-k,
// [positions, K], -1 padded) and "blk.{il}.moe_sel" (routed experts, [positions, k]) the rows of
// every position replace the engine's own choice; the MoE weights are then computed from the
// engine's scores for the given experts. `differs` counts, per name, the positions whose own
// choice was a different set. For comparisons with an implementation whose float summation
// order differs: a 1-ulp difference upstream can flip a near-tie of the bf16 scores, after
// which two correct implementations follow different paths.
struct forced_decisions {
    std::map<std::string, std::vector<int32_t>> rows;
    std::map<std::string, int64_t> width;
    mutable std::map<std::string, int64_t> differs;
};

struct chunk41_options {
    // Official-compatible index keys (spec v41.md §9.2): a key owner publishes its index keys
    // only when it emits a latent, and index sources read the latest published cache. Off: every
    // index source reads its own KV group's keys (the intended model, the default).
    bool official_index_k = false;
    const forced_decisions* forced = nullptr;  // tests only
};

// One DSpark draft step (spec v41.md §3.10) at temperature 0.
struct draft41 {
    std::vector<int32_t> tokens;    // [a, d_0 .. d_{B_d-1}]
    std::vector<float> logits;      // [B_d, V] fp32 (base + Markov bias)
    std::vector<float> confidence;  // [B_d] raw confidence logits (no sigmoid)
};

class forward41 {
  public:
    // Computes the Engram constants from the (validated) configuration and mapped weights.
    forward41(const model& m, backend::backend& be);

    // Runs one chunk, updating `cache`. req.tokens are host ids; logits rows as requested
    // (logits_all / logits_last). Scratch comes from `ar` (reset at the start). When the cache
    // holds DSpark stages, their rings are fed from the chunk's taps (§3.10).
    chunk_result run(const chunk_request& req, kv::cache41& cache, arena& ar, dump_sink* dump,
                     const chunk41_options& opts = {}) const;

    // A DSpark draft after backbone position last_pos (positions 0..last_pos evaluated in
    // `cache`, which must hold the DSpark rings: cache41(..., with_dspark = true)) with the
    // main model's token at last_pos + 1. Reads the rings, writes nothing to the cache.
    draft41 draft(int64_t last_pos, int32_t token, kv::cache41& cache, arena& ar,
                  dump_sink* dump = nullptr) const;

  private:
    const model& m_;
    backend::backend& be_;
    // Engram (§3.9), computed once: each Engram layer's hashing constants, and its gate
    // weights wq_i = f32(bf16(q_norm_i)) * f32(bf16(k_norm_i)) ([n_eng][n_hc, D], flat).
    std::vector<engram::layer_hash> engram_layers_;
    std::vector<float> engram_wq_;
    // Host scratch of the Engram lookup, grown to the largest chunk seen (never shrunk): the
    // hashed row ids [n, n_eng, C] and the same as int32 table rows, layer-major
    // [n_eng][n, C]. Because of it, run() and draft() are not reentrant on one object (a
    // session runs one chunk at a time).
    mutable std::vector<int64_t> engram_idx_;
    mutable std::vector<int32_t> engram_rows_;
};

// Per-thread backend scratch a V4.1 session of n_ctx tokens needs (backend::reserve).
backend::limits forward41_limits(const hparams& hp, int64_t n_ctx);

// Scratch bytes one chunk of n tokens needs (a measuring pass over a null backend), with the
// DSpark rings fed and room for a draft step when dspark.
size_t forward41_scratch_bytes(const model& m, int64_t n_ctx, int64_t n_chunk, bool logits_all,
                               bool dspark = false);

}  // namespace magnetar::graph
