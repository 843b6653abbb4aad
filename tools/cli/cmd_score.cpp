// `magnetar score`: quality of a model against a reference model or given continuations
// (docs/quality.md).
//
//   score save   the reference model's top-K distributions over a token stream, in chunks
//   score kld    another model against a saved reference: KL divergence (mean, median, p99,
//                max), top-1 agreement, NLL and perplexity of both, MTP draft agreement, greedy
//                longest common prefix
//   score cases  NLL, first-token match and greedy LCP of given continuations (JSONL)
//
// Owns: the commands and their reports. Does not own: the statistics and the file format
// (quality.h), the documents (documents.h), the model (the public engine API).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/documents.h"
#include "cli/engine_flags.h"
#include "cli/generation.h"
#include "cli/quality.h"
#include "cli/token_file.h"
#include "cli/tokenizer_source.h"
#include "core/error.h"
#include "core/format.h"
#include "core/progress.h"
#include "magnetar/engine.h"
#include "magnetar/session.h"
#include "tokenizer/trusted_specials.h"

namespace magnetar::cli {

namespace {

// Logit rows kept per eval call: bounds the all-positions logits ([batch, n_vocab] floats).
constexpr int64_t kBatch = 128;

struct model_flags {
    std::string model;
    int threads = 0;
    engine_flags engine;
};

void add_model_flags(CLI::App& sub, model_flags& f) {
    sub.add_option("-m,--model", f.model,
                   "Model GGUF (default: $MAGNETAR_MODEL, then the default)");
    sub.add_option("-t,--threads", f.threads, "Threads (default: physical cores)");
    add_backend_flags(sub, f.engine);
}

std::unique_ptr<Engine> open_engine(const model_flags& f) {
    engine_options eo;
    eo.model_path = resolve_model_path(f.model);
    eo.n_threads = f.threads;
    apply_engine_flags(f.engine, eo);
    std::unique_ptr<Engine> e;
    check(Engine::load(eo, &e));
    report_engine(e->info());
    return e;
}

// A token file: a JSON array of ids, or little-endian int32 ids (`magnetar render -o`).
std::vector<int32_t> read_tokens(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error(strfmt("%s: cannot open", path.c_str()));
    char first = 0;
    f >> first;
    if (first == '[') return read_token_file(path);
    const auto size = std::filesystem::file_size(path);
    if (size == 0 || size % 4 != 0) {
        throw Error(strfmt("%s: neither a JSON array nor int32 ids (%llu bytes)", path.c_str(),
                           static_cast<unsigned long long>(size)));
    }
    std::vector<int32_t> ids(size / 4);
    f.seekg(0);
    f.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(size));
    if (!f) throw Error(strfmt("%s: read failed", path.c_str()));
    return ids;
}

void check_ids(std::span<const int32_t> ids, uint32_t n_vocab, const std::string& what) {
    for (int32_t id : ids) {
        if (id < 0 || static_cast<uint32_t>(id) >= n_vocab) {
            throw Error(strfmt("%s: token id %d outside the model's vocabulary of %u", what.c_str(),
                               id, n_vocab));
        }
    }
}

std::unique_ptr<Session> chunk_session(const Engine& e, int64_t n_ctx, bool mtp) {
    session_options so;
    so.n_ctx = n_ctx;
    so.chunk_size = kBatch;
    so.all_logits = true;
    so.mtp_logits = mtp;
    so.checkpoint_interval = 0;
    std::unique_ptr<Session> s;
    check(e.create_session(so, &s));
    return s;
}

// Greedy continuation of `prompt` for n tokens in session s (reset first).
std::vector<int32_t> greedy(Session& s, std::span<const int32_t> prompt, size_t n) {
    s.reset();
    check(s.eval(prompt));
    std::vector<int32_t> out;
    while (out.size() < n) {
        const int32_t t = s.argmax();
        out.push_back(t);
        if (out.size() == n) break;
        check(s.eval(std::span<const int32_t>(&t, 1)));
    }
    return out;
}

// Counts of the MTP drafts that name the token two positions ahead.
struct mtp_tally {
    int64_t hits = 0, total = 0;
    double rate() const { return total > 0 ? static_cast<double>(hits) / total : 0.0; }
};

// Evaluates one chunk in batches; calls on_row(position, logits) for positions 0 .. n - 2 and
// tallies the MTP drafts when the session computes them.
template <typename F>
void eval_chunk(Session& s, std::span<const int32_t> tokens, mtp_tally* mtp, F&& on_row) {
    s.reset();
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (int64_t a = 0; a < n - 1;) {
        if (interrupted()) throw Error("interrupted");
        const int64_t b = std::min(a + kBatch, n - 1);
        check(s.eval(tokens.subspan(static_cast<size_t>(a), static_cast<size_t>(b - a))));
        for (int64_t i = 0; i < b - a; ++i) on_row(a + i, s.logits_at(i));
        if (mtp) {
            for (int64_t j = 0; j < s.n_mtp_rows(); ++j) {
                const int64_t p = s.mtp_first_pos() + j + 2;  // the token the row drafts
                if (p >= n) continue;
                ++mtp->total;
                mtp->hits += argmax_of(s.mtp_logits_at(j)) == tokens[static_cast<size_t>(p)];
            }
        }
        a = b;
    }
}

// ---------------------------------------------------------------------------------------------
// score save
// ---------------------------------------------------------------------------------------------

struct save_args {
    model_flags m;
    std::string tokens;
    std::string output;
    int64_t ctx = 512;
    int64_t max_chunks = 0;
    uint32_t top_k = 32;
    uint32_t greedy_prompt = 64;
    uint32_t greedy_tokens = 32;
    bool quiet = false;
};

int score_save(const save_args& a) {
    if (a.ctx < 2) throw Error("--ctx must be at least 2");
    if (a.greedy_prompt < 1 || a.greedy_prompt >= a.ctx) {
        throw Error("--greedy-prompt must be at least 1 and below --ctx");
    }
    const std::vector<int32_t> stream = read_tokens(a.tokens);
    const auto engine = open_engine(a.m);
    const model_info& info = engine->info();
    check_ids(stream, info.n_vocab, a.tokens);
    if (a.top_k < 1 || a.top_k > info.n_vocab || a.top_k > 4096) {
        throw Error("--top-k must be between 1 and min(4096, n_vocab)");
    }
    int64_t n_chunks = static_cast<int64_t>(stream.size()) / a.ctx;
    if (a.max_chunks > 0) n_chunks = std::min(n_chunks, a.max_chunks);
    if (n_chunks == 0) {
        throw Error(strfmt("%s: %zu tokens, fewer than one chunk of --ctx %lld", a.tokens.c_str(),
                           stream.size(), static_cast<long long>(a.ctx)));
    }
    ref_file r;
    r.n_vocab = info.n_vocab;
    r.top_k = a.top_k;
    r.n_ctx = static_cast<uint32_t>(a.ctx);
    r.greedy_prompt = a.greedy_prompt;
    r.greedy_tokens = a.greedy_tokens;
    r.model = std::filesystem::path(resolve_model_path(a.m.model)).filename().string();
    install_interrupt_handler();
    auto s = chunk_session(*engine, a.ctx + a.greedy_tokens, info.has_mtp);
    Progress progress("score save", static_cast<uint64_t>(n_chunks * a.ctx), Progress::Unit::tokens,
                      a.quiet);
    double nll = 0;
    int64_t scored = 0;
    mtp_tally mtp;
    for (int64_t c = 0; c < n_chunks; ++c) {
        ref_chunk chunk;
        const auto tokens = std::span<const int32_t>(stream).subspan(static_cast<size_t>(c * a.ctx),
                                                                     static_cast<size_t>(a.ctx));
        chunk.tokens.assign(tokens.begin(), tokens.end());
        eval_chunk(*s, tokens, info.has_mtp ? &mtp : nullptr,
                   [&](int64_t p, std::span<const float> logits) {
                       chunk.positions.push_back(
                           summarise(logits, a.top_k, tokens[static_cast<size_t>(p + 1)]));
                       nll -= chunk.positions.back().target;
                       ++scored;
                   });
        chunk.greedy = greedy(*s, tokens.first(a.greedy_prompt), a.greedy_tokens);
        r.chunks.push_back(std::move(chunk));
        progress.add(static_cast<uint64_t>(a.ctx));
    }
    progress.finish();
    write_ref(a.output, r);
    const double avg = nll / static_cast<double>(scored);
    std::printf("reference %s: %lld chunks of %lld tokens, %lld scored, NLL %.4f, perplexity %.3f",
                r.model.c_str(), static_cast<long long>(n_chunks), static_cast<long long>(a.ctx),
                static_cast<long long>(scored), avg, std::exp(avg));
    if (mtp.total > 0) std::printf(", MTP top-1 %.1f %%", 100.0 * mtp.rate());
    std::printf("\nwrote %s\n", a.output.c_str());
    return 0;
}

// ---------------------------------------------------------------------------------------------
// score kld
// ---------------------------------------------------------------------------------------------

struct kld_args {
    model_flags m;
    std::string ref;
    std::string json;
    bool quiet = false;
};

int score_kld(const kld_args& a) {
    const ref_file r = read_ref(a.ref);
    const auto engine = open_engine(a.m);
    const model_info& info = engine->info();
    if (info.n_vocab != r.n_vocab) {
        throw Error(strfmt("%s has a vocabulary of %u, the reference %s of %u", info.name.c_str(),
                           info.n_vocab, a.ref.c_str(), r.n_vocab));
    }
    install_interrupt_handler();
    auto s = chunk_session(*engine, r.n_ctx + r.greedy_tokens, info.has_mtp);
    Progress progress("score kld", static_cast<uint64_t>(r.chunks.size()) * r.n_ctx,
                      Progress::Unit::tokens, a.quiet);
    std::vector<double> klds;
    double nll = 0, ref_nll = 0;
    int64_t top1 = 0;
    double lcp = 0;
    mtp_tally mtp;
    for (const ref_chunk& c : r.chunks) {
        eval_chunk(*s, c.tokens, info.has_mtp ? &mtp : nullptr,
                   [&](int64_t p, std::span<const float> logits) {
                       const ref_position& rp = c.positions[static_cast<size_t>(p)];
                       const position_score ps =
                           score_position(rp, logits, c.tokens[static_cast<size_t>(p + 1)]);
                       klds.push_back(ps.kld);
                       nll += ps.nll;
                       ref_nll -= rp.target;
                       top1 += ps.top1;
                   });
        const auto mine =
            greedy(*s, std::span<const int32_t>(c.tokens).first(r.greedy_prompt), r.greedy_tokens);
        lcp += static_cast<double>(common_prefix(mine, c.greedy));
        progress.add(r.n_ctx);
    }
    progress.finish();
    const double n = static_cast<double>(klds.size());
    const distribution d = describe(klds);
    const double avg = nll / n, ref_avg = ref_nll / n;
    const double avg_lcp = lcp / static_cast<double>(r.chunks.size());
    std::printf("model      %s\nreference  %s (%zu chunks of %u tokens, %.0f scored, top-%u)\n",
                std::filesystem::path(resolve_model_path(a.m.model)).filename().c_str(),
                r.model.c_str(), r.chunks.size(), r.n_ctx, n, r.top_k);
    std::printf("KLD        mean %.6f  median %.6f  p99 %.6f  max %.6f\n", d.mean, d.median, d.p99,
                d.max);
    std::printf("top-1      %.2f %% agreement\n", 100.0 * static_cast<double>(top1) / n);
    std::printf("NLL        model %.4f (perplexity %.3f)  reference %.4f (perplexity %.3f)\n", avg,
                std::exp(avg), ref_avg, std::exp(ref_avg));
    std::printf("greedy     %.2f of %u tokens in common on average\n", avg_lcp, r.greedy_tokens);
    if (mtp.total > 0)
        std::printf("MTP        top-1 %.2f %% of %lld drafts\n", 100.0 * mtp.rate(),
                    static_cast<long long>(mtp.total));
    if (!a.json.empty()) {
        nlohmann::ordered_json j = {
            {"model", std::filesystem::path(resolve_model_path(a.m.model)).filename().string()},
            {"reference", r.model},
            {"positions", klds.size()},
            {"kld", {{"mean", d.mean}, {"median", d.median}, {"p99", d.p99}, {"max", d.max}}},
            {"top1", static_cast<double>(top1) / n},
            {"nll", avg},
            {"reference_nll", ref_avg},
            {"greedy_lcp", avg_lcp},
        };
        if (mtp.total > 0) j["mtp_top1"] = mtp.rate();
        std::ofstream out(a.json);
        out << j.dump(2) << "\n";
        if (!out) throw Error(strfmt("%s: cannot write", a.json.c_str()));
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// score cases
// ---------------------------------------------------------------------------------------------

struct cases_args {
    model_flags m;
    std::string file;
    std::string output;
    int64_t ctx = 4096;
    bool quiet = false;
};

struct score_case {
    std::vector<int32_t> prompt;
    std::vector<int32_t> target;
};

int score_cases(const cases_args& a) {
    tokenizer_source src;
    src.model = a.m.model;
    const auto tok = load_tokenizer(src);
    const special_literals lits(*tok);
    std::vector<score_case> cases;
    for_each_line(a.file, [&](const std::string& line, const std::string& where) {
        const auto j = parse_json_line(line, where);
        score_case c;
        c.prompt = tokenize_document(*tok, lits, parse_document(j, where));
        const std::string cont = string_field(j, "continuation", where);
        if (cont.empty()) throw Error(where + ": a case needs a non-empty \"continuation\"");
        tok->encode_append(cont, false, c.target);
        if (static_cast<int64_t>(c.prompt.size() + c.target.size()) > a.ctx) {
            throw Error(strfmt("%s: %zu tokens, more than --ctx %lld", where.c_str(),
                               c.prompt.size() + c.target.size(), static_cast<long long>(a.ctx)));
        }
        cases.push_back(std::move(c));
    });
    if (cases.empty()) throw Error(a.file + ": no cases");
    const auto engine = open_engine(a.m);
    session_options so;
    so.n_ctx = a.ctx;
    so.chunk_size = kBatch;
    so.all_logits = true;
    so.checkpoint_interval = 0;
    std::unique_ptr<Session> s;
    check(engine->create_session(so, &s));
    install_interrupt_handler();

    std::string tsv = "case\tprompt_tokens\ttarget_tokens\tnll\tavg_nll\tfirst_match\tgreedy_lcp\n";
    Progress progress("score cases", cases.size(), Progress::Unit::items, a.quiet);
    double sum_nll = 0, sum_avg = 0, sum_lcp = 0;
    int64_t firsts = 0, n_target = 0;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        if (interrupted()) throw Error("interrupted");
        const score_case& c = cases[ci];
        s->reset();
        check(s->eval(c.prompt));
        double nll = -token_logprob(s->logits(), c.target[0]);
        const bool first = s->argmax() == c.target[0];
        // Teacher-forced: row i of the target eval predicts target[i + 1].
        if (c.target.size() > 1) {
            const auto rest = std::span<const int32_t>(c.target).first(c.target.size() - 1);
            for (size_t a0 = 0; a0 < rest.size(); a0 += kBatch) {
                const auto part = rest.subspan(a0, std::min<size_t>(kBatch, rest.size() - a0));
                check(s->eval(part));
                for (size_t i = 0; i < part.size(); ++i) {
                    nll -=
                        token_logprob(s->logits_at(static_cast<int64_t>(i)), c.target[a0 + i + 1]);
                }
            }
        }
        const auto mine = greedy(*s, c.prompt, c.target.size());
        const size_t lcp = common_prefix(mine, c.target);
        const double avg = nll / static_cast<double>(c.target.size());
        tsv += strfmt("%zu\t%zu\t%zu\t%.6f\t%.6f\t%d\t%zu\n", ci + 1, c.prompt.size(),
                      c.target.size(), nll, avg, first ? 1 : 0, lcp);
        sum_nll += nll;
        sum_avg += avg;
        sum_lcp += static_cast<double>(lcp);
        firsts += first;
        n_target += static_cast<int64_t>(c.target.size());
        progress.add(1);
    }
    progress.finish();
    if (a.output.empty()) {
        std::fwrite(tsv.data(), 1, tsv.size(), stdout);
    } else {
        std::ofstream out(a.output, std::ios::binary);
        out << tsv;
        if (!out) throw Error(strfmt("%s: cannot write", a.output.c_str()));
    }
    const double n = static_cast<double>(cases.size());
    std::fprintf(stderr,
                 "%zu cases, %lld target tokens: avg_nll %.4f (per token %.4f), first-token "
                 "match %.1f %%, greedy LCP %.2f\n",
                 cases.size(), static_cast<long long>(n_target), sum_avg / n,
                 sum_nll / static_cast<double>(n_target), 100.0 * static_cast<double>(firsts) / n,
                 sum_lcp / n);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The command
// ---------------------------------------------------------------------------------------------

action setup_score(CLI::App& sub) {
    sub.require_subcommand(1);
    auto save = std::make_shared<save_args>();
    CLI::App* sv = sub.add_subcommand("save", "Save a reference model's distributions");
    add_model_flags(*sv, save->m);
    sv->add_option("--tokens", save->tokens,
                   "Token file: JSON array or int32 ids (magnetar render -o)")
        ->required();
    sv->add_option("-o,--output", save->output, "Reference file to write")->required();
    sv->add_option("--ctx", save->ctx, "Tokens per chunk")->capture_default_str();
    sv->add_option("--chunks", save->max_chunks, "At most N chunks (0: all)");
    sv->add_option("--top-k", save->top_k, "Tokens kept per position")->capture_default_str();
    sv->add_option("--greedy-prompt", save->greedy_prompt,
                   "Prompt tokens of each chunk's greedy continuation")
        ->capture_default_str();
    sv->add_option("--greedy", save->greedy_tokens, "Greedy tokens per chunk")
        ->capture_default_str();
    sv->add_flag("-q,--quiet", save->quiet, "No progress bar");

    auto kld = std::make_shared<kld_args>();
    CLI::App* kd = sub.add_subcommand("kld", "Score a model against a saved reference");
    add_model_flags(*kd, kld->m);
    kd->add_option("--ref", kld->ref, "Reference file (score save)")->required();
    kd->add_option("--json", kld->json, "Also write the figures as JSON");
    kd->add_flag("-q,--quiet", kld->quiet, "No progress bar");

    auto cases = std::make_shared<cases_args>();
    CLI::App* cs = sub.add_subcommand("cases", "Score given continuations (JSONL)");
    add_model_flags(*cs, cases->m);
    cs->add_option("-f,--file", cases->file,
                   "JSONL: a render document (text or messages) plus \"continuation\"")
        ->required();
    cs->add_option("-o,--output", cases->output, "TSV per case (default: standard output)");
    cs->add_option("--ctx", cases->ctx, "Session context")->capture_default_str();
    cs->add_flag("-q,--quiet", cases->quiet, "No progress bar");

    sub.footer(
        "save evaluates the token stream in chunks of --ctx tokens from position 0 and keeps, per "
        "position, the top-K log-probabilities, the remaining mass and the next token's "
        "log-probability, plus a greedy continuation per chunk. kld evaluates the same chunks "
        "and reports the KL divergence over those K + 1 bins (a lower bound of the full one), "
        "top-1 agreement, both NLLs, MTP draft agreement and the greedy common prefix. "
        "docs/quality.md");
    return [sv, kd, save, kld, cases]() {
        if (sv->parsed()) return score_save(*save);
        if (kd->parsed()) return score_kld(*kld);
        return score_cases(*cases);
    };
}

}  // namespace

MAGNETAR_COMMAND(score, "score",
                 "Model quality: KL divergence against a reference model, NLL of continuations",
                 setup_score);

}  // namespace magnetar::cli
