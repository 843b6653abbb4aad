// `magnetar bench serve`: concurrent streaming clients against the server on loopback, the load
// that an agent with side requests (or several users) puts on it. Each client sends its
// requests one after another (streaming Chat Completions, greedy, thinking off, a prompt of its
// own); the bench runs one client alone first, then all of them at once, and reports per pass
// the aggregate generation rate, the time to the first streamed token and the gaps between
// streamed chunks (p50 / p99), and the ratio of the aggregate rate to the single client's.
//
// The server is started in this process on the given model (one live session per client unless
// --parallel says otherwise, so that their decode steps are batched), or, with --url, any
// OpenAI-compatible server already listening (a peer engine's, for a comparison on the same
// load).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_command.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "cli/generation.h"
#include "core/format.h"
#include "core/progress.h"
#include "magnetar/engine.h"
#include "server/server.h"

namespace magnetar::cli {

namespace {

using clock_type = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

struct args {
    std::string model;
    int threads = 0;
    int64_t n_ctx = 8192;
    int clients = 4;
    int parallel = 0;  // live sessions of the server started here; 0: one per client
    int requests = 2;
    int64_t tokens = 64;
    std::string url;  // HOST:PORT of a running server; empty: start one here
    engine_flags engine;
};

// What one streamed request measured.
struct sample {
    bool ok = false;
    std::string error;
    double ttft_s = -1;          // send to the first chunk with reply text
    std::vector<double> gaps_s;  // between chunks with reply text
    int64_t generated = 0;       // usage.completion_tokens (else the chunks counted)
};

// One streaming chat completion; the reply's chunks timed as they arrive.
sample stream_one(const std::string& host, int port, const std::string& prompt, int64_t tokens) {
    sample s;
    httplib::Client cli(host, port);
    cli.set_read_timeout(600, 0);
    cli.set_connection_timeout(10, 0);
    const json body = {{"model", "bench"},
                       {"messages", {{{"role", "user"}, {"content", prompt}}}},
                       {"max_tokens", tokens},
                       {"temperature", 0},
                       {"thinking", false},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    std::string buf;
    int64_t chunks = 0;
    const auto t0 = clock_type::now();
    auto last = t0;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        buf.append(data, n);
        for (size_t end; (end = buf.find("\n\n")) != std::string::npos;) {
            const std::string event = buf.substr(0, end);
            buf.erase(0, end + 2);
            if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
            const json j = json::parse(event.substr(6), nullptr, false);
            if (!j.is_object()) continue;
            if (auto u = j.find("usage"); u != j.end() && u->is_object())
                s.generated = u->value("completion_tokens", int64_t{0});
            auto ch = j.find("choices");
            if (ch == j.end() || !ch->is_array() || ch->empty()) continue;
            const json& d = (*ch)[0].value("delta", json::object());
            const bool text =
                (d.contains("content") && d["content"].is_string() &&
                 !d["content"].get<std::string>().empty()) ||
                (d.contains("reasoning_content") && d["reasoning_content"].is_string() &&
                 !d["reasoning_content"].get<std::string>().empty());
            if (!text) continue;
            const auto now = clock_type::now();
            if (chunks == 0) {
                s.ttft_s = std::chrono::duration<double>(now - t0).count();
            } else {
                s.gaps_s.push_back(std::chrono::duration<double>(now - last).count());
            }
            last = now;
            ++chunks;
        }
        return true;
    };
    const httplib::Result r = cli.send(req);
    if (!r) {
        s.error = "no answer (" + httplib::to_string(r.error()) + ")";
        return s;
    }
    if (r->status != 200) {
        s.error = "HTTP " + std::to_string(r->status);
        return s;
    }
    if (s.generated == 0) s.generated = chunks;
    s.ok = true;
    return s;
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
    return v[std::min(i, v.size() - 1)];
}

struct pass_result {
    int clients = 0;
    int64_t requests = 0, errors = 0, generated = 0;
    double wall_s = 0;
    std::vector<double> ttft, gaps;
    std::string first_error;
    double tps() const { return wall_s > 0 ? static_cast<double>(generated) / wall_s : 0; }
};

pass_result run_pass(const args& a, const std::string& host, int port, int clients) {
    pass_result p;
    p.clients = clients;
    std::mutex mu;
    Progress bar(strfmt("%d client%s", clients, clients == 1 ? "" : "s"),
                 static_cast<uint64_t>(clients * a.requests), Progress::Unit::items);
    std::atomic<uint64_t> done{0};
    const auto t0 = clock_type::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
        threads.emplace_back([&, c] {
            for (int r = 0; r < a.requests; ++r) {
                const std::string prompt =
                    strfmt("Client %d, question %d: tell me about magnetars and the stars.", c, r);
                sample s = stream_one(host, port, prompt, a.tokens);
                std::lock_guard<std::mutex> lock(mu);
                ++p.requests;
                if (!s.ok) {
                    ++p.errors;
                    if (p.first_error.empty()) p.first_error = s.error;
                } else {
                    p.generated += s.generated;
                    if (s.ttft_s >= 0) p.ttft.push_back(s.ttft_s);
                    p.gaps.insert(p.gaps.end(), s.gaps_s.begin(), s.gaps_s.end());
                }
                bar.update(++done);
            }
        });
    }
    for (auto& t : threads) t.join();
    p.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    bar.finish();
    return p;
}

void print_pass(const pass_result& p) {
    std::printf("%7d  %8lld  %6lld  %9lld  %7.2f  %9.2f  %8.0f  %8.0f  %7.1f  %7.1f\n", p.clients,
                static_cast<long long>(p.requests), static_cast<long long>(p.errors),
                static_cast<long long>(p.generated), p.wall_s, p.tps(),
                percentile(p.ttft, 0.5) * 1e3, percentile(p.ttft, 0.99) * 1e3,
                percentile(p.gaps, 0.5) * 1e3, percentile(p.gaps, 0.99) * 1e3);
    std::fflush(stdout);
}

int run(const args& a) {
    if (a.clients < 1) throw std::runtime_error("--clients must be at least 1");
    if (a.requests < 1) throw std::runtime_error("--requests must be at least 1");
    if (a.tokens < 1) throw std::runtime_error("--tokens must be at least 1");
    std::string host = "127.0.0.1";
    int port = 0;
    std::unique_ptr<Engine> engine;
    std::unique_ptr<server::server> srv;
    if (!a.url.empty()) {
        const size_t colon = a.url.rfind(':');
        char* end = nullptr;
        const long p =
            colon == std::string::npos ? 0 : std::strtol(a.url.c_str() + colon + 1, &end, 10);
        if (colon == std::string::npos || !end || *end != '\0' || p < 1 || p > 65535) {
            throw std::runtime_error("--url: \"" + a.url + "\" is not HOST:PORT");
        }
        host = a.url.substr(0, colon);
        port = static_cast<int>(p);
    } else {
        engine_options eo;
        eo.model_path = resolve_model_path(a.model);
        eo.n_threads = a.threads;
        apply_engine_flags(a.engine, eo);
        check(Engine::load(eo, &engine));
        server::server_options so;
        so.port = 0;
        so.n_ctx = a.n_ctx;
        so.parallel = a.parallel > 0 ? a.parallel : a.clients;
        so.queue_size = static_cast<size_t>(std::max(64, a.clients * 2));
        srv = std::make_unique<server::server>(*engine, so);
        if (!srv->start()) throw std::runtime_error(srv->start_error());
        port = srv->port();
        std::fprintf(stderr,
                     "bench serve: %s, %d threads, %d live session%s of context %lld, on port "
                     "%d\n",
                     engine->info().name.c_str(), engine->info().n_threads, so.parallel,
                     so.parallel == 1 ? "" : "s", static_cast<long long>(a.n_ctx), port);
    }
    std::printf("# %d request%s per client, %lld tokens each, streaming, greedy; ms columns\n",
                a.requests, a.requests == 1 ? "" : "s", static_cast<long long>(a.tokens));
    std::printf(
        "clients  requests  errors  generated   wall_s  agg_tok/s  ttft_p50  ttft_p99  "
        "itl_p50  itl_p99\n");
    const pass_result one = run_pass(a, host, port, 1);
    print_pass(one);
    if (a.clients > 1) {
        const pass_result all = run_pass(a, host, port, a.clients);
        print_pass(all);
        std::printf("# aggregate rate with %d clients: %.2f x one client's\n", a.clients,
                    one.tps() > 0 ? all.tps() / one.tps() : 0.0);
        if (all.errors > 0) {
            std::fprintf(stderr, "bench serve: %lld of %lld requests failed (first: %s)\n",
                         static_cast<long long>(all.errors), static_cast<long long>(all.requests),
                         all.first_error.c_str());
        }
    }
    if (one.errors > 0) {
        std::fprintf(stderr, "bench serve: the single client's requests failed (first: %s)\n",
                     one.first_error.c_str());
    }
    if (srv) srv->stop();
    return one.errors > 0 ? 1 : 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    sub.add_option("-m,--model", a->model,
                   "Model GGUF of the server started here (default: $MAGNETAR_MODEL or "
                   "models/magnetar-tiny.gguf)");
    sub.add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
    add_backend_flags(sub, a->engine);
    sub.add_option("-c,--ctx,--ctx-size", a->n_ctx, "Context of the server started here")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{256}, int64_t{1} << 30));
    sub.add_option("--clients", a->clients, "Concurrent streaming clients of the second pass")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    sub.add_option("--parallel,--np", a->parallel,
                   "Live sessions of the server started here (serve --parallel; default: one "
                   "per client)")
        ->check(CLI::Range(1, 256));
    sub.add_option("--requests", a->requests, "Requests each client sends, one after another")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    sub.add_option("-n,--tokens", a->tokens, "Tokens each reply generates (max_tokens)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    sub.add_option("--url", a->url,
                   "HOST:PORT of an OpenAI-compatible server already listening, instead of "
                   "starting one here");
    sub.footer(
        "Prints one row per pass (one client alone, then --clients at once): requests, errors, "
        "generated tokens, wall time, aggregate tokens/s, time to first token and inter-chunk "
        "gap percentiles (ms), then the ratio of the two aggregate rates. See "
        "docs/performance.md.");
    return [a]() { return run(*a); };
}

}  // namespace

MAGNETAR_BENCH_COMMAND(serve, "serve",
                       "Concurrent streaming clients against the server: aggregate t/s, TTFT and "
                       "inter-token latency",
                       setup);

}  // namespace magnetar::cli
