// Incremental projection of a generation into reasoning, visible text and tool calls.
//
// Owns: the streaming state machine (reasoning until </think>, visible text until a tool
// block opens, then invoke / parameter / value states), the hold-back rules that keep
// partial markers, partial entities and partial UTF-8 out of emitted deltas, and call id
// assignment while streaming. Feeding any split of the same bytes yields the same events
// up to how deltas are cut. Does not own: the authoritative result of a finished
// generation (parse_tool_calls in dsml.h), SSE formatting (the server).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/dsml.h"

namespace magnetar::chat {

enum class stream_event_kind {
    reasoning,            // text: a reasoning delta
    text,                 // text: a visible content delta
    tool_call_start,      // index, id, name: an invoke tag is complete (header first)
    tool_call_arguments,  // index, text: the next fragment of the arguments JSON
    tool_call_end,        // index: the invoke closed; its arguments JSON is complete
    tool_error,           // text: the projection stopped (malformed or unterminated block)
};

const char* stream_event_kind_name(stream_event_kind k);

struct stream_event {
    stream_event_kind kind = stream_event_kind::text;
    std::string text;
    size_t index = 0;
    std::string id;
    std::string name;
};

// A call as projected so far; `arguments` is the concatenation of its argument deltas
// ({"k":"string",...}; JSON values passed through as written, not minified).
struct streamed_call {
    std::string id;
    std::string name;
    std::string arguments;
    bool complete = false;
};

struct stream_options {
    // The prompt ended with <think>: text is reasoning until </think>. Tool blocks are only
    // recognised after it.
    bool thinking = true;
    // Look for tool blocks in visible text (and hold back what could start one).
    bool detect_tool_calls = true;
    // Returns a fresh call id; the stream retries on a clash with its own earlier ids. The
    // default makes "call_" + 32 random hex digits.
    std::function<std::string()> make_id;
};

class dsml_stream {
  public:
    explicit dsml_stream(stream_options options = {});

    // Consumes the next bytes of the generation and appends the events they complete.
    void feed(std::string_view bytes, std::vector<stream_event>* out);
    // End of generation: flushes held text; a tool block still open yields tool_error.
    void finish(std::vector<stream_event>* out);

    std::vector<stream_event> feed(std::string_view bytes);
    std::vector<stream_event> finish();

    bool in_reasoning() const { return phase_ == phase::reasoning; }
    // A tool block has opened (and may have closed or failed since).
    bool tool_block_started() const { return block_started_; }
    // The closing tool_calls tag has been seen; later bytes are ignored.
    bool tool_block_done() const { return phase_ == phase::done; }
    bool failed() const { return phase_ == phase::error; }
    const std::string& error() const { return error_; }
    const std::vector<streamed_call>& calls() const { return calls_; }

  private:
    enum class phase { start, reasoning, content, tool_block, done, error };
    enum class block_state { between_invokes, between_params, param_value };

    // One step of progress on buf_; false when more bytes are needed.
    bool step(std::vector<stream_event>* out);
    bool step_start();
    bool step_reasoning(std::vector<stream_event>* out);
    bool step_content(std::vector<stream_event>* out);
    bool step_between_invokes(std::vector<stream_event>* out);
    bool step_between_params(std::vector<stream_event>* out);
    bool step_param_value(std::vector<stream_event>* out);

    void emit_text(stream_event_kind kind, std::string_view s, std::vector<stream_event>* out);
    void emit_arguments(std::string_view s, std::vector<stream_event>* out);
    void emit_value(std::string_view raw, std::vector<stream_event>* out);
    bool fail(std::string msg, std::vector<stream_event>* out);
    enum class tag_read { need_more, failed, ok };
    tag_read read_open_tag(std::string_view open, const char* what,
                           std::vector<std::pair<std::string, std::string>>* attrs, size_t* gt,
                           std::vector<stream_event>* out);
    std::string fresh_id();

    stream_options options_;
    phase phase_ = phase::start;
    block_state state_ = block_state::between_invokes;
    std::string buf_;  // bytes received but not yet projected
    bool finishing_ = false;
    bool block_started_ = false;
    dsml_variant variant_ = dsml_variant::full;
    bool first_param_ = true;
    bool value_is_string_ = false;
    bool value_has_bytes_ = false;
    size_t gt_scan_ = 0;  // where the search for the '>' of a pending tag resumes
    std::vector<streamed_call> calls_;
    std::string error_;
};

// Copies the ids assigned while streaming onto the authoritative calls that lack one (same
// position and name), so tool results the client sends later reference ids the server knows.
void adopt_stream_ids(std::vector<parsed_tool_call>* calls,
                      const std::vector<streamed_call>& streamed);

}  // namespace magnetar::chat
