// Per-session attention cache state (spec model.md §8.1): for every layer the raw
// sliding-window ring, and for compressed layers the compressed rows, the compressor frontier
// and (ratio 4) the indexer rows and the indexer compressor frontier; plus the MTP block's raw
// ring and the HC state that feeds the MTP block its next position.
//
// Owns: the layout of that state in one backend buffer, clearing it, and the byte counts the
// session reports. Storage is FP32 (spec §12.1): rows are stored exactly as computed after their
// model-defined FP8 / FP4 round trips. Does not own: what is written (the backend's kv_store and
// compressor ops) or positions (the session's n_past; row counts follow from it:
// floor(n_past / ratio)).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/hparams.h"

namespace magnetar::kv {

struct layer_state {
    uint32_t ratio = 0;
    tensor raw;         // [raw_cap, hd] ring, row = position mod raw_cap
    tensor comp_rows;   // [n_ctx / ratio, hd] main compressed rows (ratio != 0)
    tensor comp_kv;     // [coff*ratio, coff*hd] main compressor frontier: values
    tensor comp_score;  // [coff*ratio, coff*hd] and scores (with the positional bias)
    tensor idx_rows;    // [n_ctx / 4, Id] indexer rows (ratio 4)
    tensor idx_kv;      // [8, 2*Id] indexer compressor frontier
    tensor idx_score;   // [8, 2*Id]
};

// Bytes held, by the categories of spec §8.2 (model/memory.h computes the same from hparams).
struct usage {
    uint64_t growing_bytes = 0;     // compressed + indexer rows (capacity for n_ctx tokens)
    uint64_t raw_window_bytes = 0;  // raw rings, MTP ring included
    uint64_t frontier_bytes = 0;    // compressor frontiers (FP32)
    uint64_t mtp_state_bytes = 0;   // the HC state carried to the MTP block
};

class cache {
  public:
    // Allocates everything for n_ctx tokens in one backend buffer and clears it. A pipeline
    // stage (src/dist) holds only the layers [layer_begin, layer_end): the others get an empty
    // layer_state (null tensors) and take no memory; the MTP block belongs to the last stage.
    // Throws magnetar::Error when the buffer cannot be allocated.
    cache(backend::backend& be, const hparams& hp, int64_t n_ctx, bool with_mtp,
          uint32_t layer_begin = 0, uint32_t layer_end = UINT32_MAX);
    // Bytes of the buffer such a cache allocates (the same layout on a measuring arena), for
    // sizing a session before allocating it. Throws magnetar::Error if the size overflows.
    static uint64_t buffer_bytes(const hparams& hp, int64_t n_ctx, bool with_mtp,
                                 uint32_t layer_begin = 0, uint32_t layer_end = UINT32_MAX);
    ~cache();
    cache(const cache&) = delete;
    cache& operator=(const cache&) = delete;

    // Empty timeline: rows zeroed, frontier scores -inf, values 0.
    void clear();
    // Empty timeline without touching the growing rows: they are append-only and only rows
    // below floor(n_past / ratio) are ever read, so stale rows past that are harmless.
    void clear_small();

    // The small state: everything overwritten as tokens arrive (raw rings, compressor
    // frontiers, the MTP HC state), in a fixed order. Together with the append-only growing
    // rows it is the whole timeline state, so a host copy of it taken at position p restores
    // position p as long as the rows below p have not been rewritten (they never are).
    uint64_t small_floats() const { return small_floats_; }
    void save_small(std::vector<float>& out) const;
    void load_small(const std::vector<float>& in);

    int64_t n_ctx() const { return n_ctx_; }
    // The layers held: [layer_begin(), layer_end()).
    uint32_t layer_begin() const { return layer_begin_; }
    uint32_t layer_end() const { return layer_end_; }
    // Layer il < n_layer, or the MTP block at il == n_layer.
    layer_state& layer(uint32_t il) { return layers_[il]; }
    bool has_mtp() const { return with_mtp_; }
    // [n_hc * D]: final HC state of the last evaluated position (input of the MTP block).
    const tensor& mtp_prev_hc() const { return mtp_prev_hc_; }
    const usage& bytes() const { return usage_; }

  private:
    backend::backend& be_;
    int64_t n_ctx_;
    bool with_mtp_;
    uint32_t layer_begin_;
    uint32_t layer_end_;
    void* buffer_ = nullptr;
    std::vector<layer_state> layers_;
    tensor mtp_prev_hc_;
    usage usage_;
    std::vector<tensor> small_;
    uint64_t small_floats_ = 0;
};

}  // namespace magnetar::kv
