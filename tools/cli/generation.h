// Text generation shared by `magnetar run` and `magnetar chat`: the common flags (model,
// context, threads, sampling, system prompt, thinking mode), the SIGINT flag, the streaming
// token printer (UTF-8 hold-back, dimmed thinking on a terminal) and the sync + sample loop
// with its prefill progress bar and timing.
//
// Owns only front-end behaviour; everything it does goes through include/magnetar (Engine,
// Session, sampler). Does not own the chat transcript (cmd_chat.cpp) or the diagnostics of
// `run` (run_diagnostics.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/engine_flags.h"
#include "magnetar/engine.h"
#include "magnetar/sampler.h"
#include "magnetar/session.h"
#include "tokenizer/byte_level.h"

namespace magnetar::cli {

// ---------------------------------------------------------------------------------------------
// Flags
// ---------------------------------------------------------------------------------------------

// Default context of run / chat (ds4's CLI default).
inline constexpr int64_t kDefaultCtx = 32768;
inline constexpr const char* kDefaultSystem = "You are a helpful assistant";

struct common_flags {
    std::string model;
    int64_t n_ctx = kDefaultCtx;
    int64_t chunk = 2048;  // -b: prefill chunk (tokens per forward pass)
    int threads = 0;
    int64_t n_predict = 50000;  // -1: until EOS or the context is full (predict_limit)
    bool ignore_eos = false;
    std::vector<std::string> stops;  // --stop, repeatable
    std::string color = "auto";      // --color: auto (a terminal, NO_COLOR unset), always, never
    sampling_params sampling;        // protocol §4.1 CLI defaults
    std::string system = kDefaultSystem;
    think_mode mode = think_mode::on;
    CLI::Option* temp_opt = nullptr;
    CLI::Option* ctx_opt = nullptr;
    CLI::Option* n_opt = nullptr;
    engine_flags engine;
};

// -m, -c/--ctx/--ctx-size, -b/--batch-size, -t, -n, --temp, --top-k, --top-p, --min-p, --seed,
// --ignore-eos,
// --system (-sys), --think / --think-max / --nothink, and the engine, MTP and steering flags.
void add_common_flags(CLI::App& sub, common_flags& f);
// The sampling flags (--temp, --top-k, --top-p, --min-p, --seed, the penalties) into `p`, with
// their ranges; shared by run, chat and serve. Returns the --temp option.
CLI::Option* add_sampling_flags(CLI::App& sub, sampling_params& p, const char* seed_help);

// Whether the reply is written for a terminal (dimmed thinking, hidden think tokens): --color
// always, or auto when stdout is a terminal and NO_COLOR is unset or empty.
bool color_output(const common_flags& f);

// The token limit of -n: the value, or no limit for -1.
int64_t predict_limit(int64_t n);

// Throws std::runtime_error with the status message when not ok.
void check(const status& st);

// Whole file as bytes; throws std::runtime_error naming the file.
std::string read_text_file(const std::string& path);

// The engine of -m (or the default model). need_tokenizer: refuse a file without
// tokenizer.ggml.* keys (text prompts); token-id modes pass false.
std::unique_ptr<Engine> load_engine(const common_flags& f, bool need_tokenizer = true);

// Checks --mtp-draft against the loaded model (an MTP block, a DeepSeek V4 model; throws
// std::runtime_error otherwise) and returns whether the session needs MTP logits (draft 1).
bool mtp_probe(const common_flags& f, const Engine& engine);

// Think Max needs this much allocated context (protocol §2.1); below it the CLI warns and
// uses normal thinking.
inline constexpr int64_t kThinkMaxMinCtx = 393216;
// The mode actually rendered for a context, with the CLI's warning when Think Max degrades.
think_mode effective_mode(think_mode requested, int64_t n_ctx, bool warn);

// ---------------------------------------------------------------------------------------------
// SIGINT: a flag that generation loops poll
// ---------------------------------------------------------------------------------------------

// Installs a SIGINT handler that only sets the flag (no SA_RESTART). Idempotent.
void install_interrupt_handler();
bool interrupted();
void clear_interrupt();

// ---------------------------------------------------------------------------------------------
// Streaming output
// ---------------------------------------------------------------------------------------------

// Writes generated tokens to `out` as they come. Partial UTF-8 sequences are held back until
// complete. On a terminal (`tty`) reasoning is dimmed (ESC[90m), the <think> / </think> tokens
// are hidden and </think> ends the line; elsewhere every token's bytes are written verbatim,
// so the output equals Engine::detokenize of the generated ids.
class token_printer {
  public:
    token_printer(const Engine& engine, FILE* out, bool tty);
    // Starts a reply; `thinking` when the prompt ended by opening <think>.
    void begin(bool thinking);
    void push(int32_t id);
    // The first n_bytes of a token's text, as content or reasoning (the text before a stop).
    void push_partial(int32_t id, size_t n_bytes);
    // Flushes held-back bytes, resets the colour and ends the line if the reply left it open.
    void end();

