// A session: one token timeline of an engine, with its cache state and its latest logits.
//
// eval() appends tokens at positions n_past() ... and runs the forward pass over them: a batch
// is prefilled in chunks that end at absolute multiples of session_options::chunk_size, a single
// token is a decode step. Every way of cutting a sequence into eval() calls and chunks gives the
// same logits bit for bit (same thread count), because each token's arithmetic never depends on
// its batch.
//
// The timeline can move backwards only to a checkpoint: compressed cache rows are append-only,
// but the raw window and the compressor frontiers are overwritten as tokens arrive, so the
// session keeps host copies of those (a few MB per checkpoint on V4 Flash) at absolute multiples
// of checkpoint_interval. sync() uses them to reuse the longest usable prefix of a new token
// list; rewind() returns to one explicitly.
//
// Snapshots use the session payload of docs/engine.md (protocol §6.4.3 layout): the timeline's
// tokens, the next-token logits, the raw window in logical order, the compressed and indexer
// rows and the compressor frontiers. A restored session continues bit-identically.
//
// Sessions of DeepSeek V4.1 models behave the same way over their own state (packed rows,
// window rings, pending compressor rows, Engram history; docs/engine.md "DeepSeek V4.1
// sessions"); MTP logits and read_state are V4 only.
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "magnetar/sampler.h"
#include "magnetar/status.h"

