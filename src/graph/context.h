// Internal to src/graph: the state one chunk's sub-layer functions share, and their
// declarations. Not used outside the forward pass.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "backend/backend.h"
#include "core/arena.h"
#include "graph/forward.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace magnetar::graph {

// Tensor over a bound weight's bytes (an empty tensor for an absent optional weight).
tensor weight_tensor(const weight& w);

// Hands t [n, width] (F32, or I32 written as floats) to the dump sink under `name` when wanted.
void tap_rows(backend::backend& be, dump_sink* dump, const std::string& name, int64_t p0,
              const tensor& t);

// One sequence's rows of a pass: rows [row0, row0 + n) at positions p0 .. p0 + n - 1, whose
// layer states are `cache`'s, steered by `steer` (null: not steered). A chunk is one sequence;
// a batched decode step (forward::run_batch) is several sequences of one row each. Row-wise
// ops run over all rows at once; position-dependent ones (RoPE, compressors, the indexer,
// attention, the raw ring) run per sequence.
struct seq_rows {
    int64_t row0 = 0;
    int64_t n = 0;
    int64_t p0 = 0;
    kv::cache* cache = nullptr;
    const steering* steer = nullptr;
};

struct chunk_ctx {
    chunk_ctx(backend::backend& b, const hparams& h, arena& a) : be(b), hp(h), ar(a) {}

    backend::backend& be;
    const hparams& hp;
    arena& ar;
    int64_t p0 = 0;                  // position of row 0
    int64_t n = 0;                   // rows
    tensor ids;                      // [n] I32 token ids of the rows
    std::span<const seq_rows> seqs;  // the sequences the rows belong to (in row order)
    dump_sink* dump = nullptr;
    std::string prefix;  // "blk.3." or "mtp." (set per layer while dumping)

    // Hands t [n, width] to the dump sink when prefix + what is wanted.
    void tap(const tensor& t, const char* what) const;
};

backend::rope_params rope_for(const hparams& hp, uint32_t ratio);
backend::hc_params hc_for(const hparams& hp);

// One transformer block over the layer states il of c's sequences (il == n_layer: the MTP
// block, never steered): x [n, n_hc*D] is updated in place; t is scratch of the same shape.
void layer(const chunk_ctx& c, const layer_weights& lw, uint32_t il, const tensor& x,
           const tensor& t);

// Attention sub-layer (spec §5.3): input the normed sub-layer input [n, D], output [n, D].
// Updates each sequence's raw ring, compressed rows and compressor frontiers of layer il.
tensor attention(const chunk_ctx& c, const layer_weights& lw, uint32_t il, const tensor& x);

// MoE FFN sub-layer (spec §5.5): input [n, D], output routed + shared [n, D].
tensor ffn(const chunk_ctx& c, const layer_weights& lw, const tensor& x);

}  // namespace magnetar::graph
