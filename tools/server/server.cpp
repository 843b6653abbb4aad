// `magnetar serve`: see server.h.
#include "server/server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "server/api.h"
#include "server/http_guard.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::server {

namespace {

// Endpoint indexes of http_stats::requests.
enum endpoint {
    ep_chat,
    ep_completions,
    ep_messages,
    ep_count_tokens,
    ep_responses,
    ep_models,
    ep_health,
    ep_metrics
};
constexpr const char* kEndpointNames[] = {"chat_completions", "completions", "messages",
                                          "count_tokens",     "responses",   "models",
                                          "health",           "metrics"};

api_style style_of(const std::string& path) {
    return path.rfind("/v1/messages", 0) == 0 ? api_style::anthropic : api_style::openai;
}

// Why binding host:port fails, found by trying it again the way the server binds (the library
// keeps no error): the system's reason, with a hint for the common cases.
std::string bind_failure(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
        return std::string("cannot resolve the address: ") + ::gai_strerror(rc);
    std::string why = "the address cannot be bound";
    for (addrinfo* a = res; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            why = std::strerror(errno);
            continue;
        }
        int yes = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        const bool bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
        const int err = errno;
        ::close(fd);
        if (bound) continue;
        why = std::strerror(err);
        if (err == EADDRINUSE) why += " (another server listens on that port?)";
        if (err == EACCES) why += " (ports below 1024 need privileges)";
        if (err == EADDRNOTAVAIL) why += " (no interface of this machine has that address)";
        break;
    }
    ::freeaddrinfo(res);
    return why;
}

worker_options worker_options_of(const server_options& o) {
    worker_options w;
    w.n_ctx = o.n_ctx;
    w.parallel = o.parallel;
    w.kv_budget_bytes = o.kv_budget_bytes;
    w.prefill_piece = o.prefill_piece;
    w.queue_size = o.queue_size;
    w.exact_replay = o.exact_replay;
    w.replay_max_ids = o.replay_max_ids;
    w.disk = o.disk;
    w.before_job = o.test_before_job;
    w.mtp_draft = o.mtp_draft;
    w.mtp_margin = o.mtp_margin;
    return w;
}

}  // namespace

struct server::impl {
    impl(const Engine& e, server_options o)
        : work(e, worker_options_of(o)), ctx{e,        *e.vocab(), special_literals(*e.vocab()),
                                             o,        work,       stats,
                                             responses} {}

    worker work;
    http_stats stats;
    response_store responses;
    context ctx;
    guarded_server http;
    std::thread listener;
};

server::server(const Engine& engine, server_options opts) {
    if (!engine.vocab()) throw Error("serve: the model has no tokenizer");
    if (opts.http_threads <= 0) opts.http_threads = static_cast<int>(opts.queue_size) + 16;
    // One client address may hold all HTTP threads but a reserve, so others still get in.
    if (opts.max_client_connections <= 0) {
        opts.max_client_connections =
            std::max(1, opts.http_threads - std::max(2, opts.http_threads / 8));
    }
    impl_ = std::make_unique<impl>(engine, std::move(opts));
}

server::~server() {
    stop();
}

std::vector<int32_t> server::last_prompt_tokens() const {
    return impl_->work.last_prompt_tokens();
}

