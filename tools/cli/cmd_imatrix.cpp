// `magnetar imatrix`: importance matrix of every matmul weight over a prompt corpus, written in
// llama.cpp's GGUF imatrix format (docs/imatrix.md); `--merge` adds files together.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/imatrix_collector.h"
#include "core/error.h"
#include "core/format.h"
#include "core/progress.h"
#include "gguf/gguf.h"
#include "magnetar/engine.h"
#include "quantize/imatrix.h"

namespace magnetar::cli {

namespace {

struct args {
    std::string model;
    std::string mtp_model;
    std::string prompts;
    std::string output = "imatrix.gguf";
    int64_t chunk = 512;
    int64_t max_chunks = 0;
    bool paragraphs = false;
    int threads = 0;
    bool quiet = false;
    std::vector<std::string> merge;
    bool overwrite = false;
};

void check(const status& st) {
    if (!st.ok()) throw Error(st.message());
}

std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("imatrix: cannot read prompts file " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Paragraphs separated by blank (empty or whitespace-only) lines.
std::vector<std::string> split_paragraphs(const std::string& text) {
    std::vector<std::string> out;
    std::string cur, line;
    std::istringstream in(text);
    auto flush = [&] {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
    };
    while (std::getline(in, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) {
            flush();
            continue;
        }
        if (!cur.empty()) cur += '\n';
        cur += line;
    }
    flush();
    return out;
}

void print_warning(const std::string& w) {
    if (!w.empty()) std::fprintf(stderr, "imatrix: warning: %s\n", w.c_str());
}

int run_merge(const args& a) {
    if (a.merge.size() < 2) throw Error("imatrix: --merge needs at least two files");
    check_output(a.output, a.overwrite, a.merge);
    imatrix::data d = imatrix::read(a.merge[0]);
    for (size_t i = 1; i < a.merge.size(); ++i) imatrix::merge(d, imatrix::read(a.merge[i]));
    std::string warning;
    imatrix::write(d, a.output, &warning);
    print_warning(warning);
    if (!a.quiet) {
        std::fprintf(stderr, "imatrix: merged %zu files: %zu entries, %u chunks -> %s\n",
                     a.merge.size(), d.entries.size(), d.chunk_count, a.output.c_str());
    }
    return 0;
}

// The token sequences to evaluate, each from an empty session: BOS (when the model has one)
// and then consecutive pieces of the tokenized text (llama-imatrix's chunks), or one per
// paragraph, cut to the chunk size.
std::vector<std::vector<int32_t>> make_chunks(const Engine& engine, const args& a, int64_t chunk) {
    const std::string text = read_text(a.prompts);
    const int32_t bos = engine.info().special.bos;
    const int64_t body = chunk - (bos >= 0 ? 1 : 0);
    if (body < 1) throw Error("imatrix: --chunk must leave room for at least one text token");
    std::vector<std::vector<int32_t>> out;
    auto full = [&] {
        return a.max_chunks > 0 && static_cast<int64_t>(out.size()) >= a.max_chunks;
    };
    auto start = [&] {
        out.emplace_back();
        if (bos >= 0) out.back().push_back(bos);
    };
    if (a.paragraphs) {
        for (const std::string& p : split_paragraphs(text)) {
            if (full()) break;
            std::vector<int32_t> ids;
            check(engine.tokenize(p, false, &ids));
            if (ids.empty()) continue;
            start();
            const auto n = std::min<int64_t>(body, static_cast<int64_t>(ids.size()));
            out.back().insert(out.back().end(), ids.begin(), ids.begin() + n);
        }
    } else {
        std::vector<int32_t> ids;
        check(engine.tokenize(text, false, &ids));
        const int64_t n_chunks = static_cast<int64_t>(ids.size()) / body;
        if (n_chunks == 0) {
            throw Error(
                strfmt("imatrix: %s tokenizes to %zu tokens, fewer than one chunk of %lld "
                       "text tokens (lower --chunk or use --paragraphs)",
                       a.prompts.c_str(), ids.size(), static_cast<long long>(body)));
        }
        for (int64_t c = 0; c < n_chunks && !full(); ++c) {
            start();
            out.back().insert(out.back().end(), ids.begin() + c * body,
                              ids.begin() + (c + 1) * body);
        }
    }
    if (out.empty()) throw Error("imatrix: no text in " + a.prompts);
    return out;
}

int run_collect(const args& a) {
    if (a.prompts.empty()) throw Error("imatrix: give --prompts FILE (or --merge FILES)");
    if (a.chunk < 2) throw Error("imatrix: --chunk must be at least 2");
    check_output(a.output, a.overwrite);
    engine_options eo;
    eo.model_path = resolve_model_path(a.model);
    eo.mtp_path = a.mtp_model;
    eo.n_threads = a.threads;
    std::unique_ptr<Engine> engine;
    check(Engine::load(eo, &engine));
    if (!engine->info().has_tokenizer)
        throw Error("imatrix: " + eo.model_path + " carries no tokenizer (tokenizer.ggml.*)");
    int64_t chunk = a.chunk;
    const auto n_ctx_train = static_cast<int64_t>(engine->info().n_ctx_train);
    if (n_ctx_train > 0 && chunk > n_ctx_train) {
        if (!a.quiet)
            std::fprintf(stderr, "imatrix: --chunk %lld capped to the model's context %lld\n",
                         static_cast<long long>(chunk), static_cast<long long>(n_ctx_train));
        chunk = n_ctx_train;
    }
    const std::vector<std::vector<int32_t>> chunks = make_chunks(*engine, a, chunk);

    // Tensor shapes come from the files themselves (the collector checks tap widths on them).
    const auto main_file = gguf::reader::open(eo.model_path);
    const auto mtp_file = a.mtp_model.empty() ? nullptr : gguf::reader::open(a.mtp_model);
    imatrix_collector collector(
        [&](const std::string& name) -> std::optional<std::vector<int64_t>> {
            for (const gguf::reader* r : {main_file.get(), mtp_file.get()}) {
                if (!r) continue;
                if (const gguf::tensor_info* t = r->find_tensor(name))
                    return std::vector<int64_t>(t->ne, t->ne + t->n_dims);
            }
            return std::nullopt;
        });

    session_options so;
    so.n_ctx = chunk;
    so.chunk_size = chunk;
    std::unique_ptr<Session> session;
    check(engine->create_session(so, &session));
    // Errors inside the tap are kept and raised after eval(): they must not unwind the engine.
    std::string tap_error;
    session->set_dump(imatrix_collector::tap_patterns(),
                      [&](const std::string& name, int64_t first_pos, int64_t n_rows, int64_t width,
                          const float* data) {
                          if (!tap_error.empty()) return;
                          try {
                              collector.rows(name, first_pos, n_rows, width, data);
                          } catch (const std::exception& e) {
                              tap_error = e.what();
                          }
                      });

    uint64_t total = 0;
    for (const auto& c : chunks) total += c.size();
    if (!a.quiet) {
        std::fprintf(stderr, "imatrix: %s, %zu %s of up to %lld tokens (%llu tokens)\n",
                     eo.model_path.c_str(), chunks.size(), a.paragraphs ? "paragraphs" : "chunks",
                     static_cast<long long>(chunk), static_cast<unsigned long long>(total));
    }
    Progress progress("imatrix", total, Progress::Unit::tokens, a.quiet);
    for (const auto& c : chunks) {
        session->reset();
        check(session->eval(c));
        if (!tap_error.empty()) throw Error(tap_error);
        progress.add(c.size());
    }
    progress.finish();

    imatrix::data d = collector.result();
    d.datasets.push_back(a.prompts);
    d.chunk_count = static_cast<uint32_t>(chunks.size());
    d.chunk_size = static_cast<uint32_t>(chunk);
    std::string warning;
    imatrix::write(d, a.output, &warning);
    print_warning(warning);
    if (!a.quiet) {
        size_t unused = 0, experts = 0;
        for (const auto& [name, e] : d.entries) {
            if (e.n_mat == 1) continue;
            experts += static_cast<size_t>(e.n_mat);
            for (int64_t c : e.counts) unused += c == 0;
        }
        std::fprintf(stderr, "imatrix: %zu weights", d.entries.size());
        if (experts)
            std::fprintf(stderr, ", %zu of %zu expert matrices never routed to", unused, experts);
        std::fprintf(stderr, " -> %s\n", a.output.c_str());
    }
    return 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    sub.add_option(
        "-m,--model", a->model,
        std::string("Model GGUF (default: $MAGNETAR_MODEL or ") + kDefaultModelRelPath + ")");
    sub.add_option("--mtp", a->mtp_model,
                   "Separate MTP GGUF (its block's weights get entries too)");
    sub.add_option("-f,--prompts", a->prompts,
                   "Calibration text: tokenized as a whole and cut into --chunk token chunks (or "
                   "one sequence per blank-line-separated paragraph with --paragraphs)");
    sub.add_option("-o,--output", a->output, "Output GGUF imatrix")->capture_default_str();
    sub.add_option("--chunk", a->chunk,
                   "Tokens per chunk, BOS included (capped to the model's context); each chunk is "
                   "evaluated from an empty session")
        ->capture_default_str();
    sub.add_option("--max-chunks", a->max_chunks, "Evaluate at most N chunks (0: all)");
    sub.add_flag("--paragraphs", a->paragraphs,
                 "One sequence per paragraph (cut to --chunk tokens) instead of fixed chunks");
    sub.add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
    sub.add_flag("-q,--quiet", a->quiet, "No progress bar or summary");
    sub.add_flag("--overwrite", a->overwrite, "Replace --output when it exists");
    sub.add_option("--merge", a->merge,
                   "Add these imatrix files (GGUF or legacy .dat) together into --output "
                   "instead of collecting: sums and counts add")
        ->expected(2, -1);
    return [a]() { return a->merge.empty() ? run_collect(*a) : run_merge(*a); };
}

}  // namespace

MAGNETAR_COMMAND(imatrix, "imatrix",
                 "Collect an importance matrix over a prompt corpus (llama.cpp GGUF imatrix "
                 "format), or merge imatrix files",
                 setup);

}  // namespace magnetar::cli
