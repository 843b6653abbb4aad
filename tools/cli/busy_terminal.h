// The terminal while the agent works: the keys typed go to a type_ahead (read on a thread, not
// echoed; Ctrl+C still interrupts), and the last row is a footer with the state, the context
// use, the queue and the draft, while the output scrolls above it (a scroll region). Without a
// terminal, or one too small, there is no footer and nothing is read.
//
// Every write to the terminal while busy holds mutex(), so that the footer, drawn from the
// key thread too, never lands inside another write.
//
// Owns: the terminal mode, the key thread and the footer's drawing. Does not own: what the keys
// mean or the footer's text (type_ahead.h).
#pragma once

#include <termios.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "cli/type_ahead.h"

namespace magnetar::cli {

class busy_terminal {
  public:
    busy_terminal() = default;
    ~busy_terminal() { end(); }
    busy_terminal(const busy_terminal&) = delete;
    busy_terminal& operator=(const busy_terminal&) = delete;

    // Only when enabled (standard input and output are a terminal) does begin() do anything.
    void enable(bool on) { enabled_ = on; }
    // Takes the keys and draws the footer until end().
    void begin(long long n_ctx);
    void end();
    bool active() const { return active_; }

    std::mutex& mutex() { return mu_; }
    // With mutex() held: the state shown and the context use; redraws the footer.
    void show(const std::string& state, long long used);
    // With mutex() held.
    type_ahead& input() { return input_; }
    // Whether Tab asked to send a message now (cleared by begin()).
    bool send_now() const { return send_now_; }

  private:
    void read_keys();
    void draw();  // mutex held

    bool enabled_ = false;
    bool active_ = false;
    bool footer_ = false;
    int rows_ = 0;
    struct termios saved_ {};
    std::mutex mu_;
    std::thread keys_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> send_now_{false};
    type_ahead input_;
    std::string state_ = "working";
    long long used_ = 0, n_ctx_ = 0;
};

}  // namespace magnetar::cli
