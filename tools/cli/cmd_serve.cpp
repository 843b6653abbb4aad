// `magnetar serve`: the OpenAI- and Anthropic-compatible HTTP server (tools/server,
// docs/server.md). This file only parses the flags, loads the engine and waits for a signal.
#include <pthread.h>
#include <signal.h>

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "cli/generation.h"
#include "cli/log.h"
#include "magnetar/engine.h"
#include "server/server.h"

namespace magnetar::cli {

namespace {

struct args {
    std::string model;
    int threads = 0;
    server::server_options srv;
    double max_body_mb = 64;
    double kv_memory_mb = 0;
    double header_timeout_s = 10;
    double body_timeout_s = 60;
    engine_flags engine;
    CLI::Option* api_key_opt = nullptr;
    std::string log_format = "text";  // --log-format
};

// Flag values the server cannot run with, refused before the model loads.
void check_flags(args& a) {
    if (a.srv.port < 0 || a.srv.port > 65535) {
        throw std::runtime_error("--port must be 0..65535 (0: any free port), got " +
                                 std::to_string(a.srv.port));
    }
    if (!std::isfinite(a.max_body_mb) || a.max_body_mb <= 0 || a.max_body_mb > 4096) {
        throw std::runtime_error("--max-body-mb must be a number in (0, 4096]");
    }
    if (!std::isfinite(a.kv_memory_mb) || a.kv_memory_mb < 0 || a.kv_memory_mb > 1e9) {
        throw std::runtime_error("--kv-memory-mb must be a number in [0, 1e9] (0: no budget)");
    }
    a.srv.kv_budget_bytes = static_cast<uint64_t>(a.kv_memory_mb * 1048576.0);
    if (a.srv.queue_size < 1 || a.srv.queue_size > 100000) {
        throw std::runtime_error("--queue must be 1..100000");
    }
    if (a.srv.http_threads < 0 || a.srv.http_threads > 4096) {
        throw std::runtime_error("--http-threads must be 0 (automatic) .. 4096");
    }
    for (const auto& [name, v] : {std::pair{"--header-timeout-s", a.header_timeout_s},
                                  std::pair{"--body-timeout-s", a.body_timeout_s}}) {
        if (!std::isfinite(v) || v < 0.001 || v > 86400) {
            throw std::runtime_error(std::string(name) +
                                     " must be a number of seconds in "
                                     "[0.001, 86400]");
        }
    }
    if (a.srv.max_client_connections < 0) {
        throw std::runtime_error("--max-client-conns must be 0 (automatic) or more");
    }
    // An empty key would silently turn authentication off.
    const char* env_key = std::getenv("MAGNETAR_API_KEY");
    if (a.srv.api_key.empty() &&
        ((a.api_key_opt && a.api_key_opt->count() > 0) || (env_key && !*env_key))) {
        throw std::runtime_error(
            "the API key (--api-key / MAGNETAR_API_KEY) is empty; give a "
            "key or leave both unset for no authentication");
    }
    a.srv.max_body_bytes = static_cast<size_t>(a.max_body_mb * 1024 * 1024);
    a.srv.header_timeout_ms = static_cast<int>(a.header_timeout_s * 1000);
    a.srv.body_timeout_ms = static_cast<int>(a.body_timeout_s * 1000);
}

// SIGINT / SIGTERM are blocked in every thread (they inherit the mask) and taken by one
// signal thread from the start, never by a handler on a random thread. Until the server
// listens (model load, disk cache scan) a signal ends the process at once with a message:
// nothing needs saving yet. Afterwards the first one wakes serve() for a clean stop (which
// saves the live session); a second one during that stop exits at once.
struct signal_watch {
    std::mutex mu;
    std::condition_variable cv;
    bool listening = false;
    int sig = 0;

