// Internal to src/engine: the per-architecture half of a session -- its cache and its forward
// pass -- behind one small interface, so that the scheduling in session.cpp (chunks at absolute
// positions, checkpoints, cancellation, sync, snapshots) is written once for DeepSeek V4
// (kv::cache + graph::forward) and DeepSeek V4.1 (kv::cache41 + graph::forward41).
//
// Owns: what differs between the two: running one chunk, emptying the timeline, the small-state
// copies, the byte counts, the session payload and the read_state names. Does not own: the
// positions, tokens, logits and checkpoints of the timeline (Session::impl).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "graph/forward.h"
#include "kv/kv_cache.h"
#include "magnetar/session.h"
#include "model/model.h"

namespace magnetar {

// Host copy of the small state (everything overwritten as tokens arrive) for checkpoints and
// for rolling back a cancelled chunk. Each architecture fills one of the two vectors.
struct small_copy {
    std::vector<float> floats;  // V4: kv::cache::save_small
    std::vector<uint8_t> raw;   // V4.1: kv::cache41::save_small
    uint64_t bytes() const { return floats.size() * sizeof(float) + raw.size(); }
};

class timeline_state {
  public:
    virtual ~timeline_state() = default;

    // Runs one chunk at positions req.p0 .. req.p0 + req.n - 1 (req.p0 is the session's
    // n_past). Throws magnetar::Error on input the model cannot take; the timeline then still
    // ends at req.p0.
    virtual graph::chunk_result run(const graph::chunk_request& req, arena& ar,
                                    graph::dump_sink* dump) = 0;
    // Scratch arena bytes for chunks of up to `chunk` tokens.
    virtual size_t arena_bytes(int64_t chunk, bool logits_all) = 0;
    // Empty timeline.
    virtual void clear() = 0;
    // The small state at position pos, and back to it (pos: the position it was saved at;
    // what the timeline holds after pos is forgotten).
    virtual void save_small(small_copy& out) const = 0;
    virtual void load_small(const small_copy& in, int64_t pos) = 0;
    // Whether chunks advance an MTP block (V4 models with one).
    virtual bool has_mtp() const = 0;
    // Fills the cache categories of session_memory (not scratch or checkpoints).
    virtual void memory(session_memory& m) const = 0;

    // Session payload (docs/engine.md: the V4 layout, or the V4.1 one of kv/payload41.h).
    virtual uint64_t payload_size(int64_t n_tokens) const = 0;
    // Throw magnetar::Error (sink failure; on read: any mismatch, the state then empty).
    virtual void write_payload(int64_t chunk, std::span<const int32_t> tokens,
                               std::span<const float> logits, const byte_sink& sink) const = 0;
    virtual void read_payload(const byte_source& source, uint64_t size,
                              std::vector<int32_t>* tokens, std::vector<float>* logits) = 0;

    // Session::read_state for this architecture; the caller holds the eval mutex.
    virtual status read_state(const std::string& name, int64_t n_past, std::vector<float>* data,
                              int64_t* width) const = 0;

    // Speculative decoding: whether draft() works (V4 with an MTP block; V4.1 sessions that
    // hold the DSpark rings), and the drafts from the state of the last evaluated position
    // (graph::forward::draft, graph::forward41::draft; the others throw magnetar::Error).
    virtual bool can_draft() const { return has_mtp(); }
    virtual int draft(const graph::draft_request& req, arena& ar);
    // Floats of one row of graph::chunk_request::hc_final.
    virtual int64_t hc_row_floats() const { return 0; }
    // Makes `row` (one hc_final row) the state the MTP block continues from.
    virtual void set_mtp_state(const float* row);
    // Whether a compressor lane of the held layers completes a block at a position in
    // [first, last]: rolling back over such a position needs the small state of before.
    virtual bool completes_block(int64_t first, int64_t last) const = 0;

    // The V4 cache, for the pipelined (MPI) paths, which run V4 models only, and for batched
    // decode steps (Engine::decode_batch); null for V4.1.
    virtual kv::cache* v4_cache() { return nullptr; }
};

// V4: layers [l0, l1) of the model (a pipeline stage, or the whole model), the MTP block when
// with_mtp.
std::unique_ptr<timeline_state> make_v4_timeline(const model& m, backend::backend& be,
                                                 int64_t n_ctx, bool with_mtp, uint32_t l0,
                                                 uint32_t l1);
// V4.1: the whole backbone, and the DSpark rings when with_dspark (a session that drafts).
std::unique_ptr<timeline_state> make_v41_timeline(const model& m, backend::backend& be,
                                                  int64_t n_ctx, bool with_dspark);

}  // namespace magnetar