namespace magnetar {

struct session_options {
    int64_t n_ctx = 4096;       // most tokens the timeline can hold
    int64_t chunk_size = 2048;  // prefill batch size (capped at n_ctx)
    bool all_logits = false;    // keep the logits of every position of an eval (else the last)
    bool mtp_logits = false;    // compute the MTP block's draft logits (models with MTP)
    // DeepSeek V4.1: hold the DSpark stages' rings so that eval_speculative can draft (V4
    // sessions always run their MTP block). A model without DSpark stages is refused.
    bool drafts = false;
    // In-memory checkpoints: one whenever the timeline reaches an absolute multiple of
    // checkpoint_interval tokens (0: none), the latest max_checkpoints kept.
    int64_t checkpoint_interval = 2048;
    int max_checkpoints = 8;
};

// Bytes of cache state the session holds (spec model.md §8.2 categories; for DeepSeek V4.1
// the categories of spec v41.md §5.4).
struct session_memory {
    int64_t n_ctx = 0;
    // Compressed and indexer rows for n_ctx tokens (V4.1: the global KV, packed compressed
    // rows and index keys).
    uint64_t growing_bytes = 0;
    uint64_t raw_window_bytes = 0;  // sliding-window rings (V4: MTP ring included)
    uint64_t frontier_bytes = 0;    // V4: compressor frontiers (0 for V4.1)
    uint64_t pending_bytes = 0;     // V4.1: pending rows of incomplete compressor groups (0 for V4)
    uint64_t history_bytes = 0;     // V4.1: Engram token history for n_ctx tokens (0 for V4)
    uint64_t scratch_bytes = 0;     // forward-pass scratch arena
    uint64_t checkpoint_bytes = 0;  // host copies held for rewind (current count)
    // Every cache category above (not scratch or checkpoints).
    uint64_t cache_bytes() const {
        return growing_bytes + raw_window_bytes + frontier_bytes + pending_bytes + history_bytes;
    }
    // Growing bytes per token of context (growing_bytes / n_ctx when n_ctx is a multiple of 128).
    double kv_bytes_per_token() const {
        return n_ctx > 0 ? static_cast<double>(growing_bytes) / static_cast<double>(n_ctx) : 0.0;
    }
};

// Prefill progress in absolute positions: called after every finished chunk with the new
// n_past and the position the call will reach.
using progress_fn = std::function<void(int64_t done, int64_t total)>;

struct eval_options {
    progress_fn progress;
    // Polled before every layer of a prefill chunk and before every token of a multi-call
    // decode; returning true stops the evaluation with status_code::cancelled. Finished chunks
    // stay evaluated, the interrupted chunk is rolled back: the session stays usable at the
    // n_past() it reports.
    std::function<bool()> cancel;
    // Single-token steps run as one device graph on backends that have graphs (CUDA; bit-
    // identical to launching op by op); false launches op by op. Dumps (set_dump) always run
    // op by op.
    bool graph_steps = true;
};

// Speculative decoding with the MTP block (DeepSeek V4 models that have one; docs/engine.md
// "Speculative decoding"). The chooser picks the model's token at one position from its logits
// there: greedy (argmax) or a sampler draw. Drafts are the MTP block's argmax, so keeping a
// draft exactly when the chooser picks it is the standard acceptance rule: the kept tokens
// follow the chooser's distribution, and a chooser that depends only on the logits row and its
// own state gives the tokens of one-at-a-time decoding.
using token_chooser = std::function<int32_t(std::span<const float> logits)>;

struct speculation_options {
    int n_draft = 1;  // most MTP drafts after the given token (0: a plain decode step)
    float min_margin =
        0.0f;  // drafting stops before a draft whose MTP top-1 - top-2 logit is below
    int64_t max_keep = INT64_MAX;  // most drafts kept (the caller's remaining token budget)
    // Called for each draft the chooser picked, in order: false ends the step before it (the
    // token becomes `next`, unevaluated: EOS, a stop sequence, the length limit). Null: keep.
    std::function<bool(int32_t token)> keep;
};

struct speculation_result {
    std::vector<int32_t> drafts;  // what the MTP block drafted after the token
    int64_t kept = 0;             // the timeline now ends with the token and drafts[0, kept)
    int32_t next = -1;            // the chooser's token after them (not evaluated yet)
    // The rejected drafts crossed a compressor block end (or were two or more): the session
    // went back to its state before the step and evaluated the kept tokens again.
    bool replayed = false;
};

// Directional steering scales of a timeline (engine_options::steering_file): after each layer's
// FFN / attention output y, y <- y - s * v * dot(v, y) with the layer's direction v.
struct steering_scales {
    float ffn = 0.0f;
    float attn = 0.0f;
    bool operator==(const steering_scales&) const = default;
};

// What sync() did.
struct sync_result {
    int64_t reused = 0;            // tokens of the new list that were not evaluated again
    int64_t evaluated = 0;         // tokens evaluated by this call
    bool from_checkpoint = false;  // the timeline went back to an in-memory checkpoint first
};

// Where a payload goes / comes from, in large pieces. A sink returns false on a write error;
// a source fills exactly n bytes or returns false.
using byte_sink = std::function<bool(const void* data, size_t n)>;
using byte_source = std::function<bool(void* data, size_t n)>;

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
    status eval(std::span<const int32_t> tokens, const eval_options& opts = {});
    // One speculative decode step: drafts up to so.n_draft tokens after `token` with the MTP
    // block, evaluates `token` and the drafts in one batch, keeps drafts while choose() of the
    // logits before each picks it (and so.keep agrees, and fewer than max_keep are kept), and
    // rolls the rest back. choose() is called once per kept draft plus once more, in
    // order; *out->next is its last answer. logits() are then those of the last kept position
    // (with all_logits: one row per evaluated token). Near n_ctx, a chunk end or a checkpoint
    // position fewer drafts are made. DeepSeek V4.1 sessions created with drafts draft one
    // DSpark block instead. V4 models without an MTP block, V4.1 sessions without drafts and
    // pipelined sessions answer status_code::unsupported.
    status eval_speculative(int32_t token, const speculation_options& so,
                            const token_chooser& choose, speculation_result* out);
    // Brings the timeline to exactly `tokens` (1 <= size <= n_ctx), evaluating as little as
    // possible: the suffix after the current timeline when it is a prefix of `tokens`, else
    // the suffix after the latest checkpoint inside the common prefix, else everything.
    status sync(std::span<const int32_t> tokens, const eval_options& opts = {},
                sync_result* result = nullptr);
    // Forgets the timeline and the checkpoints (n_past back to 0).
    void reset();

