// The terminal while the agent works: see busy_terminal.h.
#include "cli/busy_terminal.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include "core/format.h"

namespace magnetar::cli {

namespace {

void put(const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

}  // namespace

void busy_terminal::begin(long long n_ctx) {
    send_now_ = false;
    if (!enabled_ || active_) return;
    if (::tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    struct termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);  // ISIG stays: Ctrl+C interrupts
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (::tcsetattr(STDIN_FILENO, TCSANOW, &raw) != 0) return;
    active_ = true;
    n_ctx_ = n_ctx;
    struct winsize ws {};
    footer_ = ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row >= 4 && ws.ws_col >= 20;
    {
        const std::lock_guard<std::mutex> lk(mu_);
        if (footer_) {
            rows_ = ws.ws_row;
            // A free row below the cursor (scrolling when it is on the last one), then the
            // scroll region above the footer row; DECSTBM homes the cursor, so it is saved.
            put(
                strfmt("\n\x1b[1A\x1b"
                       "7\x1b[1;%dr\x1b"
                       "8",
                       rows_ - 1));
        }
        state_ = "working";
        draw();
    }
    stop_ = false;
    keys_ = std::thread([this] { read_keys(); });
}

void busy_terminal::end() {
    if (!active_) return;
    stop_ = true;
    if (keys_.joinable()) keys_.join();
    {
        const std::lock_guard<std::mutex> lk(mu_);
        if (footer_)
            put(
                strfmt("\x1b"
                       "7\x1b[%d;1H\x1b[2K\x1b[r\x1b"
                       "8",
                       rows_));
    }
    ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    active_ = false;
    footer_ = false;
}

void busy_terminal::show(const std::string& state, long long used) {
    state_ = state;
    used_ = used;
    draw();
}

void busy_terminal::draw() {
    if (!footer_) return;
    struct winsize ws {};
    size_t cols = 80;
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) cols = ws.ws_col;
    const std::string text = footer_text(state_, used_, n_ctx_, input_, cols);
    put(
        strfmt("\x1b"
               "7\x1b[%d;1H\x1b[2K\x1b[7m%s\x1b[0m\x1b"
               "8",
               rows_, text.c_str()));
}

void busy_terminal::read_keys() {
    while (!stop_) {
        struct pollfd p {};
        p.fd = STDIN_FILENO;
        p.events = POLLIN;
        if (::poll(&p, 1, 50) <= 0) continue;
        if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return;  // the terminal is gone
        char buf[256];
        const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
        if (n <= 0) continue;
        const std::lock_guard<std::mutex> lk(mu_);
        if (input_.feed(std::string_view(buf, static_cast<size_t>(n))) ==
            type_ahead::action::send_now) {
            send_now_ = true;
        }
        draw();
    }
}

}  // namespace magnetar::cli
