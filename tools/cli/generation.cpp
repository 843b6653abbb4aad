// Shared generation pieces of `magnetar run` and `magnetar chat` (see generation.h).
#include "cli/generation.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "cli/common.h"
#include "cli/log.h"
#include "core/progress.h"
#include "model/hparams.h"

namespace magnetar::cli {

// ---------------------------------------------------------------------------------------------
// Flags
// ---------------------------------------------------------------------------------------------

namespace {

// Sampling fractions: (0, 1] for top-p, [0, 1) for min-p, said in words when violated.
CLI::Validator open_closed_unit(const std::string& name) {
    return CLI::Validator(
        [name](std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (!end || *end != '\0' || v.empty()) return "\"" + v + "\" is not a number";
            if (!(x > 0 && x <= 1))
                return v + " is out of range; " + name + " must be above 0 and at most 1";
            return "";
        },
        "(0, 1]");
}

CLI::Validator closed_open_unit(const std::string& name) {
    return CLI::Validator(
        [name](std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (!end || *end != '\0' || v.empty()) return "\"" + v + "\" is not a number";
            if (!(x >= 0 && x < 1))
                return v + " is out of range; " + name + " must be at least 0 and below 1";
            return "";
        },
        "[0, 1)");
}

// A seed: -1 (fresh) or a decimal of the whole unsigned 64-bit range (printed seeds use it).
CLI::Validator seed_value() {
    return CLI::Validator(
        [](std::string& v) -> std::string {
            if (v == "-1") return "";
            const bool digits =
                !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
            errno = 0;
            if (digits) (void)std::strtoull(v.c_str(), nullptr, 10);
            if (!digits || errno == ERANGE) {
                return "\"" + v + "\" is not a seed: -1, or a number from 0 to " +
                       std::to_string(std::numeric_limits<uint64_t>::max());
            }
            return "";
        },
        "SEED");
}

}  // namespace

bool color_output(const common_flags& f) {
    if (f.color == "always") return true;
    if (f.color == "never") return false;
    const char* no = std::getenv("NO_COLOR");
    return isatty(STDOUT_FILENO) != 0 && !(no && *no);
}

int64_t predict_limit(int64_t n) {
    return n < 0 ? std::numeric_limits<int64_t>::max() : n;
}

CLI::Option* add_sampling_flags(CLI::App& sub, sampling_params& p, const char* seed_help) {
    auto* temp = sub.add_option("--temp", p.temperature, "Temperature (<= 0: greedy)")
                     ->capture_default_str()
                     ->check(CLI::Range(-1.0f, 100.0f));
    sub.add_option("--top-k", p.top_k, "Top-k (0: off; at most 1024)")
        ->capture_default_str()
        ->check(CLI::Range(0, k_sampling_max_top_k));
    sub.add_option("--top-p", p.top_p, "Top-p nucleus, in (0, 1] (1: off)")
        ->capture_default_str()
        ->check(open_closed_unit("--top-p"));
    sub.add_option("--min-p", p.min_p,
                   "Min-p, relative to the most likely token, in [0, 1) (0: off)")
        ->capture_default_str()
        ->check(closed_open_unit("--min-p"));
    sub.add_option_function<std::string>(
           "--seed",
           [&p](const std::string& v) {
               p.seed = v == "-1" ? 0 : std::strtoull(v.c_str(), nullptr, 10);
           },
           seed_help)
        ->check(seed_value());
    sub.add_option("--repeat-penalty", p.repeat_penalty,
                   "Divide a recent token's positive logit by this (multiply a negative one); "
                   "1: off")
        ->capture_default_str()
        ->check(CLI::Range(0.01f, 100.0f));
    sub.add_option("--repeat-last-n", p.penalty_last_n,
                   "Window of the penalties: the last N generated tokens; -1: the whole reply; "
                   "0: off")
        ->capture_default_str()
        ->check(CLI::Range(-1, std::numeric_limits<int32_t>::max()));
    sub.add_option("--presence-penalty", p.presence_penalty,
                   "Subtract this from the logit of every token in the window, in [-2, 2]")
        ->capture_default_str()
        ->check(CLI::Range(-2.0f, 2.0f));
    sub.add_option("--frequency-penalty", p.frequency_penalty,
                   "Subtract this times its count in the window from a token's logit, in [-2, 2]")
        ->capture_default_str()
        ->check(CLI::Range(-2.0f, 2.0f));
    return temp;
}

void add_common_flags(CLI::App& sub, common_flags& f) {
    sub.add_option(
        "-m,--model", f.model,
        std::string("Model GGUF (default: $MAGNETAR_MODEL or ") + kDefaultModelRelPath + ")");
    f.ctx_opt = sub.add_option("-c,--ctx,--ctx-size", f.n_ctx, "Context size in tokens")
                    ->capture_default_str()
                    ->check(CLI::Range(int64_t{16}, int64_t{1} << 30));
    sub.add_option("--chunk,-b,--batch-size", f.chunk,
                   "Prefill chunk: prompt tokens per forward pass")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    sub.add_option("-t,--threads", f.threads, "Threads (default: one per physical core)")
        ->check(CLI::PositiveNumber);
    add_engine_flags(sub, f.engine);
    add_mtp_flags(sub, f.engine);
    add_steering_flags(sub, f.engine);
    add_log_flags(sub);
    f.n_opt = sub.add_option("-n,--n-predict", f.n_predict,
                             "Most tokens to generate; -1: until EOS or the context is full "
                             "(always capped at the free context - 1)")
                  ->capture_default_str()
                  ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
    f.temp_opt = add_sampling_flags(sub, f.sampling,
                                    "Sampling seed, > 0 for reproducible runs; -1 or none: a fresh "
                                    "one, printed after the reply so that the run can be repeated");
    sub.add_option("--color", f.color,
                   "Dimmed thinking and hidden think tokens: auto (on a terminal unless NO_COLOR "
                   "is set), always, never")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "always", "never"}));
    sub.add_option("--stop", f.stops,
                   "End the reply where the generated text first contains this string (not "
                   "printed); repeatable")
        ->expected(1)
        ->take_all();
    sub.add_flag("--ignore-eos", f.ignore_eos,
                 "Keep generating past the end-of-sequence token (until -n or the context)");
    sub.add_option("--system", f.system, "System prompt; \"\" disables it (also spelled -sys)")
        ->capture_default_str();
    auto* think = sub.add_flag_callback(
        "--think", [&f] { f.mode = think_mode::on; }, "Thinking on (default)");
    auto* think_max = sub.add_flag_callback(
        "--think-max", [&f] { f.mode = think_mode::max; },
        "Think Max (needs --ctx >= 393216, else normal thinking with a warning)");
    auto* nothink = sub.add_flag_callback(
        "--nothink", [&f] { f.mode = think_mode::off; }, "Thinking off");
    think->excludes(think_max)->excludes(nothink);
    think_max->excludes(nothink);
}

