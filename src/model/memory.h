// Memory estimates of a model's session state (spec model.md §8.2): the growing compressed
// caches, the fixed raw windows and the FP32 compressor frontiers. For V4.1 (spec v41.md §5.4)
// the caches are the packed rows: main KV entries of Dh/2 + Dh/16 bytes (E2M1 codes + E4M3
// scales per 16) and index-key entries of DI/2 + DI/32 bytes (E2M1 + UE8M0 per 32) at the KV
// sources only, window rows of Dh + Dh/32 bytes (E4M3 + UE8M0 per 32) per layer and DSpark
// stage, and the r = 2 compressors' pending (a, b) FP32 rows.
#pragma once

#include <cstdint>

#include "model/hparams.h"

namespace magnetar {

struct kv_memory {
    uint64_t growing_bytes = 0;     // compressed main rows + indexer rows at ctx tokens
    uint64_t raw_window_bytes = 0;  // min(n_swa, ctx) rows per layer (+ the MTP block's window)
    uint64_t frontier_bytes = 0;    // compressor state_kv + state_score, FP32
    // Saturates at UINT64_MAX, as every field does (ctx is the caller's).
    uint64_t total() const;
};

// Session state for ctx tokens with cache elements of elem_bytes bytes (4 for FP32 caches,
// 2 for F16 / BF16). with_mtp adds the MTP block's raw window (V4.1: the DSpark stages'
// windows). For V4.1 the packed row formats apply and elem_bytes is ignored.
kv_memory estimate_kv_memory(const hparams& hp, uint64_t ctx, uint32_t elem_bytes = 4,
                             bool with_mtp = false);

// Average growing bytes per token (the slope of growing_bytes), for reports. For V4.1 this is
// v41_kv_bytes_per_token(hp).total() and elem_bytes is ignored.
double kv_bytes_per_token(const hparams& hp, uint32_t elem_bytes = 4);

// V4.1 per-token growth of the global caches (spec v41.md §5.4): entries per token = sum over
// the KV sources of 1/r; 890 B/token at the released shape (2.5 entries x (288 + 68) B).
struct v41_kv_per_token {
    uint32_t main_entry_bytes = 0;   // Dh/2 + Dh/16 (288 for Dh = 512)
    uint32_t index_entry_bytes = 0;  // DI/2 + DI/32 (68 for DI = 128)
    double entries = 0;              // sum over KV sources of 1 / ratio
    double main_bytes() const { return entries * main_entry_bytes; }
    double index_bytes() const { return entries * index_entry_bytes; }
    double total() const { return main_bytes() + index_bytes(); }
};
v41_kv_per_token v41_kv_bytes_per_token(const hparams& hp);

}  // namespace magnetar
