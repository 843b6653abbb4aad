// Request validation of the HTTP front end: one declarative schema per endpoint.
//
// Owns: parsing a request body into JSON under hard limits (nesting depth, number of values,
// linear time whatever the keys), and the per-endpoint tables of what a request may contain
// (field -> JSON types, numeric range, string length / allowed values, required; messages,
// content parts and items checked by their `role` / `type`). A violation is an api_error 400
// whose message and `param` name the field path, e.g. `messages[2].role: unknown role
// "wizard"`. Validation runs before any rendering. Does not own: how a valid request is
// normalised (api_*.cpp) or the error body shapes (http_util.h).
#pragma once

#include <cstdint>
#include <string>

#include "server/http_util.h"

namespace magnetar::server {

enum class api_endpoint { chat_completions, completions, responses, messages, count_tokens };

// Limits of a request body (docs/server.md "Request validation").
inline constexpr int k_max_json_depth = 256;
inline constexpr size_t k_max_json_values = size_t{1} << 20;
// The largest accepted max_tokens / max_completion_tokens / max_output_tokens; the value
// used is then capped by the free context (n_ctx - prompt tokens).
inline constexpr int64_t k_max_tokens_limit = int64_t{1} << 30;
inline constexpr size_t k_max_stop_sequences = 16;
inline constexpr size_t k_max_stop_bytes = 1024;
inline constexpr size_t k_max_tool_name_bytes = 128;
inline constexpr int64_t k_max_top_k = int64_t{1} << 20;

// Parses a request body: an object, nesting at most k_max_json_depth, at most
// k_max_json_values values; duplicate keys: the last one wins. Time is linear in the body
// size (nlohmann's ordered object insert is linear per key). Throws api_error 400.
json parse_request_json(const std::string& body);

// Checks `body` against the endpoint's schema; throws api_error 400 naming the first
// offending field (in document order of the schema tables).
void validate_request(api_endpoint endpoint, const json& body);

}  // namespace magnetar::server