std::string server::metrics_text() const {
    const worker_stats& w = impl_->work.stats();
    const http_stats& h = impl_->stats;
    std::string out;
    char line[256];
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
        std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name,
                      type, name, v);
        out += line;
    };
    out += "# HELP magnetar_requests_total HTTP requests by endpoint.\n";
    out += "# TYPE magnetar_requests_total counter\n";
    for (int i = 0; i < 8; ++i) {
        std::snprintf(line, sizeof line, "magnetar_requests_total{endpoint=\"%s\"} %llu\n",
                      kEndpointNames[i], static_cast<unsigned long long>(h.requests[i].load()));
        out += line;
    }
    metric("magnetar_http_errors_4xx_total", "counter", "Responses with a 4xx status.",
           static_cast<double>(h.errors_4xx.load()));
    metric("magnetar_http_errors_5xx_total", "counter", "Responses with a 5xx status.",
           static_cast<double>(h.errors_5xx.load()));
    metric("magnetar_client_disconnects_total", "counter",
           "Clients that went away before their response was complete.",
           static_cast<double>(h.disconnects.load()));
    metric("magnetar_jobs_total", "counter", "Generation jobs run by the worker.",
           static_cast<double>(w.jobs.load()));
    metric("magnetar_jobs_cancelled_total", "counter", "Jobs cancelled (client gone, shutdown).",
           static_cast<double>(w.jobs_cancelled.load()));
    metric("magnetar_jobs_failed_total", "counter", "Jobs that ended with an error.",
           static_cast<double>(w.jobs_failed.load()));
    metric("magnetar_prompt_tokens_total", "counter",
           "Prompt tokens synchronised into the session.",
           static_cast<double>(w.prompt_tokens.load()));
    metric("magnetar_cached_tokens_total", "counter",
           "Prompt tokens reused from the live KV cache.",
           static_cast<double>(w.cached_tokens.load()));
    metric("magnetar_prefill_tokens_total", "counter", "Prompt tokens evaluated.",
           static_cast<double>(w.prefill_tokens.load()));
    metric("magnetar_generated_tokens_total", "counter", "Generated tokens.",
           static_cast<double>(w.generated_tokens.load()));
    metric("magnetar_cache_hits_total", "counter", "Jobs that reused part of the live KV cache.",
           static_cast<double>(w.cache_hits.load()));
    metric("magnetar_cache_misses_total", "counter", "Jobs that reused nothing.",
           static_cast<double>(w.cache_misses.load()));
    metric("magnetar_disk_cache_hits_total", "counter", "Prompts resumed from a disk KV file.",
           static_cast<double>(w.disk_hits.load()));
    metric("magnetar_disk_cache_loaded_tokens_total", "counter",
           "Tokens restored from disk KV files.", static_cast<double>(w.disk_loaded_tokens.load()));
    metric("magnetar_disk_cache_saves_total", "counter", "Disk KV files written.",
           static_cast<double>(w.disk_saves.load()));
    const double pre_s = static_cast<double>(w.prefill_us.load()) * 1e-6;
    const double dec_s = static_cast<double>(w.decode_us.load()) * 1e-6;
    metric("magnetar_prefill_seconds_total", "counter", "Time spent in prompt evaluation.", pre_s);
    metric("magnetar_decode_seconds_total", "counter", "Time spent generating.", dec_s);
    metric("magnetar_prefill_tokens_per_second", "gauge", "Prefill speed over the server's life.",
           pre_s > 0 ? static_cast<double>(w.prefill_tokens.load()) / pre_s : 0.0);
    metric("magnetar_decode_tokens_per_second", "gauge", "Decode speed over the server's life.",
           dec_s > 0 ? static_cast<double>(w.generated_tokens.load()) / dec_s : 0.0);
    auto histogram = [&](const char* name, const char* help, const latency_histogram& hg) {
        std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
        out += line;
        uint64_t cumulative = 0;
        for (size_t b = 0; b <= latency_histogram::kBuckets; ++b) {
            cumulative += hg.counts[b].load();
            if (b < latency_histogram::kBuckets) {
                std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name,
                              latency_histogram::kBounds[b],
                              static_cast<unsigned long long>(cumulative));
            } else {
                std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                              static_cast<unsigned long long>(cumulative));
            }
            out += line;
        }
        std::snprintf(line, sizeof line, "%s_sum %.6f\n%s_count %llu\n", name,
                      static_cast<double>(hg.sum_us.load()) * 1e-6, name,
                      static_cast<unsigned long long>(cumulative));
        out += line;
    };
    histogram("magnetar_time_to_first_token_seconds",
              "From a job's submission to its first generated token.", w.time_to_first_token);
    histogram("magnetar_request_duration_seconds",
              "From a job's submission to its end (queue, prefill and generation).",
              w.job_duration);
    const std::vector<slot_gauges> slots = impl_->work.slots();
    auto slot_gauge = [&](const char* name, const char* help, auto value) {
        std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
        out += line;
        for (size_t i = 0; i < slots.size(); ++i) {
            std::snprintf(line, sizeof line, "%s{slot=\"%zu\"} %.17g\n", name, i,
                          static_cast<double>(value(slots[i])));
            out += line;
        }
    };
    slot_gauge("magnetar_context_tokens",
               "Positions the slot's session holds after its latest job.",
               [](const slot_gauges& g) { return g.context_tokens; });
    slot_gauge("magnetar_context_size_tokens", "Context of the slot's session.",
               [](const slot_gauges& g) { return g.context_size; });
    slot_gauge("magnetar_kv_cache_bytes", "Bytes of the slot's cache state and checkpoints.",
               [](const slot_gauges& g) { return g.kv_bytes; });
    slot_gauge("magnetar_slot_busy", "1 while a job runs on the slot.",
               [](const slot_gauges& g) { return g.busy ? 1 : 0; });
    metric("magnetar_slots", "gauge", "Live sessions (at most --parallel).",
           static_cast<double>(slots.size()));
    metric("magnetar_batched_steps_total", "counter",
           "Decode steps that evaluated two or more jobs' tokens in one forward pass.",
           static_cast<double>(w.batched_steps.load()));
    metric("magnetar_batched_tokens_total", "counter", "Tokens those batched steps evaluated.",
           static_cast<double>(w.batched_tokens.load()));
    metric("magnetar_mtp_steps_total", "counter",
           "Speculative decode steps that verified at least one MTP draft.",
           static_cast<double>(w.spec_steps.load()));
    metric("magnetar_mtp_drafted_tokens_total", "counter", "MTP drafts verified.",
           static_cast<double>(w.spec_drafted.load()));
    metric("magnetar_mtp_accepted_tokens_total", "counter", "MTP drafts kept.",
           static_cast<double>(w.spec_kept.load()));
    metric("magnetar_mtp_acceptance_ratio", "gauge",
           "Kept / verified MTP drafts over the server's life.",
           w.spec_drafted.load() > 0 ? static_cast<double>(w.spec_kept.load()) /
                                           static_cast<double>(w.spec_drafted.load())
                                     : 0.0);
    metric("magnetar_queue_depth", "gauge", "Jobs waiting for the worker.",
           static_cast<double>(impl_->work.queue_depth()));
    metric("magnetar_queue_rejected_total", "counter", "Requests refused with 503 (queue full).",
           static_cast<double>(w.queue_rejected.load()));
    metric("magnetar_busy", "gauge", "Jobs running (prefilling or generating).",
           static_cast<double>(w.busy.load()));
    return out;
}