void check(const status& st) {
    if (!st.ok()) throw std::runtime_error(st.message());
}

std::string read_text_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open");
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) throw std::runtime_error(path + ": read error");
    return ss.str();
}

std::unique_ptr<Engine> load_engine(const common_flags& f, bool need_tokenizer) {
    engine_options eo;
    eo.model_path = resolve_model_path(f.model);
    eo.n_threads = f.threads;
    apply_engine_flags(f.engine, eo);
    std::unique_ptr<Engine> engine;
    check(Engine::load(eo, &engine));
    report_engine(engine->info());
    const uint64_t trained = engine->info().n_ctx_train;
    // (A context beyond the engine's bound is refused with its own line when the session is
    // made: no warning before it.)
    if (f.ctx_opt && f.ctx_opt->count() > 0 && trained > 0 &&
        static_cast<uint64_t>(f.n_ctx) > trained &&
        static_cast<uint64_t>(f.n_ctx) <= hparam_limits::kMaxContext) {
        note(
            "magnetar: warning: --ctx %lld is above the %llu tokens the model was trained for; "
            "positions past that are extrapolated\n",
            static_cast<long long>(f.n_ctx), static_cast<unsigned long long>(trained));
    }
    if (need_tokenizer && !engine->info().has_tokenizer) {
        throw std::runtime_error(eo.model_path + ": the model has no tokenizer (tokenizer.ggml.*)");
    }
    return engine;
}

bool mtp_probe(const common_flags& f, const Engine& engine) {
    check_mtp_flags(f.engine, engine.info());
    return f.engine.mtp_draft == 1;
}

think_mode effective_mode(think_mode requested, int64_t n_ctx, bool warn) {
    if (requested == think_mode::max && n_ctx < kThinkMaxMinCtx) {
        if (warn) {
            note("magnetar: warning: Think Max needs --ctx >= %lld; using normal thinking\n",
                 static_cast<long long>(kThinkMaxMinCtx));
        }
        return think_mode::on;
    }
    return requested;
}

// ---------------------------------------------------------------------------------------------
// SIGINT
// ---------------------------------------------------------------------------------------------

namespace {

volatile sig_atomic_t g_interrupt = 0;

extern "C" void on_sigint(int) {
    g_interrupt = 1;
}

}  // namespace

