#include "cli/eval_view.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "cli/generation.h"
#include "core/format.h"

namespace magnetar::cli {

const char* eval_status_name(eval_status s) {
    switch (s) {
        case eval_status::pending:
            return "pending";
        case eval_status::running:
            return "running";
        case eval_status::pass:
            return "PASS";
        case eval_status::fail:
            return "FAIL";
        case eval_status::skipped:
            return "SKIPPED";
        case eval_status::interrupted:
            return "INTERRUPTED";
    }
    return "?";
}

namespace {

// ---------------------------------------------------------------------------------------------
// Plain
// ---------------------------------------------------------------------------------------------

class plain_view final : public eval_view {
  public:
    explicit plain_view(std::vector<eval_entry>& e) : entries_(e) {}
    void begin(size_t, const std::string&) override {}
    void text(const std::string&, bool) override {}
    void end(size_t i, const std::string& line) override {
        std::printf("[%zu/%zu] %s\n", i + 1, entries_.size(), line.c_str());
        std::fflush(stdout);
    }
    void status(const std::string&) override {}
    bool poll() override { return !interrupted(); }
    int64_t take_next() override { return -1; }
    void close() override {}

  private:
    std::vector<eval_entry>& entries_;
};

// ---------------------------------------------------------------------------------------------
// Terminal UI
// ---------------------------------------------------------------------------------------------

// One piece of the right pane: bytes and whether they are dimmed.
struct segment {
    std::string bytes;
    bool dim = false;
};

class tui_view final : public eval_view {
  public:
    tui_view(std::vector<eval_entry>& e, std::string title, int pause_ms)
        : entries_(e), title_(std::move(title)), pause_ms_(pause_ms) {
        tcgetattr(STDIN_FILENO, &saved_);
        termios raw = saved_;
        raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
        std::fputs("\x1b[?1049h\x1b[?25l", stdout);  // alternate screen, cursor hidden
        redraw(true);
    }
    ~tui_view() override { close(); }

