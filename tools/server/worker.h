// The inference worker: one thread that owns the live sessions (slots) and runs generation
// jobs on them, several at once.
//
// Owns: the bounded wait queue (FIFO), the slots (up to worker_options::parallel sessions
// within a KV memory budget, each keeping its state between requests) and the choice of a
// slot for each job (the one whose timeline the prompt extends, else an empty one, else the
// longest common prefix, least recently used on ties, saved to the disk cache before it is
// reused), each slot's KV reuse ladder (protocol §6.2: token prefix, then rendered-byte prefix
// with the control tokens in the same places and re-tokenization of the suffix only, then the
// session's checkpoints, then the disk cache), the schedule (every step evaluates one token of
// each generating job in one batched forward pass, Engine::decode_batch; a prompt is prefilled
// in pieces with those steps in between, so a long prompt does not stall running streams), and
// the counters behind /metrics. Each job's generation loop is a decode_stream
// (decode_stream.h). Does not own: HTTP, JSON, rendering (HTTP threads do those and hand over
// text and tokens; JSON never enters this file).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chat/dsml.h"
#include "chat/dsml_stream.h"
#include "chat/replay_map.h"
#include "chat/tool_id.h"
#include "kvstore/kv_store.h"
#include "magnetar/engine.h"
#include "magnetar/sampler.h"
#include "magnetar/session.h"
#include "server/prompt.h"

namespace magnetar::server {

enum class gen_kind {
    chat,        // reasoning / text / tool calls projected from the bytes
    completion,  // raw text deltas
};

enum class finish_reason { stop, length, tool_calls, error, cancelled };
const char* finish_reason_name(finish_reason f);

// What an HTTP thread hands to the worker.
struct gen_request {
    gen_kind kind = gen_kind::chat;
    prompt input;           // rendered text, trusted specials, tokens
    bool thinking = false;  // the prompt ends with <think>
    bool tools = false;     // tools offered: DSML detection, greedy syntax, tool stop
    chat::id_style id_style = chat::id_style::openai;
    sampling_params sampling;
    int64_t max_tokens = 0;  // > 0
    std::vector<std::string> stops;
    int top_logprobs = -1;  // < 0: no logprobs; 0: the chosen token's only
    // Test hook (off unless the server runs with --test-forced-output): the generated text is
    // this string's tokenization instead of sampled tokens; the rest of the loop is unchanged.
    std::optional<std::string> forced_output;
    // Directional steering scales of this request (x_magnetar_steering); none: the server's.
    std::optional<steering_scales> steering;
    // tool_choice "required" or a named tool: the visible reply (after </think> when thinking)
    // starts with these tokens, evaluated as if sampled, and the model goes on from inside
    // the tool-call block. Needs `tools`. No speculative decoding for such a request.
    std::optional<chat::forced_call_start> forced_call;
};

struct token_info {
    int32_t id = -1;
    double logprob = 0.0;
    std::vector<token_logprob> top;
};

struct gen_usage {
    int64_t prompt_tokens = 0;      // P: tokens synchronised into the session for this request
    int64_t cached_tokens = 0;      // R: tokens reused
    int64_t completion_tokens = 0;  // C: generated tokens (EOS excluded)
    int64_t reasoning_tokens = 0;   // of C: tokens sampled before </think> closed (included)
    // Speculative decoding (--mtp-draft >= 2): verify steps that drafted, drafts, drafts kept.
    int64_t spec_steps = 0;
    int64_t spec_drafted = 0;
    int64_t spec_kept = 0;
};

struct gen_result {
    finish_reason finish = finish_reason::stop;
    std::string error;                         // finish error: the message
    bool engine_failed_before_output = false;  // prefill failed: HTTP 500 if nothing sent yet
    bool out_of_memory = false;  // the job failed allocating: HTTP 503 (the server stays up)
    // The prompt as the session would hold it (re-tokenized after a reuse) does not fit the
    // context: usage.prompt_tokens has its length. HTTP 400 context_length_exceeded.
    bool context_overflow = false;
    std::string raw;  // generated text (cut at a stop sequence)
    // Chat kinds: the authoritative split (content, reasoning) and the calls with ids.
    std::string content;
    std::optional<std::string> reasoning;
    std::vector<chat::parsed_tool_call> calls;
    gen_usage usage;
    std::vector<token_info> logprobs;
    std::string cache_path;  // which rung of the reuse ladder hit ("memory-token", ...)
    double prefill_s = 0.0, decode_s = 0.0;
    double first_token_s = -1;  // the first generated token, seconds after the job was made
};

// A worker event, in order: any number of prefill / delta events, then the result.
struct gen_event {
    enum class type { prefill, delta } kind = type::delta;
    int64_t done = 0, total = 0;  // prefill progress (absolute positions)
    chat::stream_event delta;     // chat: dsml_stream events; completion: text deltas
};

// Shared by the HTTP thread that made it and the worker.
class job {
  public:
    explicit job(gen_request r) : req(std::move(r)) {}
    gen_request req;
    std::atomic<bool> cancel{false};
    const std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();

