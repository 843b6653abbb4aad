// Internal to src/engine: the engine's and the session's private state.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/arena.h"
#include "dist/pipeline.h"
#include "engine/timeline_state.h"
#include "graph/forward.h"
#include "magnetar/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/trusted_specials.h"

namespace magnetar {

struct Engine::impl {
    std::unique_ptr<model> m;
    std::unique_ptr<backend::backend> be;
    std::unique_ptr<tokenizer> vocab;        // null when the file has no tokenizer.ggml.* keys
    std::unique_ptr<special_literals> lits;  // of vocab (tokenize_chat's injection guard)
    model_info info;
    // Rank 0 of an MPI job: the other stages (null in a single process).
    std::unique_ptr<dist::pipeline> pipe;
    int64_t pipe_chunk = 0;
    // One evaluation at a time on the shared backend.
    mutable std::mutex eval_mutex;
    // Directional steering: the directions on the backend (one buffer, [n_layer] of [D]; an
    // empty tensor for a layer without one). Sessions copy them with their own scales.
    void* steer_buffer = nullptr;
    std::vector<tensor> steer_dirs;
    // Engine::decode_batch: the scratch of a batched step (grown to the largest batch) and the
    // host rows of its logits.
    void* batch_buffer = nullptr;
    size_t batch_bytes = 0;
    arena batch_ar;
    std::vector<float> batch_logits;      // [rows, n_vocab]
    std::vector<float> batch_mtp_logits;  // [rows, n_vocab]

    impl() = default;
    impl(const impl&) = delete;
    impl& operator=(const impl&) = delete;
    ~impl();
};

// Directional steering (src/engine/steering.cpp): the engine's file checked and placed at load
// (a status naming the problem), and a new session's copy of the directions and scales.
status load_steering(const engine_options& opts, Engine::impl& p);
void init_session_steering(const Engine::impl& eng, Session::impl& s);

// Forwards wanted names to the session's dump_fn.
class name_dump_sink final : public graph::dump_sink {
  public:
    std::vector<std::string> patterns;
    dump_fn fn;
    bool wants(const std::string& name) const override;
    void rows(const std::string& name, int64_t first_pos, int64_t n_rows, int64_t width,
              const float* data) override;
};

struct Session::impl {
    const Engine::impl* eng = nullptr;
    session_options opts;
    // The model's cache and forward pass (V4 or V4.1, by the model's architecture).
    std::unique_ptr<timeline_state> tl;
    graph::steering steer;  // the engine's directions with this timeline's scales
    void* arena_buffer = nullptr;
    size_t arena_bytes = 0;
    arena ar;
    int64_t n_past = 0;

    std::vector<float> logits;  // [n_logit_rows, n_vocab]
    int64_t n_logit_rows = 0;
    std::vector<float> mtp_logits;  // [n_mtp_rows, n_vocab]
    int64_t mtp_first_pos = 0;
    int64_t n_mtp_rows = 0;

    name_dump_sink sink;

    std::vector<int32_t> tokens;  // the timeline [n_past]

    // Host copy of the small state at `pos` with the logits row of position pos - 1.
    struct checkpoint {
        int64_t pos = 0;
        small_copy small;
        std::vector<float> logits;
    };
    std::deque<checkpoint> checkpoints;  // ascending positions
    small_copy rollback;                 // small state before a cancellable chunk

    // Runs tokens as chunks ending at absolute multiples of chunk_size (and of the checkpoint
    // interval), taking the automatic checkpoints. Caller holds the eval mutex.
    status eval_locked(std::span<const int32_t> toks, const eval_options& o);
    // Session::eval_speculative under the eval mutex (src/engine/speculative.cpp).
    status speculate_locked(int32_t token, const speculation_options& so,
                            const token_chooser& choose, speculation_result& r);
    std::vector<float> spec_logits;  // [1 + drafts, n_vocab] rows of a speculative batch
    std::vector<float> spec_hc;      // [1 + drafts, n_hc*D] their final HC states
    std::vector<float> draft_row;    // [n_vocab] the MTP logits of one draft step
    small_copy spec_backup;          // small state before a step that may need a replay
    // eval_locked() of a pipelined session: rank 0's layers here, the rest on the other ranks.
    status eval_pipelined(std::span<const int32_t> toks, const eval_options& o);

    // Pipelined sessions: the id on the other ranks, and where the logits are. Without
    // all_logits the next-token row stays on the last stage (remote_logits) until logits() is
    // asked for; argmax comes with every answer.
    int32_t dist_id = -1;
    bool remote_logits = false;
    bool logits_fetched = false;
    int32_t remote_argmax = 0;
    // The prefill chunk a snapshot records: the session's own, before the pipeline's cut, so
    // a pipelined run writes the bytes of a single process.
    int64_t payload_chunk = 0;
    std::vector<float> hc;  // rank 0's output state of one chunk [chunk, n_hc*D]
    void fetch_logits();
    // The V4 cache of a pipelined session (pipelines run V4 models only).
    kv::cache& v4() const { return *tl->v4_cache(); }
    void take_checkpoint();
    void restore_checkpoint(const checkpoint& cp);
    std::span<const float> last_logits() const;

    ~impl();
};

}  // namespace magnetar