    void begin(size_t i, const std::string& prompt) override {
        current_ = static_cast<int64_t>(i);
        if (!moved_) selected_ = current_;
        pane_.clear();
        pane_.push_back({prompt + "\n\n", false});
        redraw(true);
    }
    void text(const std::string& bytes, bool thinking) override {
        if (!pane_.empty() && pane_.back().dim == thinking) {
            pane_.back().bytes += bytes;
        } else {
            pane_.push_back({bytes, thinking});
        }
        redraw(false);
    }
    void end(size_t, const std::string& line) override {
        pane_.push_back({"\n\n" + line + "\n", false});
        redraw(true);
        // Let the result be seen, keys still served.
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(pause_ms_);
        while (std::chrono::steady_clock::now() < until && !quit_) {
            poll();
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    void status(const std::string& line) override {
        status_ = line;
        redraw(false);
    }
    bool poll() override {
        do {
            read_keys();
            if (interrupted()) quit_ = true;
            if (paused_ && !quit_) {
                redraw(false);
                std::this_thread::sleep_for(std::chrono::milliseconds(30));
            }
        } while (paused_ && !quit_);
        return !quit_;
    }
    int64_t take_next() override {
        const int64_t n = next_;
        next_ = -1;
        return n;
    }
    void close() override {
        if (closed_) return;
        closed_ = true;
        std::fputs("\x1b[0m\x1b[?25h\x1b[?1049l", stdout);
        std::fflush(stdout);
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    }

  private:
    void read_keys() {
        char buf[64];
        for (;;) {
            pollfd p{STDIN_FILENO, POLLIN, 0};
            if (::poll(&p, 1, 0) <= 0) return;
            const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
            if (n <= 0) return;
            for (ssize_t k = 0; k < n; ++k) {
                const char c = buf[k];
                if (c == 'q' || c == 'Q') {
                    quit_ = true;
                } else if (c == 'p' || c == 'P' || c == ' ') {
                    paused_ = !paused_;
                } else if (c == '\r' || c == '\n') {
                    if (selected_ >= 0 &&
                        entries_[static_cast<size_t>(selected_)].status == eval_status::pending)
                        next_ = selected_;
                } else if (c == '\x1b' && k + 2 < n && buf[k + 1] == '[') {
                    const char d = buf[k + 2];
                    const auto last = static_cast<int64_t>(entries_.size()) - 1;
                    if (d == 'A') selected_ = std::max<int64_t>(0, selected_ - 1);
                    if (d == 'B') selected_ = std::min<int64_t>(last, selected_ + 1);
                    moved_ = true;
                    k += 2;
                }
            }
            redraw(true);
        }
    }

    void redraw(bool force) {
        const auto now = std::chrono::steady_clock::now();
        if (!force && now - last_ < std::chrono::milliseconds(50)) return;
        last_ = now;
        winsize ws{};
        int rows = 24, cols = 80;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
            rows = ws.ws_row;
            cols = ws.ws_col;
        }
        const int left = std::clamp(cols / 3, 16, 34);
        const int right = std::max(10, cols - left - 3);
        const int body = std::max(3, rows - 2);
        std::string out = "\x1b[H\x1b[2J";
        // Header.
        std::string head = " " + title_ + (paused_ ? "  [paused]" : "");
        out += "\x1b[1m" + head.substr(0, static_cast<size_t>(cols)) + "\x1b[0m\r\n";
        // The question list, scrolled to keep the selection in view.
        const auto n = static_cast<int64_t>(entries_.size());
        const int64_t focus = selected_ >= 0 ? selected_ : std::max<int64_t>(current_, 0);
        const int64_t top =
            std::clamp<int64_t>(focus - body / 2, 0, std::max<int64_t>(0, n - body));
        // The reply pane: wrapped lines, the last `body` of them.
        std::vector<std::pair<std::string, bool>> lines{{"", false}};
        for (const segment& s : pane_) {
            for (size_t i = 0; i < s.bytes.size();) {
                const char c = s.bytes[i];
                if (c == '\n') {
                    lines.emplace_back("", s.dim);
                    ++i;
                    continue;
                }
                if (lines.back().first.empty()) lines.back().second = s.dim;
                if (static_cast<int>(utf8_columns(lines.back().first)) >= right)
                    lines.emplace_back("", s.dim);
                // Whole UTF-8 sequences.
                size_t len = 1;
                const auto u = static_cast<unsigned char>(c);
                if (u >= 0xF0) {
                    len = 4;
                } else if (u >= 0xE0) {
                    len = 3;
                } else if (u >= 0xC0) {
                    len = 2;
                }
                lines.back().first += s.bytes.substr(i, len);
                i += len;
            }
        }
        const size_t first =
            lines.size() > static_cast<size_t>(body) ? lines.size() - static_cast<size_t>(body) : 0;
        for (int r = 0; r < body; ++r) {
            const int64_t qi = top + r;
            std::string cell;
            if (qi < n) {
                const eval_entry& e = entries_[static_cast<size_t>(qi)];
                const char* mark = "  ";
                const char* colour = "";
                switch (e.status) {
                    case eval_status::pending:
                        mark = ". ";
                        break;
                    case eval_status::running:
                        mark = "> ";
                        colour = "\x1b[1m";
                        break;
                    case eval_status::pass:
                        mark = "+ ";
                        colour = "\x1b[32m";
                        break;
                    case eval_status::fail:
                        mark = "x ";
                        colour = "\x1b[31m";
                        break;
                    case eval_status::skipped:
                    case eval_status::interrupted:
                        mark = "- ";
                        colour = "\x1b[90m";
                        break;
                }
                std::string label = std::string(mark) + e.id;
                if (static_cast<int>(label.size()) > left) label.resize(static_cast<size_t>(left));
                label.resize(static_cast<size_t>(left), ' ');
                const bool sel = qi == selected_;
                cell = std::string(sel ? "\x1b[7m" : "") + colour + label + "\x1b[0m";
            } else {
                cell = std::string(static_cast<size_t>(left), ' ');
            }
            out += cell + " \x1b[90m|\x1b[0m ";
            const size_t li = first + static_cast<size_t>(r);
            if (li < lines.size()) {
                out += (lines[li].second ? "\x1b[90m" : "") + lines[li].first + "\x1b[0m";
            }
            out += "\r\n";
        }
        std::string foot = " " + status_ + "   p pause  q quit  Up/Down + Enter: run next";
        if (static_cast<int>(foot.size()) > cols) foot.resize(static_cast<size_t>(cols));
        out += "\x1b[7m" + foot + "\x1b[0m";
        std::fwrite(out.data(), 1, out.size(), stdout);
        std::fflush(stdout);
    }

    std::vector<eval_entry>& entries_;
    std::string title_;
    int pause_ms_;
    termios saved_{};
    bool closed_ = false;
    bool quit_ = false;
    bool paused_ = false;
    bool moved_ = false;
    int64_t selected_ = -1;
    int64_t current_ = -1;
    int64_t next_ = -1;
    std::vector<segment> pane_;
    std::string status_;
    std::chrono::steady_clock::time_point last_{};
};

}  // namespace

std::unique_ptr<eval_view> make_tui_view(std::vector<eval_entry>& entries, std::string title,
                                         int pause_ms) {
    return std::make_unique<tui_view>(entries, std::move(title), pause_ms);
}

std::unique_ptr<eval_view> make_plain_view(std::vector<eval_entry>& entries) {
    return std::make_unique<plain_view>(entries);
}

}  // namespace magnetar::cli
