// `magnetar bench pipeline`: prefill and decode throughput of a pipelined run (under
// `mpirun -np N`, docs/distributed.md), the cost of one hop and the bytes per token on the
// wire. In a single process it measures the same prefill and decode, the baseline.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_command.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "magnetar/engine.h"

namespace magnetar::cli {

namespace {

struct args {
    std::string model;
    int threads = 0;
    int64_t prompt_tokens = 512;
    int64_t gen_tokens = 32;
    int reps = 3;
    int64_t chunk = 2048;
    engine_flags engine;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check(const status& st) {
    if (!st.ok()) throw Error(st.message());
}

int run(const args& a) {
    if (a.prompt_tokens < 1 || a.gen_tokens < 1 || a.reps < 1)
        throw Error("--prompt-tokens, --gen-tokens and --reps must be at least 1");
    engine_options eo;
    eo.model_path = resolve_model_path(a.model);
    eo.n_threads = a.threads;
    apply_engine_flags(a.engine, eo);
    std::unique_ptr<Engine> engine;
    check(Engine::load(eo, &engine));
    const model_info& info = engine->info();
    std::printf("bench pipeline: %s, %u layers, %d threads per rank, %s\n", info.name.c_str(),
                info.n_layer, info.n_threads,
                info.n_stages > 1 ? info.pipeline.c_str() : "1 stage (single process)");

    // Random ids: the arithmetic does not depend on which tokens they are.
    Rng rng(7);
    std::vector<int32_t> prompt(static_cast<size_t>(a.prompt_tokens));
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng.below(info.n_vocab));

    session_options so;
    so.n_ctx = a.prompt_tokens + a.gen_tokens + 1;
    so.checkpoint_interval = 0;
    so.chunk_size = a.chunk;  // pipelined: capped at --pipeline-chunk
    std::unique_ptr<Session> s;
    check(engine->create_session(so, &s));

    double best_prefill = 0, best_decode = 0;
    uint64_t decode_bytes = 0;
    for (int r = 0; r < a.reps; ++r) {
        s->reset();
        auto t0 = std::chrono::steady_clock::now();
        check(s->eval(prompt));
        const double tp = seconds_since(t0);
        int32_t next = s->argmax();
        const uint64_t sent0 = dist::bytes_sent();
        t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < a.gen_tokens; ++i) {
            check(s->eval({&next, 1}));
            next = s->argmax();
        }
        const double td = seconds_since(t0);
        decode_bytes = dist::bytes_sent() - sent0;
        best_prefill = std::max(best_prefill, static_cast<double>(a.prompt_tokens) / tp);
        best_decode = std::max(best_decode, static_cast<double>(a.gen_tokens) / td);
    }
    std::printf(
        "prefill: %lld tokens, %.1f t/s (best of %d; chunks of %lld)\n",
        static_cast<long long>(a.prompt_tokens), best_prefill, a.reps,
        static_cast<long long>(info.n_stages > 1 ? std::min(a.chunk, a.engine.chunk) : a.chunk));
    std::printf("decode: %.2f t/s, %.2f ms/token (greedy, best of %d)\n", best_decode,
                1000.0 / best_decode, a.reps);
    if (info.n_stages > 1) {
        // One token's HC state through every hop, no computation.
        double best = 1e9;
        for (int i = 0; i < 50; ++i) {
            double t = 0;
            check(engine->pipeline_ping(info.pipeline_hc_bytes + 68, &t));
            best = std::min(best, t);
        }
        const int hops = info.n_stages;  // N - 1 forward hops and the answer
        const double per_token_rank0 =
            static_cast<double>(decode_bytes) / static_cast<double>(a.gen_tokens);
        std::printf(
            "per hop: %.3f ms (one token's HC state, %llu bytes, through %d hops and "
            "back: %.3f ms)\n",
            1000.0 * best / hops, static_cast<unsigned long long>(info.pipeline_hc_bytes), hops,
            1000.0 * best);
        std::printf(
            "wire per decoded token: %.0f bytes sent by rank 0, about %.0f bytes over "
            "the whole chain (%d hops of the HC state + headers, 48-byte answer)\n",
            per_token_rank0, per_token_rank0 * (info.n_stages - 1) + 48.0, info.n_stages - 1);
    }
    return 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    sub.add_option("-m,--model", a->model,
                   "GGUF model (default: $MAGNETAR_MODEL, models/magnetar-tiny.gguf)");
    sub.add_option("-t,--threads", a->threads, "Threads per rank (default: physical cores)");
    sub.add_option("--prompt-tokens", a->prompt_tokens, "Prefill length")->capture_default_str();
    sub.add_option("--gen-tokens", a->gen_tokens, "Greedy decode steps")->capture_default_str();
    sub.add_option("--chunk", a->chunk,
                   "Prefill chunk (single process; pipelined runs use "
                   "--pipeline-chunk when smaller)")
        ->capture_default_str();
    sub.add_option("--reps", a->reps, "Repetitions (the best is printed)")->capture_default_str();
    add_pipeline_flags(sub, a->engine);
    return [a]() { return run(*a); };
}

}  // namespace

MAGNETAR_BENCH_COMMAND(pipeline, "pipeline",
                       "Pipelined prefill / decode under mpirun: t/s, per-hop cost, wire bytes",
                       setup);

}  // namespace magnetar::cli
