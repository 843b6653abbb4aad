// Shared pieces of the HTTP front end: see http_util.h.
#include "server/http_util.h"

#include <dirent.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "chat/tool_id.h"
#include "server/request_schema.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::server {

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

std::string error_body(api_style style, const api_error& e) {
    json err = json::object();
    if (style == api_style::anthropic) {
        std::string type = e.type;
        if (e.status == 401) type = "authentication_error";
        if (e.status == 404) type = "not_found_error";
        if (e.status == 413) type = "request_too_large";
        if (e.status == 429) type = "rate_limit_error";
        if (e.status == 503) type = "overloaded_error";
        if (e.status >= 500 && e.status != 503) type = "api_error";
        err["type"] = type;
        err["message"] = e.what();
        for (auto& [k, v] : e.extra.items()) err[k] = v;
        json body = json::object();
        body["type"] = "error";
        body["error"] = std::move(err);
        return body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    }
    err["message"] = e.what();
    err["type"] = e.type;
    err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
    err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
    for (auto& [k, v] : e.extra.items()) err[k] = v;
    json body = json::object();
    body["error"] = std::move(err);
    return body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

void send_error(httplib::Response& res, api_style style, const api_error& e) {
    res.status = e.status;
    if (e.status == 503) res.set_header("Retry-After", "1");
    res.set_content(error_body(style, e), "application/json");
}

api_error context_error(int64_t n_prompt, int64_t n_ctx, const char* param, api_style style) {
    // The wording each API's clients look for to compact and retry: Anthropic's "prompt is too
    // long" (Claude Code), OpenAI's "maximum context length" with context_length_exceeded.
    const std::string n = std::to_string(n_prompt), m = std::to_string(n_ctx);
    api_error e(400, style == api_style::anthropic
                         ? "prompt is too long: " + n + " tokens > " + m + " maximum"
                         : "This model's maximum context length is " + m +
                               " tokens. However, your messages resulted in " + n +
                               " tokens. Please reduce the length of the messages.");
    e.param = param;
    e.code = "context_length_exceeded";
    e.extra["n_prompt_tokens"] = n_prompt;
    e.extra["n_ctx"] = n_ctx;
    return e;
}

// ---------------------------------------------------------------------------------------------
// JSON fields
// ---------------------------------------------------------------------------------------------

json parse_body(const std::string& body) {
    return parse_request_json(body);
}

namespace {
const json* field(const json& o, const char* key) {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) return nullptr;
    return &*it;
}
[[noreturn]] void type_error(const char* key, const char* what) {
    api_error e(400, std::string("invalid JSON request: '") + key + "' must be " + what);
    e.param = key;
    throw e;
}
}  // namespace

std::optional<bool> opt_bool(const json& o, const char* key) {
    const json* v = field(o, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) type_error(key, "a boolean");
    return v->get<bool>();
}

std::optional<double> opt_number(const json& o, const char* key) {
    const json* v = field(o, key);
    if (!v) return std::nullopt;
    if (!v->is_number()) type_error(key, "a number");
    const double d = v->get<double>();
    if (!std::isfinite(d)) type_error(key, "a finite number");
    return d;
}

std::optional<int64_t> opt_int(const json& o, const char* key) {
    const json* v = field(o, key);
    if (!v) return std::nullopt;
    if (!v->is_number()) type_error(key, "an integer");
    if (v->is_number_integer()) {
        if (v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX) return INT64_MAX;
        return v->get<int64_t>();
    }
    const double d = v->get<double>();
    if (!std::isfinite(d)) type_error(key, "an integer");
    if (d > 9.2e18) return INT64_MAX;
    if (d < -9.2e18) return INT64_MIN;
    return static_cast<int64_t>(d);  // truncated, as ds4 does
}

std::optional<std::string> opt_string(const json& o, const char* key) {
    const json* v = field(o, key);
    if (!v) return std::nullopt;
    if (!v->is_string()) type_error(key, "a string");
    return v->get<std::string>();
}

std::vector<std::string> string_list(const json& o, const char* key) {
    std::vector<std::string> out;
    const json* v = field(o, key);
    if (!v) return out;
    if (v->is_string()) {
        if (!v->get_ref<const std::string&>().empty()) out.push_back(v->get<std::string>());
        return out;
    }
    if (!v->is_array()) type_error(key, "a string or an array of strings");
    for (const auto& e : *v) {
        if (!e.is_string()) type_error(key, "a string or an array of strings");
        if (!e.get_ref<const std::string&>().empty()) out.push_back(e.get<std::string>());
    }
    return out;
}

