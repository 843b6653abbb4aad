#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/format.h"

namespace magnetar {

namespace {

std::string amount(uint64_t n, Progress::Unit unit) {
    switch (unit) {
        case Progress::Unit::bytes:
            return human_bytes(n);
        case Progress::Unit::items:
            return human_count(n);
        case Progress::Unit::tokens:
            return human_count(n) + " tok";
    }
    return {};
}

std::string rate(double per_s, Progress::Unit unit) {
    switch (unit) {
        case Progress::Unit::bytes:
            return human_bytes(static_cast<uint64_t>(per_s)) + "/s";
        case Progress::Unit::items:
            return strfmt("%.1f/s", per_s);
        case Progress::Unit::tokens:
            return strfmt("%.1f tok/s", per_s);
    }
    return {};
}

std::string duration(double s) {
    if (s < 60) return strfmt("%.0fs", s);
    if (s < 3600) return strfmt("%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
    return strfmt("%dh%02dm", static_cast<int>(s) / 3600, (static_cast<int>(s) / 60) % 60);
}

}  // namespace

Progress::Progress(std::string label, uint64_t total, Unit unit, bool quiet)
    : label_(std::move(label)),
      total_(total),
      unit_(unit),
      quiet_(quiet),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
    finish();
}

void Progress::update(uint64_t done) {
    done_ = done;
    if (quiet_ || finished_) return;
    auto now = std::chrono::steady_clock::now();
    if (tty_) {
        if (now - last_draw_ >= std::chrono::milliseconds(100)) {
            last_draw_ = now;
            draw(false);
        }
    } else if (total_ > 0) {
        int quarter = static_cast<int>(4 * done_ / total_);
        if (quarter > last_quarter_ && quarter < 4) {
            last_quarter_ = quarter;
            draw(false);
        }
    }
}

void Progress::finish() {
    if (finished_) return;
    finished_ = true;
    if (!quiet_) draw(true);
}

void Progress::draw(bool final_line) {
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    double per_s = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
    std::string line = label_;
    if (total_ > 0) {
        const int width = 24;
        double frac = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
        int filled = static_cast<int>(frac * width);
        line += " [" + std::string(static_cast<size_t>(filled), '#') +
                std::string(static_cast<size_t>(width - filled), '.') + "]";
        line += strfmt(" %3.0f%% %s/%s", frac * 100.0, amount(done_, unit_).c_str(),
                       amount(total_, unit_).c_str());
    } else {
        line += " " + amount(done_, unit_);
    }
    line += " " + rate(per_s, unit_);
    if (final_line) {
        line += " in " + duration(elapsed);
    } else if (total_ > 0 && per_s > 0 && done_ < total_) {
        line += " ETA " + duration(static_cast<double>(total_ - done_) / per_s);
    }
    if (tty_) {
        std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
    } else {
        std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
}

}  // namespace magnetar