void install_interrupt_handler() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns EINTR
    sigaction(SIGINT, &sa, nullptr);
}

bool interrupted() {
    return g_interrupt != 0;
}
void clear_interrupt() {
    g_interrupt = 0;
}

// ---------------------------------------------------------------------------------------------
// token_printer
// ---------------------------------------------------------------------------------------------

namespace {
constexpr const char* kDim = "\033[90m";
constexpr const char* kReset = "\033[0m";
}  // namespace

token_printer::token_printer(const Engine& engine, FILE* out, bool tty)
    : engine_(engine),
      out_(out),
      tty_(tty),
      think_(engine.info().special.think),
      think_end_(engine.info().special.think_end) {}

void token_printer::begin(bool thinking) {
    thinking_ = thinking;
    dim_ = false;
    at_line_start_ = true;
    utf8_ = byte_level::utf8_stream();
    reasoning_.clear();
    content_.clear();
}

void token_printer::write(const std::string& s) {
    if (s.empty()) return;
    if (tty_ && thinking_ && !dim_) {
        std::fputs(kDim, out_);
        dim_ = true;
    }
    std::fwrite(s.data(), 1, s.size(), out_);
    at_line_start_ = s.back() == '\n';
    std::fflush(out_);
}

void token_printer::push(int32_t id) {
    if (id == think_ || id == think_end_) {
        const bool opening = id == think_;
        if (tty_) {
            write(utf8_.flush());
            if (dim_) std::fputs(kReset, out_);
            dim_ = false;
            if (!opening && !at_line_start_) std::fputc('\n', out_);
            at_line_start_ = at_line_start_ || !opening;
            std::fflush(out_);
        } else {
            write(utf8_.push(engine_.token_bytes(id)));
        }
        thinking_ = opening;
        return;
    }
    push_text(engine_.token_bytes(id));
}

void token_printer::push_partial(int32_t id, size_t n_bytes) {
    if (id == think_ || id == think_end_ || n_bytes == 0) return;
    push_text(engine_.token_bytes(id).substr(0, n_bytes));
}

void token_printer::push_text(const std::string& bytes) {
    (thinking_ ? reasoning_ : content_) += bytes;
    write(utf8_.push(bytes));
}

void token_printer::end() {
    write(utf8_.flush());
    if (dim_) std::fputs(kReset, out_);
    dim_ = false;
    if (!at_line_start_) std::fputc('\n', out_);
    at_line_start_ = true;
    std::fflush(out_);
}

// ---------------------------------------------------------------------------------------------
// Sync + sample loop
// ---------------------------------------------------------------------------------------------

namespace {

// Where sync() will start evaluating: the end of the timeline when it is a prefix of `prompt`,
// else the latest checkpoint inside the common prefix, else 0 (for the progress bar only).
int64_t sync_start(const Session& s, std::span<const int32_t> prompt) {
    const int64_t common = s.common_prefix(prompt);
    if (common == s.n_past()) return common;
    int64_t start = 0;
    for (int64_t p : s.checkpoint_positions()) {
        if (p <= common) start = std::max(start, p);
    }
    return start;
}

}  // namespace

stop_filter::stop_filter(std::vector<std::string> stops,
                         std::function<std::string(int32_t)> token_bytes,
                         std::function<void(int32_t)> on_token,
                         std::function<void(int32_t, size_t)> on_partial)
    : stops_(std::move(stops)),
      bytes_(std::move(token_bytes)),
      on_token_(std::move(on_token)),
      on_partial_(std::move(on_partial)) {
    std::erase_if(stops_, [](const std::string& st) { return st.empty(); });
    for (const auto& st : stops_) max_stop_ = std::max(max_stop_, st.size());
}

bool stop_filter::push(int32_t id) {
    if (stops_.empty()) {
        if (on_token_) on_token_(id);
        return true;
    }
    const std::string b = bytes_(id);
    pending_.emplace_back(id, b.size());
    raw_ += b;
    // Only the new bytes can complete a match (the older ones were searched before).
    const size_t from =
        raw_.size() > b.size() + max_stop_ - 1 ? raw_.size() - b.size() - max_stop_ + 1 : 0;
    size_t best = std::string::npos;
    for (const auto& st : stops_) best = std::min(best, raw_.find(st, from));
    if (best != std::string::npos) {
        size_t at = 0;
        for (const auto& [tok, len] : pending_) {
            if (at + len <= best) {
                if (on_token_) on_token_(tok);
            } else {
                if (on_partial_) on_partial_(tok, best - at);
                break;
            }
            at += len;
        }
        pending_.clear();
        raw_.clear();
        return false;
    }
    // A token goes out once it ends before the last max_stop - 1 bytes: no stop begins in it.
    const size_t keep = max_stop_ - 1;
    size_t out = 0;
    size_t end = 0;
    while (out < pending_.size() && end + pending_[out].second + keep <= raw_.size()) {
        end += pending_[out].second;
        if (on_token_) on_token_(pending_[out].first);
        ++out;
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(out));
    raw_.erase(0, end);
    return true;
}