    void push(gen_event e);
    void finish(gen_result r);
    // Waits up to `timeout` for events; moves them into `out`. Returns true once the result is
    // available (and all events were taken).
    bool wait(std::chrono::milliseconds timeout, std::vector<gen_event>* out);
    gen_result& result() { return *result_; }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<gen_event> events_;
    std::optional<gen_result> result_;
};

// Disk KV cache knobs (protocol §6.8, same defaults; docs/kvcache.md).
struct disk_cache_options {
    std::string dir;                      // empty: no disk cache
    uint64_t space_mb = 4096;             // --kv-disk-space-mb
    int64_t min_tokens = 512;             // --kv-cache-min-tokens
    int64_t cold_max_tokens = 30000;      // --kv-cache-cold-max-tokens (0: no cold saves)
    int64_t continued_interval = 10000;   // --kv-cache-continued-interval-tokens (0: off)
    int64_t boundary_trim = 32;           // --kv-cache-boundary-trim-tokens
    int64_t boundary_align = 2048;        // --kv-cache-boundary-align-tokens (0: off)
    bool reject_different_quant = false;  // --kv-cache-reject-different-quant
    bool log = true;                      // the store's notes on stderr (saves, loads, evictions)
};

// Length of a cold save for an n-token prompt (protocol §6.6 store_len).
int64_t cold_store_len(const disk_cache_options& o, int64_t n);
// Spacing of continued saves: the interval rounded up to the alignment.
int64_t continued_step(const disk_cache_options& o);

struct worker_options {
    int64_t n_ctx = 32768;  // of each slot's session
    // Live sessions (slots): jobs on different slots run at the same time, their decode steps
    // batched. Slots are created as jobs need them, while their cache bytes stay within
    // kv_budget_bytes (0: no budget beyond `parallel`); the first one at start.
    int parallel = 1;
    uint64_t kv_budget_bytes = 0;
    // Prompt tokens a job prefills between two decode steps of the other running jobs.
    int64_t prefill_piece = 256;
    size_t queue_size = 64;    // jobs waiting (the running one not counted)
    bool exact_replay = true;  // remember sampled DSML by tool id
    size_t replay_max_ids = 100000;
    disk_cache_options disk;
    // Test hook: called at the start of every job, before the prompt is synchronised (it may
    // throw, as an allocation deep in the engine would).
    std::function<void()> before_job;
    // Speculative decoding with the MTP block (Session::eval_speculative): up to mtp_draft
    // tokens a step when >= 2, for greedy and sampled requests alike (docs/server.md).
    int mtp_draft = 0;
    float mtp_margin = 0.0f;
};

// A latency histogram for /metrics (Prometheus buckets, seconds): lock-free observations.
struct latency_histogram {
    static constexpr double kBounds[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
    static constexpr size_t kBuckets = sizeof(kBounds) / sizeof(kBounds[0]);
    std::atomic<uint64_t> counts[kBuckets + 1] = {};  // per bucket (not cumulative); last: +Inf
    std::atomic<uint64_t> sum_us{0};
    void observe(double seconds);
};

// Monotonic counters for /metrics.
struct worker_stats {
    std::atomic<uint64_t> jobs{0};
    std::atomic<uint64_t> jobs_cancelled{0};
    std::atomic<uint64_t> jobs_failed{0};
    std::atomic<uint64_t> prompt_tokens{0};
    std::atomic<uint64_t> cached_tokens{0};
    std::atomic<uint64_t> prefill_tokens{0};  // evaluated for prompts
    std::atomic<uint64_t> generated_tokens{0};
    std::atomic<uint64_t> cache_hits{0};  // jobs with cached_tokens > 0
    std::atomic<uint64_t> cache_misses{0};
    std::atomic<uint64_t> prefill_us{0};
    std::atomic<uint64_t> decode_us{0};
    std::atomic<uint64_t> queue_rejected{0};
    std::atomic<int64_t> busy{0};
    std::atomic<uint64_t> disk_hits{0};
    std::atomic<uint64_t> disk_saves{0};
    std::atomic<uint64_t> disk_loaded_tokens{0};
    std::atomic<uint64_t> spec_steps{0};
    std::atomic<uint64_t> spec_drafted{0};
    std::atomic<uint64_t> spec_kept{0};
    // Per job: submission to the first generated token (jobs that generated one), and
    // submission to the end.
    latency_histogram time_to_first_token;
    latency_histogram job_duration;
    std::atomic<uint64_t> batched_steps{0};   // decode steps shared by two or more jobs
    std::atomic<uint64_t> batched_tokens{0};  // tokens those steps evaluated
};

// One slot's gauges after its latest job: positions held, its context, the bytes of its cache
// state and checkpoints, and whether a job runs on it now.
struct slot_gauges {
    int64_t context_tokens = 0;
    int64_t context_size = 0;
    uint64_t kv_bytes = 0;
    bool busy = false;
};

class worker {
  public:
    worker(const Engine& engine, const worker_options& opts);
    ~worker();
    worker(const worker&) = delete;
    worker& operator=(const worker&) = delete;