std::string content_text(const json& v, const char* what) {
    if (v.is_null()) return {};
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array()) {
        std::string out;
        for (const auto& e : v) {
            if (e.is_string()) {
                out += e.get<std::string>();
            } else if (e.is_object()) {
                auto t = e.find("text");
                if (t != e.end() && t->is_string()) out += t->get<std::string>();
            }
        }
        return out;
    }
    type_error(what, "a string, an array of content parts or null");
}

std::string random_hex(size_t n_bytes) {
    return chat::random_hex(n_bytes);
}

int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

void read_sampling(const json& o, const sampling_params& defaults, bool thinking,
                   sampling_fields allow, sampling_params* p) {
    *p = defaults;
    // Parsed (and type-checked) even when thinking overrides them.
    const auto temperature = opt_number(o, "temperature");
    const auto top_p = opt_number(o, "top_p");
    const auto top_k = allow.top_k ? opt_int(o, "top_k") : std::nullopt;
    const auto min_p = allow.min_p ? opt_number(o, "min_p") : std::nullopt;
    const auto seed = allow.seed ? opt_int(o, "seed") : std::nullopt;
    const auto frequency = allow.penalties ? opt_number(o, "frequency_penalty") : std::nullopt;
    const auto presence = allow.penalties ? opt_number(o, "presence_penalty") : std::nullopt;
    if (seed && *seed > 0) p->seed = static_cast<uint64_t>(*seed);
    if (thinking) return;
    if (temperature) p->temperature = static_cast<float>(*temperature);
    if (top_p) p->top_p = static_cast<float>(*top_p);
    if (top_k) p->top_k = static_cast<int32_t>(std::clamp<int64_t>(*top_k, -1, 1 << 20));
    if (min_p) p->min_p = static_cast<float>(*min_p);
    if (frequency) p->frequency_penalty = static_cast<float>(*frequency);
    if (presence) p->presence_penalty = static_cast<float>(*presence);
}

int64_t clamp_max_tokens(const context& ctx, std::optional<int64_t> requested,
                         int64_t prompt_tokens) {
    int64_t n = requested ? std::max<int64_t>(*requested, 0) : ctx.opts.default_max_tokens;
    n = std::min(n, ctx.opts.n_ctx - prompt_tokens);
    return std::max<int64_t>(n, 0);
}

chat::forced_call_start forced_call_for(const chat::tool_list& tools, const std::string& name,
                                        const char* param) {
    if (tools.empty()) {
        api_error e(400, std::string(param) + " requires a tool call, but no tools are offered");
        e.param = param;
        throw e;
    }
    if (!name.empty()) {
        bool found = false;
        for (const auto& t : tools) {
            const json* obj = &t;
            if (auto fn = t.find("function"); fn != t.end() && fn->is_object()) obj = &*fn;
            if (obj->value("name", std::string()) == name) found = true;
        }
        if (!found) {
            api_error e(400, std::string(param) + " names the tool '" + name +
                                 "', which is not among the tools offered");
            e.param = param;
            throw e;
        }
    }
    return chat::forced_tool_call_start(name);
}

std::shared_ptr<job> make_job(const context& ctx, gen_request r, const json& body, api_style style,
                              const char* param) {
    const auto n = static_cast<int64_t>(r.input.tokens.size());
    if (n >= ctx.opts.n_ctx) throw context_error(n, ctx.opts.n_ctx, param, style);
    if (ctx.opts.test_hooks) {
        auto f = body.find("x_magnetar_forced_output");
        if (f != body.end() && f->is_string()) r.forced_output = f->get<std::string>();
    }
    if (auto st = body.find("x_magnetar_steering"); st != body.end() && st->is_object()) {
        const model_info& info = ctx.engine.info();
        if (info.steering_file.empty()) {
            api_error e(400,
                        "x_magnetar_steering: the server runs without a steering file "
                        "(start it with --dir-steering-file)");
            e.param = "x_magnetar_steering";
            throw e;
        }
        steering_scales sc{info.steering_ffn, info.steering_attn};
        if (const auto f = opt_number(*st, "ffn")) sc.ffn = static_cast<float>(*f);
        if (const auto a = opt_number(*st, "attn")) sc.attn = static_cast<float>(*a);
        r.steering = sc;
    }
    return std::make_shared<job>(std::move(r));
}

