// What `magnetar eval` shows while it runs: a split-screen terminal UI (question list on the
// left, the running question and its reply streaming on the right, thinking dimmed, a status
// footer; keys p pause / resume, q quit with the report, Up / Down select, Enter run the
// selection next) or plain lines, one per result.
//
// Owns: drawing and the keys. Does not own: running or grading (cmd_eval.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace magnetar::cli {

enum class eval_status { pending, running, pass, fail, skipped, interrupted };
const char* eval_status_name(eval_status s);

struct eval_entry {
    std::string id;
    std::string kind;
    eval_status status = eval_status::pending;
};

class eval_view {
  public:
    virtual ~eval_view() = default;
    // A question starts: its index and prompt text.
    virtual void begin(size_t i, const std::string& prompt) = 0;
    // Reply bytes as they come; `thinking` while inside the thinking block.
    virtual void text(const std::string& bytes, bool thinking) = 0;
    // The question ended; `line` is the one-line result.
    virtual void end(size_t i, const std::string& line) = 0;
    // Footer: counts and speed.
    virtual void status(const std::string& line) = 0;
    // Polls the keys (non-blocking; blocks while paused). Returns false once the user quits.
    virtual bool poll() = 0;
    // The index the user asked to run next (-1: none), cleared by the call.
    virtual int64_t take_next() = 0;
    // Restores the terminal before the report is printed.
    virtual void close() = 0;
};

// The terminal UI over stdin / stdout (both terminals); entries are shared with the caller,
// which updates their status. pause_ms: how long a result stays before the next question.
std::unique_ptr<eval_view> make_tui_view(std::vector<eval_entry>& entries, std::string title,
                                         int pause_ms);
// One line per result on stdout.
std::unique_ptr<eval_view> make_plain_view(std::vector<eval_entry>& entries);

}  // namespace magnetar::cli