    static std::shared_ptr<signal_watch> start(const sigset_t& sigs) {
        auto w = std::make_shared<signal_watch>();
        std::thread([w, sigs] {
            for (;;) {
                int sig = 0;
                if (sigwait(&sigs, &sig) != 0) continue;
                std::lock_guard<std::mutex> lk(w->mu);
                if (!w->listening) {
                    std::fprintf(stderr, "magnetar serve: signal %d during start-up, exiting\n",
                                 sig);
                    std::_Exit(0);
                }
                if (w->sig != 0) {
                    std::fprintf(stderr, "magnetar serve: signal %d again, exiting now\n", sig);
                    std::_Exit(1);
                }
                w->sig = sig;
                w->cv.notify_all();
            }
        }).detach();
        return w;
    }
};

int serve(args& a) {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    signal(SIGPIPE, SIG_IGN);
    const std::shared_ptr<signal_watch> watch = signal_watch::start(sigs);

    check_flags(a);
    if (a.srv.host == "localhost") a.srv.host = "127.0.0.1";
    if (a.srv.disk.cold_max_tokens != 0 && a.srv.disk.cold_max_tokens < a.srv.disk.min_tokens)
        throw std::runtime_error(
            "--kv-cache-cold-max-tokens must be 0 or at least "
            "--kv-cache-min-tokens");
    engine_options eo;
    eo.model_path = resolve_model_path(a.model);
    eo.n_threads = a.threads;
    apply_engine_flags(a.engine, eo);
    std::unique_ptr<Engine> engine;
    const status st = Engine::load(eo, &engine);
    if (!st.ok()) throw std::runtime_error(st.message());
    report_engine(engine->info());
    if (a.engine.mtp_draft == 1) {
        throw std::runtime_error(
            "--mtp-draft 1 (drafts compared, not used) is a run / chat mode; serve speculates "
            "with 2 or more");
    }
    check_mtp_flags(a.engine, engine->info());
    a.srv.mtp_draft = a.engine.mtp_draft;
    a.srv.mtp_margin = a.engine.mtp_margin;
    a.srv.disk.log = log_notes();
    a.srv.request_log = log_notes();
    a.srv.log_all = log_details();
    a.srv.log_json = a.log_format == "json";

    server::server srv(*engine, a.srv);
    if (!srv.start()) throw std::runtime_error(srv.start_error());
    {
        std::lock_guard<std::mutex> lk(watch->mu);
        watch->listening = true;
    }
    note("magnetar serve: %s on http://%s:%d (context %lld tokens)\n", eo.model_path.c_str(),
         a.srv.host.c_str(), srv.port(), static_cast<long long>(a.srv.n_ctx));
    std::printf("listening on port %d\n", srv.port());
    std::fflush(stdout);
    int sig = 0;
    {
        std::unique_lock<std::mutex> lk(watch->mu);
        watch->cv.wait(lk, [&] { return watch->sig != 0; });
        sig = watch->sig;
    }
    note("magnetar serve: signal %d, stopping\n", sig);
    srv.stop();
    return 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    sub.add_option("-m,--model", a->model,
                   "Model GGUF (default: $MAGNETAR_MODEL or models/magnetar-tiny.gguf)");
    sub.add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
    add_engine_flags(sub, a->engine);
    add_mtp_flags(sub, a->engine);
    add_steering_flags(sub, a->engine);
    add_log_flags(sub);
    sub.add_option("--log-format", a->log_format,
                   "Request log on stderr, one line per request: text or json (an object per "
                   "line); --log-disable turns it off, --verbose adds /health and /metrics")
        ->capture_default_str()
        ->check(CLI::IsMember({"text", "json"}));
    sub.add_option("-c,--ctx,--ctx-size", a->srv.n_ctx,
                   "Context size of each live session (tokens)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{16}, int64_t{1} << 30));
    sub.add_option("--parallel,--np", a->srv.parallel,
                   "Live sessions: requests on different sessions run at the same time, their "
                   "decode steps batched (sessions are created as requests need them)")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
    sub.add_option("--kv-memory-mb", a->kv_memory_mb,
                   "Memory budget of the live sessions' KV state (MiB): no more sessions than "
                   "fit (0: no budget beyond --parallel)")
        ->capture_default_str();
    sub.add_option("-n,--tokens", a->srv.default_max_tokens,
                   "Output limit when a request gives none (capped by the context)")
        ->capture_default_str();
    add_sampling_flags(sub, a->srv.sampling,
                       "Sampling seed of a request that gives none, > 0 for reproducible replies; "
                       "-1 or none: a fresh one per request");
    sub.add_option("--host", a->srv.host, "Bind address (localhost = 127.0.0.1)")
        ->capture_default_str();
    sub.add_option("--port", a->srv.port, "Port (0: any free port)")->capture_default_str();
    a->api_key_opt = sub.add_option("--api-key", a->srv.api_key,
                                    "Require this key (Authorization: Bearer KEY or x-api-key: "
                                    "KEY); an empty key is an error")
                         ->envname("MAGNETAR_API_KEY");
    sub.add_flag("--cors", a->srv.cors, "Add Access-Control-Allow-* headers to every response");
    sub.add_option("--queue", a->srv.queue_size,
                   "Requests that may wait for the worker; more get 503 + Retry-After")
        ->capture_default_str();
    sub.add_option("--http-threads", a->srv.http_threads,
                   "HTTP connection threads (default: queue + 16)");
    sub.add_option("--max-body-mb", a->max_body_mb,
                   "Request body limit in MiB, (0, 4096], any transfer encoding (413 above)")
        ->capture_default_str();
    sub.add_option("--header-timeout-s", a->header_timeout_s,
                   "A request head must be complete this long after its first byte (408 after)")
        ->capture_default_str();
    sub.add_option("--body-timeout-s", a->body_timeout_s,
                   "A request body must be complete this long after its head (408 after)")
        ->capture_default_str();
    sub.add_option("--max-client-conns", a->srv.max_client_connections,
                   "Open connections per client address, 429 above (default: HTTP threads - "
                   "max(2, threads / 8))");
    sub.add_option("--model-id,--alias", a->srv.model_id,
                   "Model id reported by /v1/models (--alias: llama.cpp's name)")
        ->capture_default_str();
    sub.add_option_function<double>(
        "--timeout",
        [a](double s) {
            a->header_timeout_s = s;
            a->body_timeout_s = s;
        },
        "Both --header-timeout-s and --body-timeout-s (llama.cpp's read timeout), seconds");
    sub.add_flag("!--disable-exact-dsml-tool-replay", a->srv.exact_replay,
                 "Render tool-call history canonically instead of replaying sampled DSML");
    sub.add_option("--tool-memory-max-ids", a->srv.replay_max_ids,
                   "Tool ids remembered for exact DSML replay")
        ->capture_default_str();
    server::disk_cache_options& d = a->srv.disk;
    sub.add_option("--kv-disk-dir", d.dir,
                   "Disk KV cache directory: long prefixes survive session switches and restarts "
                   "(docs/kvcache.md)");
    sub.add_option("--kv-disk-space-mb", d.space_mb, "Disk KV cache budget (MiB)")
        ->capture_default_str();
    sub.add_option("--kv-cache-min-tokens", d.min_tokens, "Never save or load shorter prefixes")
        ->capture_default_str();
    sub.add_option("--kv-cache-cold-max-tokens", d.cold_max_tokens,
                   "Cold saves for prompts of min..N tokens (0: none)")
        ->capture_default_str();
    sub.add_option("--kv-cache-continued-interval-tokens", d.continued_interval,
                   "Spacing of continued saves while prefilling (0: none)")
        ->capture_default_str();
    sub.add_option("--kv-cache-boundary-trim-tokens", d.boundary_trim,
                   "Tail tokens trimmed before a cold save")
        ->capture_default_str();
    sub.add_option("--kv-cache-boundary-align-tokens", d.boundary_align,
                   "Alignment of cold / continued save boundaries (0: none)")
        ->capture_default_str();
    sub.add_flag("--kv-cache-reject-different-quant", d.reject_different_quant,
                 "Load only files written with the same routed-expert quantization");
    sub.add_flag("--test-hooks", a->srv.test_hooks,
                 "TESTS ONLY: honour the request field x_magnetar_forced_output (the generated "
                 "text is that string)");
    sub.footer(
        "Endpoints: /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, "
        "/v1/messages/count_tokens, /v1/models, /health, /metrics. See docs/server.md.");
    return [a]() { return serve(*a); };
}

}  // namespace

MAGNETAR_COMMAND(serve, "serve", "OpenAI- and Anthropic-compatible HTTP server", setup);

}  // namespace magnetar::cli