    enum class submit_result { ok, queue_full, stopping };
    submit_result submit(std::shared_ptr<job> j);
    // Stops accepting, cancels the running jobs, finishes queued ones as cancelled, joins.
    void stop();

    size_t queue_depth() const;
    std::vector<slot_gauges> slots() const;
    // The token list the latest request's prompt was synchronised to (reused tokens included):
    // what the model saw before generating. For tests of the reuse ladder.
    std::vector<int32_t> last_prompt_tokens() const;
    const worker_stats& stats() const { return stats_; }
    chat::replay_map& replay() { return replay_; }
    const worker_options& options() const { return opts_; }
    int64_t n_ctx() const { return opts_.n_ctx; }

  private:
    struct slot {
        std::unique_ptr<Session> session;
        int64_t disk_last_saved = 0;  // continued-save schedule
        uint64_t last_used = 0;       // job counter when its latest job started
        bool busy = false;
        slot_gauges gauges;
    };
    struct active;  // a job on its slot (worker.cpp)

    void loop();
    // Moves waiting jobs onto free slots (FIFO); finishes cancelled ones.
    void admit();
    slot* choose_slot(const gen_request& r);
    std::unique_ptr<slot> make_slot();
    // The prompt of a newly admitted job, then its decode stream; decode steps of the other
    // jobs run between the pieces of its prefill.
    void start(active& a);
    // One decode step of every generating job (skip: the job whose prompt is being prefilled).
    void decode_round(const active* skip);
    void complete(active& a);
    // Ends a job whose engine work threw (its session starts over empty).
    void fail(active& a, const std::exception& e, bool before_output);
    // Brings the slot's session to the request's prompt; fills eff / usage / cache path.
    status sync_prompt(active& a);
    // Session::sync in pieces of prefill_piece tokens with decode rounds in between.
    status sync_pieces(active& a, std::span<const int32_t> toks, sync_result* sr);
    // Disk cache steps of the ladder: evict-save of a slot's session, longest-prefix load,
    // cold and continued saves while syncing.
    void disk_save_live(slot& sl, kvstore::save_reason why);
    bool disk_load(slot& sl, const prompt& in, std::vector<int32_t>* eff, gen_result* res);
    status sync_with_saves(active& a, std::span<const int32_t> eff, bool cold, sync_result* sr);
    void disk_save_current(slot& sl, kvstore::save_reason why);
    // The disk cache, when the slot runs under the server's steering scales (the store's
    // identity includes them; requests with their own scales bypass it).
    kvstore::store* disk(const slot& sl) const;
    // Switches the slot's session to the request's steering scales (saving it to the disk
    // cache first, and forgetting its timeline, when they differ).
    status apply_steering(slot& sl, const gen_request& r);
    void update_gauges(slot& sl);

    const Engine& engine_;
    const tokenizer& tok_;
    worker_options opts_;
    chat::replay_map replay_;
    worker_stats stats_;
    std::unique_ptr<kvstore::store> disk_;
    std::vector<std::unique_ptr<slot>> slots_;  // worker thread only (gauges under mu_)
    std::vector<std::unique_ptr<active>> active_;
    uint64_t slot_bytes_ = 0;  // one slot's cache bytes (the budget's unit)
    uint64_t jobs_started_ = 0;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<job>> queue_;
    std::vector<int32_t> last_prompt_;  // guarded by mu_
    bool stopping_ = false;
    std::atomic<bool> abort_{false};
    std::thread thread_;
};

}  // namespace magnetar::server
