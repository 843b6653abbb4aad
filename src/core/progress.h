// Progress bar for long work (model generation, quantization, prefill, weight upload).
//
// Draws "label [#####.....] 42% 1.2 GiB/2.9 GiB 310 MiB/s ETA 5s" on stderr. On a terminal the
// line is redrawn at most ten times a second; when stderr is not a terminal (CI logs) it
// prints one line per 25 % so logs stay short. Not thread-safe: one owner updates it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace magnetar {

class Progress {
  public:
    enum class Unit { bytes, items, tokens };

    // total == 0 means unknown. quiet == true suppresses all output.
    Progress(std::string label, uint64_t total, Unit unit = Unit::bytes, bool quiet = false);
    ~Progress();

    void add(uint64_t n) { update(done_ + n); }
    void update(uint64_t done);
    // Prints the final line (once); called by the destructor if not called before.
    void finish();

  private:
    void draw(bool final_line);

    std::string label_;
    uint64_t total_;
    uint64_t done_ = 0;
    Unit unit_;
    bool quiet_;
    bool tty_;
    bool finished_ = false;
    int last_quarter_ = 0;
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace magnetar