void stop_filter::finish() {
    for (const auto& p : pending_) {
        if (on_token_) on_token_(p.first);
    }
    pending_.clear();
    raw_.clear();
}

namespace {

// --verbose: the session and sampling settings this reply runs with.
void report_settings(const generation& g, int64_t n_ctx, int64_t n_prompt, int64_t reused,
                     int64_t n_gen) {
    if (!log_details()) return;
    detail(
        "magnetar: session: context %lld tokens, prompt %lld tokens (%lld reused from the "
        "cache), at most %lld to generate%s\n",
        static_cast<long long>(n_ctx), static_cast<long long>(n_prompt),
        static_cast<long long>(reused), static_cast<long long>(n_gen),
        g.stop_at_eos ? "" : " (past the end-of-sequence token)");
    const sampling_params& p = g.sampling;
    if (p.temperature <= 0) {
        detail("magnetar: sampling: greedy");
    } else {
        detail("magnetar: sampling: temperature %g, top-k %d, top-p %g, min-p %g, seed %llu",
               static_cast<double>(p.temperature), p.top_k, static_cast<double>(p.top_p),
               static_cast<double>(p.min_p), static_cast<unsigned long long>(g.seed));
    }
    if (has_penalties(p)) {
        const std::string window = p.penalty_last_n < 0
                                       ? std::string("every generated token")
                                       : "the last " + std::to_string(p.penalty_last_n) + " tokens";
        detail("; penalties: repeat %g, presence %g, frequency %g over %s",
               static_cast<double>(p.repeat_penalty), static_cast<double>(p.presence_penalty),
               static_cast<double>(p.frequency_penalty), window.c_str());
    }
    for (const std::string& stop : g.stops) detail("; stop \"%s\"", stop.c_str());
    detail("\n");
}

}  // namespace

