// `magnetar run`: one-shot generation from a prompt (rendered as a chat turn, or raw), from
// token ids, or one of the diagnostics of protocol §7.2 (--dump-tokens, --dump-logprobs,
// --perplexity-file). docs/cli.md describes every flag and output format.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/generation.h"
#include "cli/log.h"
#include "cli/run_diagnostics.h"
#include "cli/token_file.h"
#include "cli/tokenizer_source.h"
#include "magnetar/engine.h"

namespace magnetar::cli {

namespace {

struct args {
    common_flags f;
    std::string prompt;
    CLI::Option* prompt_opt = nullptr;
    std::string prompt_file;
    std::string tokens;
    bool raw = false;
    bool dump_tokens = false;
    std::string dump_logprobs;
    int logprobs_top_k = 20;
    std::string perplexity_file;
};

// ---------------------------------------------------------------------------------------------
// --tokens: greedy ids from token ids (the benchmark-style mode kept from the first CLI)
// ---------------------------------------------------------------------------------------------

int run_tokens(const args& a) {
    using clock = std::chrono::steady_clock;
    const std::vector<int32_t> prompt = read_token_file(a.tokens);
    int64_t n_predict = a.f.n_opt->count() > 0 ? predict_limit(a.f.n_predict) : 32;
    sampling_params sp = a.f.sampling;
    if (a.f.temp_opt->count() == 0) sp.temperature = 0;  // greedy unless asked otherwise

    const auto engine = load_engine(a.f, /*need_tokenizer=*/false);
    session_options so;
    // -n -1 without --ctx: the CLI's default context.
    const int64_t want =
        n_predict > kDefaultCtx ? kDefaultCtx : static_cast<int64_t>(prompt.size()) + n_predict;
    so.n_ctx = a.f.ctx_opt->count() > 0 ? a.f.n_ctx : want;
    n_predict = std::min<int64_t>(n_predict, so.n_ctx - static_cast<int64_t>(prompt.size()));
    so.chunk_size = a.f.chunk;
    std::unique_ptr<Session> session;
    check(engine->create_session(so, &session));

    const auto t0 = clock::now();
    check(session->eval(prompt));
    const auto t1 = clock::now();
    sampler smp(sp, session->n_vocab());
    int64_t produced = 0;
    for (int64_t i = 0; i < n_predict; ++i) {
        const int32_t next = sp.temperature <= 0 ? session->argmax() : session->sample(smp);
        std::printf("%s%d", i ? " " : "", next);
        std::fflush(stdout);
        ++produced;
        if (i + 1 < n_predict) check(session->eval(std::span<const int32_t>(&next, 1)));
    }
    const auto t2 = clock::now();
    std::printf("\n");
    std::fflush(stdout);
    const double pre_s = std::chrono::duration<double>(t1 - t0).count();
    const double dec_s = std::chrono::duration<double>(t2 - t1).count();
    const int64_t decoded = produced > 0 ? produced - 1 : 0;
    note("prefill: %zu tokens in %.3f s (%.2f t/s)\n", prompt.size(), pre_s,
         pre_s > 0 ? static_cast<double>(prompt.size()) / pre_s : 0.0);
    note("decode:  %lld tokens in %.3f s (%.2f t/s)\n", static_cast<long long>(decoded), dec_s,
         dec_s > 0 ? static_cast<double>(decoded) / dec_s : 0.0);
    note("threads: %d\n", engine->info().n_threads);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Text prompts
// ---------------------------------------------------------------------------------------------

// Rendered-chat tokenization of the text as written, without loading the weights.
int dump_tokens(const args& a, const std::string& text) {
    tokenizer_source src;
    src.model = a.f.model;
    const auto tok = load_tokenizer(src);
    const std::vector<int32_t> ids = tok->encode_chat(text);
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
    out += "]\n";
    for (int32_t id : ids) {
        char head[32];
        std::snprintf(head, sizeof head, "%6d  ", id);
        out += head + tok->token_text(id) + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

// The prompt ids: one rendered chat turn, or (--raw) the text itself. Raw text that starts
// with the BOS literal is taken as a pre-rendered chat (control tokens recognised).
std::vector<int32_t> prompt_ids(const Engine& engine, const args& a, const std::string& text) {
    std::vector<int32_t> ids;
    if (a.raw) {
        const std::string bos = engine.token_bytes(engine.info().special.bos);
        check(engine.tokenize(text, text.starts_with(bos), &ids));
        return ids;
    }
    std::vector<chat_turn> turns;
    if (!a.f.system.empty()) turns.push_back({"system", a.f.system, ""});
    turns.push_back({"user", text, ""});
    const think_mode mode = effective_mode(a.f.mode, a.f.n_ctx, true);
    check(engine.tokenize(Engine::render_chat(turns, mode, static_cast<uint64_t>(a.f.n_ctx)), true,
                          &ids));
    return ids;
}

int run_text(const args& a) {
    const std::string text = a.prompt_opt->count() > 0 ? a.prompt : read_text_file(a.prompt_file);
    if (a.dump_tokens) return dump_tokens(a, text);

    const auto engine = load_engine(a.f);
    const std::vector<int32_t> prompt = prompt_ids(*engine, a, text);
    session_options so;
    so.n_ctx = a.f.n_ctx;
    so.chunk_size = a.f.chunk;
    so.mtp_logits = mtp_probe(a.f, *engine);
    so.drafts = a.f.engine.mtp_draft >= 2;
    std::unique_ptr<Session> session;
    check(engine->create_session(so, &session));

    const special_tokens& sp = engine->info().special;
    token_printer printer(*engine, stdout, color_output(a.f));
    printer.begin(!prompt.empty() && prompt.back() == sp.think);
    generation g;
    g.sampling = a.f.sampling;
    g.n_predict = predict_limit(a.f.n_predict);
    g.stop_at_eos = !a.f.ignore_eos;
    g.eos = sp.eos;
    g.progress = isatty(STDERR_FILENO) != 0;
    g.on_token = [&printer](int32_t id) { printer.push(id); };
    g.stops = a.f.stops;
    g.token_bytes = [&](int32_t id) { return engine->token_bytes(id); };
    g.on_partial = [&printer](int32_t id, size_t n) { printer.push_partial(id, n); };
    g.mtp_draft = a.f.engine.mtp_draft;
    g.mtp_margin = a.f.engine.mtp_margin;
    std::vector<logprob_step> steps;
    if (!a.dump_logprobs.empty()) {
        g.sampling.temperature = 0;  // the dump is a greedy continuation
        g.on_step = [&steps, &a](const Session& s, int64_t, int32_t chosen) {
            steps.push_back({chosen, s.top_logprobs(a.logprobs_top_k)});
        };
    }
    install_interrupt_handler();
    const status st = run_generation(*session, prompt, g);
    printer.end();
    check(st);
    if (!a.dump_logprobs.empty()) {
        std::ofstream f(a.dump_logprobs, std::ios::binary);
        f << logprobs_json(*engine, static_cast<int64_t>(prompt.size()), a.f.n_ctx,
                           a.logprobs_top_k, steps);
        if (!f) throw std::runtime_error(a.dump_logprobs + ": cannot write");
        note("wrote %zu steps to %s\n", steps.size(), a.dump_logprobs.c_str());
    }
    if (g.cancelled) note("interrupted\n");
    print_timing(g);
    return g.cancelled ? 130 : 0;
}

int run_perplexity(const args& a) {
    const std::string text = read_text_file(a.perplexity_file);
    const auto engine = load_engine(a.f);
    std::vector<int32_t> ids;
    check(engine->tokenize(text, false, &ids));
    install_interrupt_handler();
    const perplexity_result r =
        score_perplexity(*engine, ids, a.f.n_ctx, predict_limit(a.f.n_predict));
    std::printf("%s\n", perplexity_line(r).c_str());
    return 0;
}

int run(const args& a) {
    const int inputs = (a.prompt_opt->count() > 0 || !a.prompt_file.empty() ? 1 : 0) +
                       (!a.tokens.empty() ? 1 : 0) + (!a.perplexity_file.empty() ? 1 : 0);
    if (inputs != 1) {
        throw std::runtime_error(
            inputs == 0 ? "no input: give -p TEXT, --prompt-file FILE, --tokens IDS.json or "
                          "--perplexity-file FILE"
                        : "give only one of -p / --prompt-file, --tokens and --perplexity-file");
    }
    if (a.dump_tokens && a.prompt_opt->count() == 0 && a.prompt_file.empty()) {
        throw std::runtime_error("--dump-tokens needs -p TEXT or --prompt-file FILE");
    }
    if (!a.dump_logprobs.empty() && a.prompt_opt->count() == 0 && a.prompt_file.empty()) {
        throw std::runtime_error("--dump-logprobs needs -p TEXT or --prompt-file FILE");
    }
    if (!a.tokens.empty()) return run_tokens(a);
    if (!a.perplexity_file.empty()) return run_perplexity(a);
    return run_text(a);
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    a->prompt_opt = sub.add_option("-p,--prompt", a->prompt, "Prompt text (one user turn)");
    auto* file =
        sub.add_option("-f,--file,--prompt-file", a->prompt_file, "Read the prompt from a file")
            ->check(CLI::ExistingFile);
    a->prompt_opt->excludes(file);
    sub.add_flag("--raw", a->raw,
                 "Plain completion of the text: no chat template (text starting with the BOS "
                 "literal is taken as a rendered chat)");
    sub.add_option("--tokens", a->tokens,
                   "Prompt as a JSON array of token ids; prints the generated ids (greedy unless "
                   "--temp is given, no stop token, -n defaults to 32)")
        ->check(CLI::ExistingFile);
    add_common_flags(sub, a->f);
    sub.add_flag("--dump-tokens", a->dump_tokens,
                 "Print the prompt's token ids as written (rendered-chat tokenization, no "
                 "template) and exit");
    sub.add_option("--dump-logprobs", a->dump_logprobs,
                   "Write the greedy continuation's top log-probabilities as JSON to FILE");
    sub.add_option("--logprobs-top-k", a->logprobs_top_k, "Alternatives per step in the dump")
        ->capture_default_str()
        ->check(CLI::Range(1, 128));
    sub.add_option("--perplexity-file", a->perplexity_file,
                   "Score a plain-text file: teacher-forced NLL after 32 context tokens")
        ->check(CLI::ExistingFile);
    sub.footer(
        "Streams the reply on stdout (thinking dimmed on a terminal) and prints \"prefill: X "
        "t/s, generation: Y t/s\" on stderr. There is no --grammar / --json-schema: sampling "
        "is never constrained (serve's response_format and tools give structured replies). See "
        "docs/cli.md.");
    return [a]() { return run(*a); };
}

}  // namespace

MAGNETAR_COMMAND(run, "run", "Generate from a prompt (one chat turn), raw text or token ids",
                 setup);

}  // namespace magnetar::cli
