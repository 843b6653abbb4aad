// What a person types while the agent works: a draft line and a queue of messages that are sent
// after the turn, in order. Enter queues the draft (a draft ending with a backslash continues on
// a new line instead), Up pulls the latest queued message back into an empty draft, Tab sends
// now (the draft, or else the first queued message, goes first and the turn is interrupted),
// Backspace and Ctrl+U edit; other keys and escape sequences are ignored. The footer line that
// shows this state is footer_text().
//
// Owns: the keys' meaning and the footer's text. Does not own: the terminal (busy_terminal.h
// reads the keys on a thread and draws the footer).
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace magnetar::cli {

class type_ahead {
  public:
    enum class action { none, changed, send_now };

    // Interprets typed bytes (escape sequences may be cut between calls).
    action feed(std::string_view bytes);

    const std::string& draft() const { return draft_; }
    const std::deque<std::string>& queue() const { return queue_; }
    // The next queued message, if any.
    std::optional<std::string> pop();
    // The draft, which is cleared.
    std::string take_draft();

  private:
    action key(char c);

    std::string draft_;
    std::deque<std::string> queue_;
    std::string esc_;  // an escape sequence being read
};

// The footer: `state` (e.g. "generating 41.3 t/s"), the context use, the queue and the draft,
// cut to `cols` columns (the draft's end stays visible).
std::string footer_text(const std::string& state, long long used, long long n_ctx,
                        const type_ahead& input, size_t cols);

}  // namespace magnetar::cli
