// The throughput-versus-context chart of `magnetar bench --svg`: a self-contained SVG (no
// scripts, no external fonts or styles) that a browser shows as it is.
#pragma once

#include <string>
#include <vector>

namespace magnetar::cli {

struct throughput_point {
    double ctx = 0;          // context frontier, tokens
    double prefill_tps = 0;  // prefill of the interval before the frontier
    double gen_tps = 0;      // generation at the frontier
};

struct chart_options {
    std::string title = "magnetar bench";
    std::string subtitle;  // e.g. model, threads, bandwidth
    int width = 960;
    int height = 540;
};

// Two series over the context axis: prefill t/s on the left axis, generation t/s on the right
// axis (their scales differ by one or two orders of magnitude), with ticks, labels, a grid and
// a legend. Points are drawn as markers joined by lines.
std::string throughput_svg(const std::vector<throughput_point>& points, const chart_options& o);

// Round tick step for a range: 1, 2 or 5 times a power of ten, giving about `target` ticks.
double nice_step(double range, int target);

}  // namespace magnetar::cli
