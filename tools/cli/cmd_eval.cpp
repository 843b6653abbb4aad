// `magnetar eval`: runs question sets (docs/eval.md) through one session and grades the
// replies: a fixed system prompt, thinking on or off, a token budget per question with soft and
// hard closing of the thinking block, the context sized to the longest question plus the budget,
// a split-screen terminal UI or plain lines, a trace file, and a report (text and JSON).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "cli/eval_view.h"
#include "cli/generation.h"
#include "core/format.h"
#include "core/paths.h"
#include "eval/questions.h"
#include "magnetar/engine.h"
#include "magnetar/sampler.h"
#include "magnetar/session.h"

namespace magnetar::cli {

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kEvalSystem =
    "You are solving a benchmark question. Think it through, then end your reply with the line "
    "\"Answer: \" and your answer.";
constexpr const char* kShippedSet = "examples/eval/magnetar-world.jsonl";
constexpr int64_t kMaxCtx = int64_t{1} << 20;

struct args {
    std::vector<std::string> files;
    std::string model;
    int threads = 0;
    int64_t n_ctx = 0;  // 0: sized to the questions
    int64_t tokens = 4096;
    int64_t questions = 0;  // 0: all
    bool nothink = false;
    std::string system = kEvalSystem;
    sampling_params sampling;
    int64_t soft_budget = 1024;
    int soft_rank = 3;
    int64_t hard_budget = 512;
    bool plain = false;
    int pause_ms = 350;
    std::string trace;
    std::string report_json;
    engine_flags engine;
};

struct result {
    eval::grade g;
    eval_status status = eval_status::pending;
    int64_t prompt_tokens = 0;
    int64_t gen_tokens = 0;
    double seconds = 0;
    double decode_s = 0;
    std::string close = "none";  // natural, soft, hard, or none (never thinking)
    std::string reply;
    bool ended = false;  // EOS within the budget
};

double tps(int64_t n, double s) {
    return s > 0 ? static_cast<double>(n) / s : 0.0;
}

std::string short_text(std::string s, size_t n) {
    std::replace(s.begin(), s.end(), '\n', ' ');
    if (s.size() > n) s = s.substr(0, n - 3) + "...";
    return s;
}

// Runs one question: the prompt synced into the session, then tokens until EOS or the budget,
// closing the thinking block when the budget runs low.
void run_one(const args& a, const Engine& e, Session& s, const std::vector<int32_t>& prompt,
             eval_view& view, result& r, bool* quit) {
    const special_tokens& sp = e.info().special;
    const auto t0 = std::chrono::steady_clock::now();
    check(s.sync(prompt));
    const auto t1 = std::chrono::steady_clock::now();
    sampler smp(a.sampling, e.info().n_vocab);
    bool thinking = !prompt.empty() && prompt.back() == sp.think;
    std::vector<int32_t> out;
    std::string pending;  // bytes held back until a UTF-8 sequence is complete
    for (int64_t step = 0; step < a.tokens; ++step) {
        if (!view.poll()) {
            *quit = true;
            break;
        }
        const int64_t remaining = a.tokens - step;
        int32_t tok = -1;
        if (thinking && remaining <= a.hard_budget) {
            tok = sp.think_end;
            r.close = "hard";
        } else if (thinking && remaining <= a.soft_budget) {
            for (const token_logprob& t : s.top_logprobs(a.soft_rank)) {
                if (t.id == sp.think_end) {
                    tok = sp.think_end;
                    r.close = "soft";
                }
            }
        }
        if (tok < 0) tok = s.sample(smp);
        if (tok == sp.eos) {
            r.ended = true;
            break;
        }
        out.push_back(tok);
        if (tok == sp.think_end && thinking) {
            thinking = false;
            if (r.close == "none") r.close = "natural";
            r.reply += "</think>";
            view.text("\n", false);
        } else if (tok != sp.think) {
            const std::string b = e.token_bytes(tok);
            r.reply += b;
            pending += b;
            size_t cut = pending.size();
            // Keep an unfinished UTF-8 sequence for the next token.
            for (size_t k = 1; k <= std::min<size_t>(3, pending.size()); ++k) {
                const auto c = static_cast<unsigned char>(pending[pending.size() - k]);
                if ((c & 0xC0) == 0x80) continue;
                const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
                if (len > k) cut = pending.size() - k;
                break;
            }
            view.text(pending.substr(0, cut), thinking);
            pending.erase(0, cut);
        }
        if (step + 1 < a.tokens) check(s.eval(std::span<const int32_t>(&tok, 1)));
    }
    if (!pending.empty()) view.text(pending, thinking);
    if (thinking && r.close == "none") r.close = "unclosed";
    const auto t2 = std::chrono::steady_clock::now();
    r.gen_tokens = static_cast<int64_t>(out.size());
    r.seconds = std::chrono::duration<double>(t2 - t0).count();
    r.decode_s = std::chrono::duration<double>(t2 - t1).count();
}

json result_json(const eval::question& q, const result& r) {
    json j;
    j["id"] = q.id;
    j["kind"] = eval::kind_name(q.kind);
    j["result"] = eval_status_name(r.status);
    j["answer"] = r.g.answer;
    j["answer_line"] = r.g.answer_line;
    j["expected"] = eval::expected_text(q);
    j["prompt_tokens"] = r.prompt_tokens;
    j["generated_tokens"] = r.gen_tokens;
    j["seconds"] = r.seconds;
    j["tokens_per_second"] = tps(r.gen_tokens, r.decode_s);
    j["thinking_closed"] = r.close;
    j["ended"] = r.ended;
    return j;
}

int run_eval(args a) {
    if (a.files.empty()) {
        const std::string shipped = find_in_ancestors(kShippedSet);
        if (shipped.empty()) {
            throw std::runtime_error(std::string("no question file given, and the shipped set ") +
                                     kShippedSet + " was not found");
        }
        a.files.push_back(shipped);
    }
    if (a.tokens <= a.hard_budget) {
        throw std::runtime_error(
            strfmt("--tokens %lld must be above --hard-limit-reply-budget %lld",
                   static_cast<long long>(a.tokens), static_cast<long long>(a.hard_budget)));
    }
    if (a.soft_budget < a.hard_budget) {
        throw std::runtime_error(
            strfmt("--soft-limit-reply-budget %lld must be at least --hard-limit-reply-budget %lld",
                   static_cast<long long>(a.soft_budget), static_cast<long long>(a.hard_budget)));
    }
    std::vector<eval::question> qs;
    for (const std::string& f : a.files) {
        std::vector<eval::question> more = eval::read_questions(f);
        qs.insert(qs.end(), more.begin(), more.end());
    }
    if (a.questions > 0 && static_cast<size_t>(a.questions) < qs.size())
        qs.resize(static_cast<size_t>(a.questions));

    engine_options eo;
    eo.model_path = resolve_model_path(a.model);
    eo.n_threads = a.threads;
    apply_engine_flags(a.engine, eo);
    eo.use_mtp = false;
    std::unique_ptr<Engine> engine;
    check(Engine::load(eo, &engine));
    report_engine(engine->info());
    const model_info& info = engine->info();
    if (!info.has_tokenizer)
        throw std::runtime_error(eo.model_path + ": the model has no tokenizer (tokenizer.ggml.*)");
    const think_mode mode = a.nothink ? think_mode::off : think_mode::on;

    // Render every question; size the context to the longest plus the budget.
    std::vector<std::vector<int32_t>> prompts;
    int64_t longest = 0;
    for (const eval::question& q : qs) {
        std::vector<chat_turn> turns;
        if (!a.system.empty()) turns.push_back({"system", a.system, ""});
        turns.push_back({"user", eval::prompt_text(q), ""});
        std::vector<int32_t> ids;
        check(engine->tokenize_chat(turns, mode, static_cast<uint64_t>(kMaxCtx), &ids));
        longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
        prompts.push_back(std::move(ids));
    }
    int64_t n_ctx = a.n_ctx;
    if (n_ctx == 0) {
        n_ctx = longest + a.tokens + 1;
        const int64_t cap = info.n_ctx_train > 0
                                ? std::min<int64_t>(kMaxCtx, static_cast<int64_t>(info.n_ctx_train))
                                : kMaxCtx;
        n_ctx = std::min(n_ctx, cap);
    }
    session_options so;
    so.n_ctx = n_ctx;
    so.checkpoint_interval = 0;
    std::unique_ptr<Session> s;
    check(engine->create_session(so, &s));
    // The prefix every question shares (BOS, system prompt): evaluated once, checkpointed, and
    // every question resumes from it.
    size_t shared = prompts.empty() ? 0 : prompts[0].size();
    for (const auto& p : prompts) {
        size_t k = 0;
        while (k < shared && k < p.size() && p[k] == prompts[0][k]) ++k;
        shared = k;
    }
    if (shared > 1 && static_cast<int64_t>(shared) < n_ctx) {
        check(s->eval(std::span<const int32_t>(prompts[0].data(), shared - 1)));
        check(s->checkpoint());
    }

    std::vector<eval_entry> entries;
    for (const eval::question& q : qs) entries.push_back({q.id, eval::kind_name(q.kind)});
    const bool tui = !a.plain && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
    std::unique_ptr<eval_view> view =
        tui ? make_tui_view(
                  entries,
                  strfmt("magnetar eval: %s, %zu questions, %s, up to %lld tokens each",
                         info.name.c_str(), qs.size(), a.nothink ? "no thinking" : "thinking",
                         static_cast<long long>(a.tokens)),
                  a.pause_ms)
            : make_plain_view(entries);
    install_interrupt_handler();

    std::ofstream trace;
    if (!a.trace.empty()) {
        trace.open(a.trace, std::ios::binary | std::ios::trunc);
        if (!trace) throw std::runtime_error(a.trace + ": cannot write");
    }
    std::vector<result> results(qs.size());
    std::deque<size_t> order;
    for (size_t i = 0; i < qs.size(); ++i) order.push_back(i);
    int64_t passed = 0, failed = 0, skipped = 0, gen_total = 0;
    double decode_total = 0;
    const auto start = std::chrono::steady_clock::now();
    bool quit = false;
    try {
        while (!order.empty() && !quit) {
            const int64_t pick = view->take_next();
            if (pick >= 0) {
                const auto it = std::find(order.begin(), order.end(), static_cast<size_t>(pick));
                if (it != order.end()) {
                    order.erase(it);
                    order.push_front(static_cast<size_t>(pick));
                }
            }
            const size_t i = order.front();
            order.pop_front();
            const eval::question& q = qs[i];
            result& r = results[i];
            r.prompt_tokens = static_cast<int64_t>(prompts[i].size());
            if (r.prompt_tokens + a.tokens > n_ctx) {
                r.status = eval_status::skipped;
                entries[i].status = r.status;
                ++skipped;
                view->end(i,
                          strfmt("%s SKIPPED: %lld prompt tokens + %lld budget do not fit "
                                 "--ctx %lld",
                                 q.id.c_str(), static_cast<long long>(r.prompt_tokens),
                                 static_cast<long long>(a.tokens), static_cast<long long>(n_ctx)));
                continue;
            }
            entries[i].status = eval_status::running;
            view->begin(i, q.id + ": " + eval::prompt_text(q));
            run_one(a, *engine, *s, prompts[i], *view, r, &quit);
            if (quit) {
                r.status = eval_status::interrupted;
                entries[i].status = r.status;
                break;
            }
            r.g = eval::grade_reply(q, r.reply);
            r.status = r.g.pass ? eval_status::pass : eval_status::fail;
            entries[i].status = r.status;
            (r.g.pass ? passed : failed)++;
            gen_total += r.gen_tokens;
            decode_total += r.decode_s;
            view->end(i,
                      strfmt("%s %s: answer %s, expected %s (%lld tokens, %.1f s, %.1f t/s, "
                             "thinking %s)",
                             q.id.c_str(), eval_status_name(r.status),
                             r.g.answer.empty() ? "(none)" : short_text(r.g.answer, 40).c_str(),
                             eval::expected_text(q).c_str(), static_cast<long long>(r.gen_tokens),
                             r.seconds, tps(r.gen_tokens, r.decode_s), r.close.c_str()));
            view->status(strfmt("%lld/%zu done, %lld PASS, %lld FAIL, %.1f t/s",
                                passed + failed + skipped, qs.size(), passed, failed,
                                tps(gen_total, decode_total)));
            if (trace) {
                json t = result_json(q, r);
                t["prompt"] = eval::prompt_text(q);
                t["output"] = r.reply;
                trace << t.dump() << "\n";
                trace.flush();
            }
        }
    } catch (...) {
        view->close();
        throw;
    }
    view->close();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    // The report.
    std::printf("%-4s %-22s %-11s %7s %6s %8s %7s  %-18s %s\n", "#", "id", "result", "prompt",
                "gen", "time", "t/s", "answer", "expected");
    for (size_t i = 0; i < qs.size(); ++i) {
        const result& r = results[i];
        if (r.status == eval_status::pending) continue;
        std::printf("%-4zu %-22s %-11s %7lld %6lld %7.1fs %7.1f  %-18s %s\n", i + 1,
                    short_text(qs[i].id, 22).c_str(), eval_status_name(r.status),
                    static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.gen_tokens),
                    r.seconds, tps(r.gen_tokens, r.decode_s),
                    short_text(r.g.answer.empty() ? "-" : r.g.answer, 18).c_str(),
                    short_text(eval::expected_text(qs[i]), 30).c_str());
    }
    const int64_t graded = passed + failed;
    std::printf(
        "score: %lld / %lld passed (%.1f %%), %lld failed, %lld skipped, %zu not run; "
        "%lld tokens generated at %.1f t/s; %.1f s\n",
        static_cast<long long>(passed), static_cast<long long>(graded),
        graded > 0 ? 100.0 * static_cast<double>(passed) / static_cast<double>(graded) : 0.0,
        static_cast<long long>(failed), static_cast<long long>(skipped),
        qs.size() - static_cast<size_t>(graded + skipped), static_cast<long long>(gen_total),
        tps(gen_total, decode_total), wall);
    if (!a.report_json.empty()) {
        json rep;
        rep["model"] = info.name;
        rep["files"] = a.files;
        rep["thinking"] = !a.nothink;
        rep["tokens_per_question"] = a.tokens;
        rep["n_ctx"] = n_ctx;
        rep["sampling"] = {{"temperature", a.sampling.temperature},
                           {"top_p", a.sampling.top_p},
                           {"min_p", a.sampling.min_p}};
        json list = json::array();
        for (size_t i = 0; i < qs.size(); ++i)
            if (results[i].status != eval_status::pending)
                list.push_back(result_json(qs[i], results[i]));
        rep["questions"] = list;
        rep["totals"] = {
            {"passed", passed},
            {"failed", failed},
            {"skipped", skipped},
            {"not_run", qs.size() - static_cast<size_t>(graded + skipped)},
            {"score", graded > 0 ? static_cast<double>(passed) / static_cast<double>(graded) : 0.0},
            {"generated_tokens", gen_total},
            {"tokens_per_second", tps(gen_total, decode_total)},
            {"seconds", wall}};
        write_file_text(a.report_json, rep.dump(2) + "\n");
        std::fprintf(stderr, "wrote %s\n", a.report_json.c_str());
    }
    return quit && interrupted() ? 130 : 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    a->sampling.temperature = 0.0f;  // greedy: a run repeats exactly
    sub.add_option(
           "files", a->files,
           std::string("Question files (JSONL, docs/eval.md); default: the shipped ") + kShippedSet)
        ->check(CLI::ExistingFile);
    sub.add_option(
        "-m,--model", a->model,
        std::string("Model GGUF (default: $MAGNETAR_MODEL or ") + kDefaultModelRelPath + ")");
    sub.add_option("-t,--threads", a->threads, "Threads (default: one per physical core)");
    sub.add_option("-c,--ctx", a->n_ctx,
                   "Context size (default: the longest question plus --tokens, at most the "
                   "model's trained context)")
        ->check(CLI::Range(int64_t{0}, kMaxCtx));
    sub.add_option("-n,--tokens", a->tokens, "Token budget per question")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, kMaxCtx - 1));
    sub.add_option("--questions", a->questions, "Run only the first N questions")
        ->check(CLI::PositiveNumber);
    auto* think = sub.add_flag_callback(
        "--think", [a] { a->nothink = false; }, "Thinking on (default)");
    auto* nothink = sub.add_flag("--nothink", a->nothink, "Thinking off");
    think->excludes(nothink);
    sub.add_option("--system", a->system, "System prompt (\"\" for none)")->capture_default_str();
    sub.add_option("--temp", a->sampling.temperature, "Temperature (default 0: greedy)")
        ->check(CLI::Range(0.0f, 100.0f));
    sub.add_option("--top-p", a->sampling.top_p, "Top-p")->check(CLI::Range(0.0f, 1.0f));
    sub.add_option("--min-p", a->sampling.min_p, "Min-p")->check(CLI::Range(0.0f, 1.0f));
    sub.add_option("--seed", a->sampling.seed, "Sampling seed (with --temp > 0)");
    sub.add_option("--soft-limit-reply-budget", a->soft_budget,
                   "With this many tokens left, close the thinking block when </think> is among "
                   "the model's top candidates")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    sub.add_option("--soft-limit-think-close-rank", a->soft_rank,
                   "How many top candidates the soft close looks at")
        ->capture_default_str()
        ->check(CLI::Range(1, 128));
    sub.add_option("--hard-limit-reply-budget", a->hard_budget,
                   "With this many tokens left, close the thinking block whatever the model "
                   "prefers, leaving them for the answer")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    sub.add_flag("--plain", a->plain, "No terminal UI: one line per result");
    sub.add_option("--pause-ms", a->pause_ms, "Terminal UI: how long a result stays")
        ->capture_default_str()
        ->check(CLI::Range(0, 60000));
    sub.add_option("--trace", a->trace,
                   "Write one JSON line per question: prompt, output, grading, thinking close");
    sub.add_option("--report-json", a->report_json, "Also write the report as JSON");
    add_backend_flags(sub, a->engine);
    add_steering_flags(sub, a->engine);
    return [a]() { return run_eval(*a); };
}

}  // namespace

MAGNETAR_COMMAND(eval, "eval", "Run question sets (JSONL) through the model and grade the answers",
                 setup);

}  // namespace magnetar::cli
