// Shared pieces of the HTTP front end: server options and context, API-shaped errors, typed
// JSON field access, client-disconnect detection and the driver that runs a job for a
// non-streaming or SSE response.
//
// Owns: everything the per-API files (api_openai.cpp, api_anthropic.cpp, api_responses.cpp)
// share. Does not own: per-API request normalisation and response shapes.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "magnetar/engine.h"
#include "server/prompt.h"
#include "server/response_store.h"
#include "server/worker.h"

namespace magnetar::server {

using json = nlohmann::ordered_json;

struct server_options {
    std::string host = "127.0.0.1";
    int port = 8000;      // 0: any free port
    std::string api_key;  // empty: no authentication
    bool cors = false;
    int64_t n_ctx = 32768;  // of each live session
    int parallel = 1;       // live sessions (worker_options::parallel)
    uint64_t kv_budget_bytes = 0;
    int64_t prefill_piece = 256;
    // Output limit of a request that gives none (Anthropic requires max_tokens); always capped
    // by the free context. DeepSeek's own API default for its reasoning model.
    int64_t default_max_tokens = 32768;
    size_t queue_size = 64;
    int http_threads = 0;  // 0: queue_size + 16
    size_t max_body_bytes = size_t{64} << 20;
    std::string model_id = "deepseek-v4-flash";
    bool exact_replay = true;
    size_t replay_max_ids = 100000;
    int keepalive_s = 5;  // SSE comment interval while nothing else is sent
    // Transport limits (http_guard.h; docs/server.md "Limits"). Timeouts in milliseconds.
    size_t max_header_count = 100;
    size_t max_header_bytes = 64 << 10;
    size_t max_request_line = 8 << 10;
    int idle_timeout_ms = 5000;
    int header_timeout_ms = 10000;
    int body_timeout_ms = 60000;
    int max_client_connections = 0;  // per client address; 0: HTTP threads - max(2, threads / 8)
    // Test hook: honours the request field "x_magnetar_forced_output" (the generated text is
    // that string instead of sampled tokens). Off by default; for tool-call shape tests.
    bool test_hooks = false;
    // Test hook: worker_options::before_job.
    std::function<void()> test_before_job;
    // The request log on stderr (serve turns it on unless --log-disable): one line per request
    // with method, path, status, client, the generation's prompt / cached / generated tokens,
    // time to first token, total time and finish reason; a JSON object per line with
    // log_json; /health and /metrics only with log_all (--verbose).
    bool request_log = false;
    bool log_json = false;
    bool log_all = false;
    disk_cache_options disk;  // --kv-disk-dir and the kv-cache knobs
    int mtp_draft = 0;        // --mtp-draft (worker_options)
    float mtp_margin = 0.0f;  // --mtp-margin
    // Sampling defaults of every request (serve --temp, --top-k, ... and the penalties).
    sampling_params sampling;
};

// Per-endpoint HTTP counters for /metrics.
struct http_stats {
    std::atomic<uint64_t> requests[8] = {};  // by endpoint index (see server.cpp)
    std::atomic<uint64_t> errors_4xx{0};
    std::atomic<uint64_t> errors_5xx{0};
    std::atomic<uint64_t> disconnects{0};
};

struct context {
    const Engine& engine;
    const tokenizer& tok;
    special_literals lits;
    server_options opts;
    worker& work;
    http_stats& stats;
    response_store& responses;  // previous_response_id memory (api_responses.cpp)
};

enum class api_style { openai, anthropic };

// A request that cannot be served; thrown by the handlers, formatted by the router.
struct api_error : std::runtime_error {
    api_error(int status, std::string message, std::string type = "invalid_request_error")
        : std::runtime_error(message), status(status), type(std::move(type)) {}
    int status;
    std::string type;
    std::string param;
    std::string code;
    json extra = json::object();  // extra members of the error object
};

// The error body of an API: OpenAI {"error":{...}} or Anthropic {"type":"error","error":{...}}.
std::string error_body(api_style style, const api_error& e);
void send_error(httplib::Response& res, api_style style, const api_error& e);
// 400 context_length_exceeded in the API's shape.
api_error context_error(int64_t n_prompt, int64_t n_ctx, const char* param, api_style style);

// Parses the body as JSON (nesting limited to 256) and requires an object.
json parse_body(const std::string& body);

// Typed optional fields: absent or null -> nullopt; wrong type -> api_error 400 naming it.
std::optional<bool> opt_bool(const json& o, const char* key);
std::optional<double> opt_number(const json& o, const char* key);
std::optional<int64_t> opt_int(const json& o, const char* key);
std::optional<std::string> opt_string(const json& o, const char* key);
// A string, or an array of strings (empty strings dropped); absent -> empty.
std::vector<std::string> string_list(const json& o, const char* key);
// Text of a content value: string; array of strings / objects with "text"; null -> "".
std::string content_text(const json& v, const char* what);

std::string random_hex(size_t n_bytes);
int64_t unix_time();

// The sampling fields an API has (beyond temperature and top_p, which all have).
struct sampling_fields {
    bool top_k = false;
    bool min_p = false;
    bool seed = false;
    bool penalties = false;  // frequency_penalty, presence_penalty
};

// Sampling params of a request: the operator's defaults (serve --temp ...), then the request's
// fields unless `thinking` (protocol §4.1: thinking modes ignore the client's knobs; a seed is
// always taken). Every field is type-checked either way.
void read_sampling(const json& o, const sampling_params& defaults, bool thinking,
                   sampling_fields allow, sampling_params* p);

// max_tokens after defaults and the context cap (at least 1).
int64_t clamp_max_tokens(const context& ctx, std::optional<int64_t> requested,
                         int64_t prompt_tokens);

// The forced start of a reply whose tool_choice requires a call: any tool (`name` empty) or
// the named one. Throws api_error 400 (param `param`) when no tools are offered or when the
// name is not one of theirs (the "function" object of the OpenAI shape, else the entry's own
// "name").
chat::forced_call_start forced_call_for(const chat::tool_list& tools, const std::string& name,
                                        const char* param);

// Builds the job of a request; throws api_error for a context overflow.
std::shared_ptr<job> make_job(const context& ctx, gen_request r, const json& body, api_style style,
                              const char* param);

// The socket of the connection serving `req` (-1 if not found).
int connection_fd(const httplib::Request& req);
// True when the connection is closed both ways (a reset); an end of input alone is not gone.
bool client_gone(int fd);

// Per-API SSE formatting of a job.
class stream_formatter {
  public:
    virtual ~stream_formatter() = default;
    virtual void start(std::string& out) = 0;
    virtual void delta(const chat::stream_event& e, std::string& out) = 0;
    virtual void finish(const gen_result& r, std::string& out) = 0;
    // SSE error event (engine failure after the headers went out).
    virtual void error(const std::string& message, std::string& out) = 0;
};

// Submits the job (503 + Retry-After when the queue is full) and serves it: a streaming
// response fed by `fmt`, or, without `fmt`, waits and calls `complete` for the JSON body.
// Client disconnects cancel the job.
void serve_job(context& ctx, const httplib::Request& req, httplib::Response& res,
               std::shared_ptr<job> j, api_style style, std::shared_ptr<stream_formatter> fmt,
               const std::function<std::string(const gen_result&)>& complete);

// What the request log says about the request the calling HTTP thread serves: its start
// (the pre-routing handler), and the generation's figures when serve_job ran one.
struct request_trace {
    std::chrono::steady_clock::time_point start{};
    bool generated = false;
    gen_usage usage;
    double first_token_s = -1;  // from the job's submission; < 0: no token
    finish_reason finish = finish_reason::stop;
    bool client_gone = false;  // the client left before the reply was complete
};
request_trace& current_trace();

// The log line of a finished request (without the newline): text or a JSON object.
std::string request_log_line(const httplib::Request& req, const httplib::Response& res,
                             const request_trace& t, bool json_line);

// "data: <json>\n\n" / "event: <name>\ndata: <json>\n\n".
void sse_data(std::string& out, const json& v);
void sse_event(std::string& out, const char* name, const json& v);

}  // namespace magnetar::server
