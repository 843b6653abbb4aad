// Memory estimates of a model's session state (spec model.md §8.2): the growing compressed
// caches, the fixed raw windows and the FP32 compressor frontiers.
#pragma once

#include <cstdint>

#include "model/hparams.h"

namespace magnetar {

struct kv_memory {
    uint64_t growing_bytes = 0;     // compressed main rows + indexer rows at ctx tokens
    uint64_t raw_window_bytes = 0;  // min(n_swa, ctx) rows per layer (+ the MTP block's window)
    uint64_t frontier_bytes = 0;    // compressor state_kv + state_score, FP32
    uint64_t total() const { return growing_bytes + raw_window_bytes + frontier_bytes; }
};

// Session state for ctx tokens with cache elements of elem_bytes bytes (4 for FP32 caches,
// 2 for F16 / BF16). with_mtp adds the MTP block's raw window.
kv_memory estimate_kv_memory(const hparams& hp, uint64_t ctx, uint32_t elem_bytes = 4,
                             bool with_mtp = false);

// Average growing bytes per token (the slope of growing_bytes), for reports.
double kv_bytes_per_token(const hparams& hp, uint32_t elem_bytes = 4);

}  // namespace magnetar