status run_generation(Session& s, std::span<const int32_t> prompt, generation& g) {
    using clock = std::chrono::steady_clock;
    g.tokens.clear();
    g.hit_eos = g.hit_stop = g.cancelled = false;
    g.prefilled = 0;
    g.prefill_s = g.decode_s = 0;
    const int64_t n_ctx = s.n_ctx();
    const int64_t n_prompt = static_cast<int64_t>(prompt.size());
    if (n_prompt == 0) return {status_code::invalid_argument, "empty prompt"};
    if (n_prompt >= n_ctx) {
        return {status_code::context_full, "prompt exceeds context: " + std::to_string(n_prompt) +
                                               " tokens, context " + std::to_string(n_ctx) +
                                               " (raise --ctx)"};
    }

    // Prefill.
    const int64_t start = sync_start(s, prompt);
    std::unique_ptr<Progress> bar;
    eval_options eo;
    eo.cancel = [] { return interrupted(); };
    if (g.progress && log_notes() && n_prompt - start >= 64) {
        bar = std::make_unique<Progress>("prefill", static_cast<uint64_t>(n_prompt - start),
                                         Progress::Unit::tokens);
        eo.progress = [&bar, start](int64_t done, int64_t) {
            bar->update(static_cast<uint64_t>(std::max<int64_t>(0, done - start)));
        };
    }
    const auto t0 = clock::now();
    sync_result sr;
    const status st = s.sync(prompt, eo, &sr);
    const auto t1 = clock::now();
    if (bar) bar->finish();
    g.prefilled = sr.evaluated;
    g.prefill_s = std::chrono::duration<double>(t1 - t0).count();
    if (st.code() == status_code::cancelled || (st.ok() && interrupted())) {
        g.cancelled = true;
        return {};
    }
    if (!st.ok()) return st;

    // Generation.
    const int64_t n_gen = std::min<int64_t>(g.n_predict, n_ctx - n_prompt - 1);
    sampler smp(g.sampling, s.n_vocab());
    g.seed = smp.seed();
    report_settings(g, n_ctx, n_prompt, start, n_gen);
    g.spec = {};
    // Every chosen token enters the sampler's history (the penalties' window); a chooser's
    // tokens are exactly the step's kept drafts and its `next`, in order.
    const bool greedy = g.sampling.temperature <= 0 && !has_penalties(g.sampling);
    const token_chooser choose = [&smp, greedy](std::span<const float> row) {
        const int32_t c = greedy ? sampler::argmax(row) : smp.sample(row);
        smp.accept(c);
        return c;
    };
    stop_filter stops(g.stops, g.token_bytes, g.on_token, g.on_partial);
    const bool speculate = g.mtp_draft >= 2 && !g.on_step;
    speculation_options so;
    so.n_draft = g.mtp_draft - 1;
    so.min_margin = g.mtp_margin;
    if (g.stop_at_eos && g.eos >= 0) so.keep = [&g](int32_t t) { return t != g.eos; };
    const auto t2 = clock::now();
    status result;
    // Session::argmax / sample: a pipelined session answers them without fetching the logits.
    auto choose_here = [&] {
        const int32_t c = greedy ? s.argmax() : s.sample(smp);
        smp.accept(c);
        return c;
    };
    int32_t id = choose_here();
    // Emits `tok` as generated step `step`; false when generation ends with it.
    auto emit = [&](int64_t step, int32_t tok) {
        if (g.on_step) g.on_step(s, step, tok);
        if (g.stop_at_eos && tok == g.eos) {
            g.hit_eos = true;
            return false;
        }
        g.tokens.push_back(tok);
        if (!stops.push(tok)) {
            g.hit_stop = true;
            return false;
        }
        return true;
    };
    for (int64_t step = 0; step < n_gen;) {
        if (interrupted()) {
            g.cancelled = true;
            break;
        }
        if (!emit(step, id)) break;
        ++step;
        if (step >= n_gen) break;
        if (speculate) {
            so.max_keep = n_gen - step - 1;
            speculation_result sr;
            result = s.eval_speculative(id, so, choose, &sr);
            if (!result.ok()) break;
            if (!sr.drafts.empty()) {
                ++g.spec.steps;
                g.spec.drafted += static_cast<int64_t>(sr.drafts.size());
                g.spec.kept += sr.kept;
                g.spec.replays += sr.replayed ? 1 : 0;
            }
            bool more = true;
            for (int64_t j = 0; j < sr.kept && more; ++j) {
                more = emit(step, sr.drafts[static_cast<size_t>(j)]);
                if (more) ++step;
            }
            if (!more) break;
            id = sr.next;
            continue;
        }
        result = s.eval(std::span<const int32_t>(&id, 1));
        if (!result.ok()) break;
        const int32_t prev_draft = g.mtp_draft == 1 && s.n_mtp_rows() > 0
                                       ? sampler::argmax(s.mtp_logits_at(s.n_mtp_rows() - 1))
                                       : -1;
        id = choose_here();
        if (prev_draft >= 0) {
            ++g.spec.probed;
            g.spec.matched += prev_draft == id ? 1 : 0;
        }
    }
    stops.finish();
    g.decode_s = std::chrono::duration<double>(clock::now() - t2).count();
    return result;
}

void print_timing(const generation& g) {
    const double pre = g.prefill_s > 0 ? static_cast<double>(g.prefilled) / g.prefill_s : 0.0;
    const double gen = g.decode_s > 0 ? static_cast<double>(g.tokens.size()) / g.decode_s : 0.0;
    note("prefill: %.2f t/s, generation: %.2f t/s (%lld prefilled, %zu generated)\n", pre, gen,
         static_cast<long long>(g.prefilled), g.tokens.size());
    if (g.sampling.temperature > 0 && !g.tokens.empty()) {
        note("seed: %llu (--seed %llu repeats this reply)\n",
             static_cast<unsigned long long>(g.seed), static_cast<unsigned long long>(g.seed));
    }
    if (g.spec.steps > 0) {
        note(
            "mtp: %lld of %lld drafts kept (%.1f %%), %.2f tokens per verify step, "
            "%lld replays\n",
            static_cast<long long>(g.spec.kept), static_cast<long long>(g.spec.drafted),
            100.0 * static_cast<double>(g.spec.kept) /
                static_cast<double>(std::max<int64_t>(1, g.spec.drafted)),
            static_cast<double>(g.spec.steps + g.spec.kept) / static_cast<double>(g.spec.steps),
            static_cast<long long>(g.spec.replays));
    } else if (g.spec.probed > 0) {
        note("mtp: %lld of %lld drafts matched the next token (%.1f %%)\n",
             static_cast<long long>(g.spec.matched), static_cast<long long>(g.spec.probed),
             100.0 * static_cast<double>(g.spec.matched) / static_cast<double>(g.spec.probed));
    }
    std::fflush(stderr);
}

}  // namespace magnetar::cli