    // Bytes of the reply so far, split at </think> (think tokens excluded).
    const std::string& reasoning() const { return reasoning_; }
    const std::string& content() const { return content_; }

  private:
    // A text token's bytes (or their start) into the reply and the terminal.
    void push_text(const std::string& bytes);
    void write(const std::string& s);

    const Engine& engine_;
    FILE* out_;
    bool tty_;
    bool thinking_ = false;
    bool dim_ = false;
    bool at_line_start_ = true;
    int32_t think_ = -1;
    int32_t think_end_ = -1;
    byte_level::utf8_stream utf8_;
    std::string reasoning_;
    std::string content_;
};

// ---------------------------------------------------------------------------------------------
// Sync + sample loop
// ---------------------------------------------------------------------------------------------

struct generation {
    // Inputs.
    sampling_params sampling;
    int64_t n_predict = 0;  // capped at free context - 1
    int32_t eos = -1;       // Engine::info().special.eos
    bool stop_at_eos = true;
    bool progress = false;  // prefill bar on stderr (the caller checks for a terminal)
    // MTP (engine_flags::mtp_draft): 1 compares each MTP draft with the token then chosen (the
    // session needs session_options::mtp_logits); N >= 2 speculates up to N tokens a step
    // (Session::eval_speculative; not with on_step, which needs every step's logits).
    int mtp_draft = 0;
    float mtp_margin = 0.0f;
    // Called with the session holding the logits of each step and the token chosen from them,
    // before that token is evaluated (EOS included, as the last step).
    std::function<void(const Session& s, int64_t step, int32_t chosen)> on_step;
    std::function<void(int32_t id)> on_token;  // every generated token except a stopping EOS
    // Stop sequences (--stop): generation ends where the generated bytes (think tokens' text
    // included) first contain one. Tokens reach on_token only once no stop can begin in them;
    // the token a stop begins in goes to on_partial with the bytes before the stop (maybe 0).
    std::vector<std::string> stops;
    std::function<std::string(int32_t id)> token_bytes;  // needed with stops
    std::function<void(int32_t id, size_t n_bytes)> on_partial;

    // Outputs.
    std::vector<int32_t> tokens;  // generated, without the stopping EOS
    bool hit_eos = false;
    bool hit_stop = false;   // a stop sequence ended the reply
    bool cancelled = false;  // SIGINT during prefill or generation
    int64_t prefilled = 0;   // tokens evaluated by the sync
    double prefill_s = 0;
    double decode_s = 0;
    uint64_t seed = 0;  // seed of the sampler used
    // Speculation: verify steps, drafts made and kept, steps that replayed the kept tokens;
    // with mtp_draft 1, drafts compared and how many matched the chosen token.
    struct speculation_counts {
        int64_t steps = 0;
        int64_t drafted = 0;
        int64_t kept = 0;
        int64_t replays = 0;
        int64_t probed = 0;
        int64_t matched = 0;
    } spec;
};

// The hold-back of generation::stops, alone: push() takes each generated token and hands on
// the ones no stop can still begin in; finish() hands on the rest.
class stop_filter {
  public:
    stop_filter(std::vector<std::string> stops, std::function<std::string(int32_t)> token_bytes,
                std::function<void(int32_t)> on_token,
                std::function<void(int32_t, size_t)> on_partial);
    // False when a stop matched: the tokens before it went out, the one it begins in to
    // on_partial, and the filter is empty.
    bool push(int32_t id);
    void finish();

  private:
    std::vector<std::string> stops_;
    size_t max_stop_ = 0;
    std::function<std::string(int32_t)> bytes_;
    std::function<void(int32_t)> on_token_;
    std::function<void(int32_t, size_t)> on_partial_;
    std::vector<std::pair<int32_t, size_t>> pending_;  // id, its byte length
    std::string raw_;                                  // the pending tokens' bytes
};

// Brings `s` to `prompt` (only the new suffix is evaluated), then samples. Returns the
// engine's status; an interrupt is not an error (g.cancelled). A prompt that does not leave
// room for one token is status_code::context_full.
status run_generation(Session& s, std::span<const int32_t> prompt, generation& g);

// "prefill: X t/s, generation: Y t/s (P prefilled, G generated)" on stderr, then with MTP
// "mtp: ..." (drafts kept, mean tokens per step; or the draft agreement of mtp_draft 1).
void print_timing(const generation& g);

}  // namespace magnetar::cli