    // The evaluated tokens [n_past()].
    std::span<const int32_t> tokens() const;
    // Length of the common prefix of tokens() and `other`.
    int64_t common_prefix(std::span<const int32_t> other) const;

    // Records a checkpoint at n_past() now (beyond the automatic ones).
    status checkpoint();
    // Positions of the held checkpoints, ascending.
    std::vector<int64_t> checkpoint_positions() const;
    // Moves the timeline back to `pos`: n_past() itself, or the position of a held checkpoint.
    // Later checkpoints are dropped. Anything else is status_code::invalid_argument (the
    // compressed state cannot be rolled back elsewhere).
    status rewind(int64_t pos);

    // Session payload (docs/engine.md): exact size, then the bytes.
    uint64_t payload_size() const;
    status save_payload(std::vector<uint8_t>* out) const;
    status save_payload(const byte_sink& sink) const;
    // Replaces the timeline by a payload of `size` bytes. Rejected (status bad_payload, the
    // session then empty) when it was written by another model shape, does not fit this
    // session, or is truncated or inconsistent; never partially loaded.
    status load_payload(std::span<const uint8_t> bytes);
    status load_payload(const byte_source& source, uint64_t size);

    int64_t n_past() const;
    int64_t n_ctx() const;
    uint32_t n_vocab() const;

    // Logits of the last evaluated position [n_vocab].
    std::span<const float> logits() const;
    // With all_logits: logits of the i-th token of the last eval() call.
    std::span<const float> logits_at(int64_t i) const;
    int64_t n_logit_rows() const;

    // On logits(): the greedy token (first maximum), the k most likely tokens with their
    // log-probabilities (protocol §4.4), one token's log-probability, a draw from `s`.
    int32_t argmax() const;
    std::vector<token_logprob> top_logprobs(int k) const;
    double logprob_of(int32_t id) const;
    int32_t sample(sampler& s) const;
    // Same with per-token parameters (sampler::sample(logits, params)).
    int32_t sample(sampler& s, const sampling_params& params) const;

    // With mtp_logits (DeepSeek V4 models with an MTP block; V4.1 models have DSpark instead,
    // which sessions do not expose): draft rows computed by the last eval(). Row j is the draft for
    // the token at position mtp_first_pos() + j + 2, from the main state at mtp_first_pos() + j and
    // the embedding of the token after it (spec §12.4).
    int64_t mtp_first_pos() const;
    int64_t n_mtp_rows() const;
    std::span<const float> mtp_logits_at(int64_t j) const;

    session_memory memory() const;

    // Directional steering of the timeline: a new session has the engine's scales
    // (model_info::steering_ffn / steering_attn). Each must be finite and in [-100, 100], and
    // nonzero ones need an engine loaded with a steering file (else invalid_argument). The
    // cache state depends on the scales, so changing them forgets the timeline and the
    // checkpoints (n_past() back to 0); setting the current scales again changes nothing. A
    // payload does not record the scales: it continues under the loading session's.
    status set_steering(const steering_scales& s);
    steering_scales steering() const;

    // Names to tap (exact, or with '*' wildcards; empty: none) and the receiver.
    void set_dump(std::vector<std::string> names, dump_fn fn);
    // Final cache contents by name: blk.{il}.comp_rows [floor(n_past/ratio), hd] and
    // blk.{il}.index_rows [floor(n_past/4), Id]. DeepSeek V4 only (a V4.1 session answers
    // status_code::unsupported: its rows are packed FP8 / FP4 bytes).
    status read_state(const std::string& name, std::vector<float>* data, int64_t* width) const;

    struct impl;

  private:
    friend class Engine;
    explicit Session(std::unique_ptr<impl> p);
    std::unique_ptr<impl> impl_;
};

}  // namespace magnetar