bool server::start() {
    impl& s = *impl_;
    guarded_server& http = s.http;
    context& ctx = s.ctx;
    const server_options& o = ctx.opts;
    const int n_threads = o.http_threads;
    http.new_task_queue = [n_threads] {
        return new httplib::ThreadPool(static_cast<size_t>(n_threads));
    };
    bound_allocator_growth();
    http_limits lim;
    lim.max_request_line = o.max_request_line;
    lim.max_header_count = o.max_header_count;
    lim.max_header_bytes = o.max_header_bytes;
    lim.max_body_bytes = o.max_body_bytes;
    lim.idle_timeout_ms = o.idle_timeout_ms;
    lim.header_timeout_ms = o.header_timeout_ms;
    lim.body_timeout_ms = o.body_timeout_ms;
    lim.max_client_connections = o.max_client_connections;
    http.configure(lim, [&ctx](int status, const std::string& path, const std::string& msg) {
        ctx.stats.errors_4xx++;
        return error_body(style_of(path), api_error(status, msg));
    });
    http.set_read_timeout(30, 0);
    http.set_write_timeout(10, 0);

    const bool cors = o.cors;
    const std::string api_key = o.api_key;
    http.set_pre_routing_handler([cors, api_key](const httplib::Request& req,
                                                 httplib::Response& res) {
        current_trace() = request_trace{};
        current_trace().start = std::chrono::steady_clock::now();
        if (req.method == "OPTIONS") {
            res.status = 204;
            return httplib::Server::HandlerResponse::Handled;
        }
        const bool open = req.path == "/health" || req.path == "/";
        if (!api_key.empty() && !open) {
            std::string key = req.get_header_value("x-api-key");
            const std::string auth = req.get_header_value("Authorization");
            if (key.empty() && auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
            if (!keys_equal(api_key, key)) {
                send_error(res, style_of(req.path),
                           api_error(401, "invalid or missing API key", "authentication_error"));
                return httplib::Server::HandlerResponse::Handled;
            }
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_post_routing_handler([cors, &ctx](const httplib::Request&, httplib::Response& res) {
        if (cors) {
            res.set_header("Access-Control-Allow-Origin", "*");
            res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            res.set_header("Access-Control-Allow-Headers", "*");
        }
        if (res.status >= 500)
            ctx.stats.errors_5xx++;
        else if (res.status >= 400)
            ctx.stats.errors_4xx++;
    });
    if (o.request_log) {
        const bool json_line = o.log_json, all = o.log_all;
        http.set_logger(
            [json_line, all](const httplib::Request& req, const httplib::Response& res) {
                request_trace& t = current_trace();
                if (all || (req.path != "/health" && req.path != "/metrics")) {
                    const std::string line = request_log_line(req, res, t, json_line) + "\n";
                    std::fwrite(line.data(), 1, line.size(), stderr);
                    std::fflush(stderr);
                }
                t = request_trace{};
            });
    }
    const int body_timeout_ms = o.body_timeout_ms;
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [body_timeout_ms](const httplib::Request& req,
                          httplib::Response& res) -> httplib::Server::HandlerResponse {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            // A body the guard cut short: cpp-httplib says 400, the guard knows why.
            if (const int t = guarded_server::transport_status()) res.status = t;
            const api_style st = style_of(req.path);
            if (res.status == 404) {
                send_error(res, st, api_error(404, "unknown endpoint", "not_found_error"));
            } else if (res.status == 413) {
                send_error(res, st,
                           api_error(413, "request body too large", "invalid_request_error"));
            } else if (res.status == 408) {
                send_error(res, st,
                           api_error(408, "request body not complete within " +
                                              std::to_string(body_timeout_ms) + " ms"));
            } else if (res.status == 400) {
                send_error(res, st, api_error(400, "bad HTTP request"));
            } else {
                const int code = res.status;
                send_error(res, st,
                           api_error(code, "request failed",
                                     code >= 500 ? "server_error" : "invalid_request_error"));
            }
            return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler(
        [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
            std::string msg = "internal error";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                msg = e.what();
            } catch (...) {
            }
            send_error(res, style_of(req.path), api_error(500, msg, "server_error"));
        });

    // Wraps a handler: counts it and turns api_error / magnetar::Error into error bodies.
    auto route = [&ctx](endpoint ep,
                        void (*fn)(context&, const httplib::Request&, httplib::Response&)) {
        return [&ctx, ep, fn](const httplib::Request& req, httplib::Response& res) {
            ctx.stats.requests[ep]++;
            const api_style st = style_of(req.path);
            try {
                fn(ctx, req, res);
            } catch (const api_error& e) {
                send_error(res, st, e);
            } catch (const Error& e) {
                send_error(res, st, api_error(400, e.what()));
            } catch (const nlohmann::json::exception& e) {
                send_error(res, st,
                           api_error(400, std::string("invalid JSON request: ") + e.what()));
            }
        };
    };
    http.Post("/v1/chat/completions", route(ep_chat, handle_chat_completions));
    http.Post("/v1/completions", route(ep_completions, handle_completions));
    http.Post("/v1/messages", route(ep_messages, handle_messages));
    http.Post("/v1/messages/count_tokens", route(ep_count_tokens, handle_count_tokens));
    http.Post("/v1/responses", route(ep_responses, handle_responses));
    http.Get(R"(/v1/responses/([^/]+))", route(ep_responses, handle_get_response));
    http.Get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
        ctx.stats.requests[ep_models]++;
        json list = json::object();
        list["object"] = "list";
        list["data"] = json::array({model_object(ctx, ctx.opts.model_id)});
        res.set_content(list.dump() + "\n", "application/json");
    });
    http.Get(R"(/v1/models/(.+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
        ctx.stats.requests[ep_models]++;
        const std::string id = req.matches[1];
        if (id != ctx.opts.model_id) {
            api_error e(404, "The model '" + id + "' does not exist", "invalid_request_error");
            e.code = "model_not_found";
            send_error(res, api_style::openai, e);
            return;
        }
        res.set_content(model_object(ctx, id).dump() + "\n", "application/json");
    });
    http.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
        ctx.stats.requests[ep_health]++;
        json h = json::object();
        h["status"] = "ok";
        h["model"] = ctx.opts.model_id;
        h["queue_depth"] = ctx.work.queue_depth();
        res.set_content(h.dump() + "\n", "application/json");
    });
    http.Get("/metrics", [this, &ctx](const httplib::Request&, httplib::Response& res) {
        ctx.stats.requests[ep_metrics]++;
        res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });

    // cpp-httplib's default socket options add SO_REUSEPORT, with which a second server on a
    // port in use starts and takes part of its connections. SO_REUSEADDR alone only lets a
    // restart bind while old connections are in TIME_WAIT.
    http.set_socket_options([](socket_t sock) {
        int yes = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    start_error_.clear();
    if (o.port == 0) {
        port_ = http.bind_to_any_port(o.host);
    } else {
        port_ = http.bind_to_port(o.host, o.port) ? o.port : -1;
    }
    if (port_ <= 0) {
        start_error_ = "cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " +
                       bind_failure(o.host, o.port);
        port_ = 0;
        return false;
    }
    http.raise_backlog();
    s.listener = std::thread([&http] { http.listen_after_bind(); });
    return true;
}

void server::wait() {
    if (impl_ && impl_->listener.joinable()) impl_->listener.join();
}

void server::stop() {
    if (!impl_) return;
    impl_->work.stop();  // running and queued jobs end; their HTTP threads finish
    impl_->http.stop();
    if (impl_->listener.joinable()) impl_->listener.join();
}

}  // namespace magnetar::server
