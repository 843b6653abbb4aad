// The endpoint handlers of the HTTP front end, one file per API family.
//
// Each handler parses and validates its request (throwing api_error), normalises it into chat
// messages, renders and tokenizes it (prompt.h), hands a job to the worker and formats the
// result or the SSE stream in its API's shapes (protocol §5).
#pragma once

#include <httplib.h>

#include "chat/json_text.h"
#include "server/http_util.h"

namespace magnetar::server {

// api_openai.cpp
void handle_chat_completions(context& ctx, const httplib::Request& req, httplib::Response& res);
void handle_completions(context& ctx, const httplib::Request& req, httplib::Response& res);
json model_object(const context& ctx, const std::string& id);

// api_anthropic.cpp
void handle_messages(context& ctx, const httplib::Request& req, httplib::Response& res);
void handle_count_tokens(context& ctx, const httplib::Request& req, httplib::Response& res);

// api_responses.cpp
void handle_responses(context& ctx, const httplib::Request& req, httplib::Response& res);
void handle_get_response(context& ctx, const httplib::Request& req, httplib::Response& res);

// Shared by the handlers.
chat::think_mode think_mode_of(const context& ctx, const json& body, bool responses);
// The "arguments" JSON text of a client tool call (a JSON string is taken as the text, any
// other value is serialised).
std::string arguments_text(const json& v);
// The usage extension of a request that ran speculative decoding ("magnetar_speculation":
// verify steps, drafts, kept drafts, mean tokens per step); null otherwise.
json speculation_usage(const gen_usage& u);
// Attaches remembered DSML blocks to the assistant messages (exact replay).
void attach_replay(context& ctx, std::vector<chat::message>& messages);

}  // namespace magnetar::server