// ---------------------------------------------------------------------------------------------
// Client disconnects
// ---------------------------------------------------------------------------------------------

int connection_fd(const httplib::Request& req) {
    // cpp-httplib does not expose the socket; find it by its local and remote ports.
    DIR* d = opendir("/proc/self/fd");
    if (!d) return -1;
    int found = -1;
    while (dirent* e = readdir(d)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (!end || *end != '\0' || fd < 0) continue;
        struct stat st {};
        if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        sockaddr_storage local{}, peer{};
        socklen_t ll = sizeof local, pl = sizeof peer;
        if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
            getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) {
            continue;
        }
        auto port_of = [](const sockaddr_storage& a) -> int {
            if (a.ss_family == AF_INET)
                return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
            if (a.ss_family == AF_INET6) {
                return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
            }
            return -1;
        };
        if (port_of(local) == req.local_port && port_of(peer) == req.remote_port) {
            found = static_cast<int>(fd);
            break;
        }
    }
    closedir(d);
    return found;
}

bool client_gone(int fd) {
    // Only a connection that is closed both ways (a reset, or our own side shut) counts. An end
    // of input alone is a client that shut down its sending side after the request and still
    // reads the answer (shutdown(SHUT_WR)); a client that closed outright is seen at the next
    // write, which the peer answers with a reset.
    if (fd < 0) return false;
    pollfd p{fd, 0, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// ---------------------------------------------------------------------------------------------
// Serving a job
// ---------------------------------------------------------------------------------------------

void sse_data(std::string& out, const json& v) {
    out += "data: ";
    out += v.dump(-1, ' ', false, json::error_handler_t::replace);
    out += "\n\n";
}

void sse_event(std::string& out, const char* name, const json& v) {
    out += "event: ";
    out += name;
    out += "\ndata: ";
    out += v.dump(-1, ' ', false, json::error_handler_t::replace);
    out += "\n\n";
}

namespace {

void submit_or_throw(context& ctx, const std::shared_ptr<job>& j) {
    switch (ctx.work.submit(j)) {
        case worker::submit_result::ok:
            return;
        case worker::submit_result::queue_full:
            throw api_error(503, "server busy: the wait queue is full, retry later",
                            "server_error");
        case worker::submit_result::stopping:
            throw api_error(503, "server shutting down", "server_error");
    }
}

api_error failure_error(const context& ctx, const gen_result& r, const char* param,
                        api_style style) {
    if (r.out_of_memory) return api_error(503, r.error, "server_error");
    if (r.context_overflow)
        return context_error(r.usage.prompt_tokens, ctx.opts.n_ctx, param, style);
    return api_error(500, r.error.empty() ? "generation failed" : r.error, "server_error");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Request log
// ---------------------------------------------------------------------------------------------

request_trace& current_trace() {
    thread_local request_trace t;
    return t;
}

namespace {

void trace_result(const gen_result& r) {
    request_trace& t = current_trace();
    t.generated = true;
    t.usage = r.usage;
    t.first_token_s = r.first_token_s;
    t.finish = r.finish;
}

}  // namespace

std::string request_log_line(const httplib::Request& req, const httplib::Response& res,
                             const request_trace& t, bool json_line) {
    const bool timed = t.start != std::chrono::steady_clock::time_point{};
    const double total =
        timed ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t.start).count()
              : -1;
    const std::string client = req.remote_addr + ":" + std::to_string(req.remote_port);
    if (json_line) {
        json j = json::object();
        j["method"] = req.method;
        j["path"] = req.path;
        j["status"] = res.status;
        j["client"] = client;
        if (t.generated) {
            j["prompt_tokens"] = t.usage.prompt_tokens;
            j["cached_tokens"] = t.usage.cached_tokens;
            j["generated_tokens"] = t.usage.completion_tokens;
            j["ttft_s"] = t.first_token_s >= 0 ? json(t.first_token_s) : json(nullptr);
            j["finish"] = finish_reason_name(t.finish);
        }
        j["total_s"] = timed ? json(total) : json(nullptr);
        if (t.client_gone) j["client_gone"] = true;
        return j.dump();
    }
    std::string line =
        "serve: " + req.method + " " + req.path + " " + std::to_string(res.status) + " " + client;
    char buf[160];
    if (t.generated) {
        std::snprintf(buf, sizeof buf, " prompt %lld cached %lld generated %lld",
                      static_cast<long long>(t.usage.prompt_tokens),
                      static_cast<long long>(t.usage.cached_tokens),
                      static_cast<long long>(t.usage.completion_tokens));
        line += buf;
        if (t.first_token_s >= 0) {
            std::snprintf(buf, sizeof buf, " ttft %.3f s", t.first_token_s);
            line += buf;
        }
    }
    if (timed) {
        std::snprintf(buf, sizeof buf, " total %.3f s", total);
        line += buf;
    }
    if (t.generated) line += std::string(" ") + finish_reason_name(t.finish);
    if (t.client_gone) line += " client gone";
    return line;
}

void serve_job(context& ctx, const httplib::Request& req, httplib::Response& res,
               std::shared_ptr<job> j, api_style style, std::shared_ptr<stream_formatter> fmt,
               const std::function<std::string(const gen_result&)>& complete) {
    const int fd = connection_fd(req);
    submit_or_throw(ctx, j);
    using namespace std::chrono;
    if (!fmt) {
        std::vector<gen_event> sink;
        for (;;) {
            sink.clear();
            if (j->wait(milliseconds(50), &sink)) break;
            if (!j->cancel && client_gone(fd)) {
                j->cancel = true;
                ctx.stats.disconnects++;
            }
        }
        const gen_result& r = j->result();
        trace_result(r);
        if (r.finish == finish_reason::cancelled) {
            // Nobody reads this (the client left) unless the server is stopping.
            send_error(res, style, api_error(503, r.error, "server_error"));
            return;
        }
        if (r.finish == finish_reason::error && r.engine_failed_before_output) {
            send_error(res, style, failure_error(ctx, r, "messages", style));
            return;
        }
        res.status = 200;
        res.set_content(complete(r), "application/json");
        return;
    }
    res.set_header("Cache-Control", "no-cache");
    const int keepalive_s = ctx.opts.keepalive_s;
    http_stats* stats = &ctx.stats;
    const int64_t n_ctx = ctx.opts.n_ctx;
    // A prompt that outgrew the context in the worker (re-tokenized after a reuse): the
    // wording of make_job's refusal.
    auto overflow_text = [n_ctx, style](const gen_result& r) -> std::string {
        return context_error(r.usage.prompt_tokens, n_ctx, "messages", style).what();
    };
    res.set_chunked_content_provider(
        "text/event-stream",
        [j, fmt, fd, keepalive_s, stats, overflow_text](size_t, httplib::DataSink& sink) {
            std::string out;
            auto last_write = steady_clock::now();
            auto flush = [&]() {
                if (out.empty()) return true;
                const bool ok = sink.write(out.data(), out.size());
                out.clear();
                last_write = steady_clock::now();
                return ok;
            };
            fmt->start(out);
            bool ok = flush();
            std::vector<gen_event> events;
            bool generating = false;
            while (ok) {
                events.clear();
                const bool done = j->wait(milliseconds(50), &events);
                for (const auto& e : events) {
                    if (e.kind == gen_event::type::delta) {
                        generating = true;
                        fmt->delta(e.delta, out);
                    }
                }
                if (done) {
                    const gen_result& r = j->result();
                    trace_result(r);
                    if (r.finish == finish_reason::error && r.engine_failed_before_output) {
                        fmt->error(r.context_overflow ? overflow_text(r) : r.error, out);
                    } else if (r.finish != finish_reason::cancelled) {
                        fmt->finish(r, out);
                    }
                    ok = flush();
                    if (ok) sink.done();
                    return ok;
                }
                // SSE comments keep proxies and clients from timing out during a long
                // prefill (or a long wait in the queue).
                if (out.empty() && steady_clock::now() - last_write >= seconds(keepalive_s)) {
                    out = generating ? ": keep-alive\n\n" : ": prefill\n\n";
                }
                ok = flush();
                if (ok && client_gone(fd)) ok = false;
            }
            // The client went away: stop the generation; the job finishes on its own.
            j->cancel = true;
            stats->disconnects++;
            current_trace().client_gone = true;
            return false;
        });
}

}  // namespace magnetar::server
