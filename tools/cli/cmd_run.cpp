// `magnetar run`: greedy generation from token ids, with prefill and decode speed.
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/token_file.h"
#include "magnetar/engine.h"

namespace magnetar::cli {

namespace {

struct args {
    std::string model;
    std::string tokens;
    int n_predict = 32;
    int threads = 0;
    int64_t chunk = 2048;
};

void check(const status& st) {
    if (!st.ok()) throw std::runtime_error(st.message());
}

// Greedy choice: the largest logit, ties to the lower token id.
int32_t argmax(std::span<const float> v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i) {
        if (v[i] > v[best]) best = i;
    }
    return static_cast<int32_t>(best);
}

int run(const args& a) {
    using clock = std::chrono::steady_clock;
    const std::vector<int32_t> prompt = read_token_file(a.tokens);
    if (a.n_predict < 0) throw std::runtime_error("-n must be >= 0");

    engine_options eo;
    eo.model_path = resolve_model_path(a.model);
    eo.n_threads = a.threads;
    std::unique_ptr<Engine> engine;
    check(Engine::load(eo, &engine));
    session_options so;
    so.n_ctx = static_cast<int64_t>(prompt.size()) + a.n_predict;
    so.chunk_size = a.chunk;
    std::unique_ptr<Session> session;
    check(engine->create_session(so, &session));

    const auto t0 = clock::now();
    check(session->eval(prompt));
    const auto t1 = clock::now();
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(a.n_predict));
    for (int i = 0; i < a.n_predict; ++i) {
        const int32_t next = argmax(session->logits());
        out.push_back(next);
        std::printf("%s%d", i ? " " : "", next);
        std::fflush(stdout);
        if (i + 1 < a.n_predict) check(session->eval(std::span<const int32_t>(&next, 1)));
    }
    const auto t2 = clock::now();
    std::printf("\n");
    std::fflush(stdout);
    const double pre_s = std::chrono::duration<double>(t1 - t0).count();
    const double dec_s = std::chrono::duration<double>(t2 - t1).count();
    const int decoded = a.n_predict > 0 ? a.n_predict - 1 : 0;
    std::fprintf(stderr, "prefill: %zu tokens in %.3f s (%.2f t/s)\n", prompt.size(), pre_s,
                 pre_s > 0 ? static_cast<double>(prompt.size()) / pre_s : 0.0);
    std::fprintf(stderr, "decode:  %d tokens in %.3f s (%.2f t/s)\n", decoded, dec_s,
                 dec_s > 0 ? decoded / dec_s : 0.0);
    std::fprintf(stderr, "threads: %d\n", engine->info().n_threads);
    return 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    sub.add_option("-m,--model", a->model,
                   "Model GGUF (default: $MAGNETAR_MODEL or models/magnetar-tiny.gguf)");
    sub.add_option("--tokens", a->tokens, "Prompt as a JSON array of token ids")->required();
    sub.add_option("-n,--n-predict", a->n_predict, "Tokens to generate")->capture_default_str();
    sub.add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
    sub.add_option("--chunk", a->chunk, "Prefill chunk size")->capture_default_str();
    sub.footer(
        "Prints the generated ids on stdout (greedy, ties to the lower id; no stop token) and "
        "prefill / decode speed on stderr.");
    return [a]() { return run(*a); };
}

}  // namespace

MAGNETAR_COMMAND(run, "run", "Greedy generation from token ids", setup);

}  // namespace magnetar::cli
