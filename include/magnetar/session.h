// A session: one token timeline of an engine, with its cache state and its latest logits.
//
// eval() appends tokens at positions n_past() ... and runs the forward pass over them: a batch
// is prefilled in chunks of session_options::chunk_size tokens, a single token is a decode
// step. Every way of cutting a sequence into eval() calls and chunks gives the same logits bit
// for bit (same thread count), because each token's arithmetic never depends on its batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "magnetar/status.h"

namespace magnetar {

struct session_options {
    int64_t n_ctx = 4096;       // most tokens the timeline can hold
    int64_t chunk_size = 2048;  // prefill batch size
    bool all_logits = false;    // keep the logits of every position of an eval (else the last)
    bool mtp_logits = false;    // compute the MTP block's draft logits (models with MTP)
};

// Bytes of cache state the session holds (spec model.md §8.2 categories).
struct session_memory {
    int64_t n_ctx = 0;
    uint64_t growing_bytes = 0;     // compressed and indexer rows for n_ctx tokens
    uint64_t raw_window_bytes = 0;  // sliding-window rings (MTP ring included)
    uint64_t frontier_bytes = 0;    // compressor frontiers
    uint64_t scratch_bytes = 0;     // forward-pass scratch arena
    // Growing bytes per token of context (growing_bytes / n_ctx when n_ctx is a multiple of 128).
    double kv_bytes_per_token() const {
        return n_ctx > 0 ? static_cast<double>(growing_bytes) / static_cast<double>(n_ctx) : 0.0;
    }
};

// Diagnostic tap on named intermediates (docs/reference.md "Named intermediates"): called with
// the rows of `name` for positions first_pos ... first_pos + n_rows - 1, each `width` floats
// (indices are converted to float).
using dump_fn = std::function<void(const std::string& name, int64_t first_pos, int64_t n_rows,
                                   int64_t width, const float* data)>;

class Session {
  public:
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Evaluates tokens at positions n_past() .. n_past() + size - 1.
    status eval(std::span<const int32_t> tokens);
    // Forgets the timeline (n_past back to 0).
    void reset();

    int64_t n_past() const;
    int64_t n_ctx() const;
    uint32_t n_vocab() const;

    // Logits of the last evaluated position [n_vocab].
    std::span<const float> logits() const;
    // With all_logits: logits of the i-th token of the last eval() call.
    std::span<const float> logits_at(int64_t i) const;
    int64_t n_logit_rows() const;

    // With mtp_logits: draft rows computed by the last eval(). Row j is the draft for the token
    // at position mtp_first_pos() + j + 2, from the main state at mtp_first_pos() + j and the
    // embedding of the token after it (spec §12.4).
    int64_t mtp_first_pos() const;
    int64_t n_mtp_rows() const;
    std::span<const float> mtp_logits_at(int64_t j) const;

    session_memory memory() const;

    // Names to tap (exact, or with '*' wildcards; empty: none) and the receiver.
    void set_dump(std::vector<std::string> names, dump_fn fn);
    // Final cache contents by name: blk.{il}.comp_rows [floor(n_past/ratio), hd] and
    // blk.{il}.index_rows [floor(n_past/4), Id].
    status read_state(const std::string& name, std::vector<float>* data, int64_t* width) const;

    struct impl;

  private:
    friend class Engine;
    explicit Session(std::unique_ptr<impl> p);
    std::unique_ptr<impl> impl_;
};

}  // namespace magnetar
