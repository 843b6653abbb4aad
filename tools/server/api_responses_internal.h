// Private pieces of the OpenAI Responses endpoint (protocol §5.7) shared by its two files.
//
// Owns: the declarations of the request normalisation (api_responses_input.cpp) that the
// handler (api_responses.cpp) calls. Does not own: their definitions or the response shapes.
// Not part of the public API: only tools/server/api_responses*.cpp include it.
#pragma once

#include <string>
#include <vector>

#include "chat/message.h"
#include "chat/renderer.h"
#include "server/http_util.h"

namespace magnetar::server::detail {

// Throws the 400 of a malformed request input (api_error with param "input").
[[noreturn]] void bad_input(const std::string& message);

// Input items (protocol §2.5 Responses table) -> chat messages.
std::vector<chat::message> input_messages(const json& items);

// Responses function tools in the chat shape the renderer takes (hosted tools are left out).
chat::tool_list responses_tools(const json& body);

}  // namespace magnetar::server::detail
