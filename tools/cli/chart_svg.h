// Self-contained SVG charts (no scripts, no external fonts or styles) that a browser shows as
// they are: two series over one x axis, each on its own y axis (their scales may differ by
// orders of magnitude). `magnetar bench --svg` draws throughput against context with it,
// `magnetar steer sweep --svg` the measured property against the steering scale.
#pragma once

#include <string>
#include <vector>

namespace magnetar::cli {

struct chart_options {
    std::string title = "magnetar bench";
    std::string subtitle;  // e.g. model, threads, bandwidth
    int width = 960;
    int height = 540;
};

// One series of a dual-axis chart: its values at the chart's x positions, the axis label, the
// legend text, the unit of its tooltips and an element id.
struct chart_series {
    std::vector<double> y;
    std::string axis_label;  // "prefill (tokens/s)"
    std::string legend;      // "prefill t/s (left axis)"
    std::string unit;        // "t/s" (tooltips)
    std::string id;          // "prefill" (SVG ids "series-prefill", "y-axis-prefill")
    bool dashed = false;
};

struct dual_axis_chart {
    std::vector<double> x;
    std::string x_label;       // "context (tokens)"
    std::string x_tooltip;     // "tokens" (tooltips read "512 tokens: 41.2 t/s")
    bool x_thousands = false;  // tick labels 1000 -> "1k"
    bool y_from_zero = true;   // both y axes start at 0 (else at the data minimum)
    chart_series left, right;  // left and right y axes
    // Further series on the same axes (lighter shades of the axis colour), e.g. projections.
    std::vector<chart_series> left_more, right_more;
};

// The chart: ticks (one style per axis: with x_thousands every label of an axis reaching 1000
// is in thousands, "0.5k", "1.0k", "1.5k"), labels, a grid following the left axis, markers
// joined by lines, a tooltip per point naming its series, and legend rows between the title
// and the plot.
std::string dual_axis_svg(const dual_axis_chart& c, const chart_options& o);

struct throughput_point {
    double ctx = 0;               // context frontier, tokens
    double prefill_tps = 0;       // prefill of the interval before the frontier
    double gen_tps = 0;           // generation at the frontier
    double proj_prefill_tps = 0;  // projected to projected_layers (when that is > 0)
    double proj_gen_tps = 0;
};

// Prefill t/s (left axis) and generation t/s (right axis) over the context axis; with
// projected_layers > 0 also the two rates projected to a model of that many layers.
std::string throughput_svg(const std::vector<throughput_point>& points, const chart_options& o,
                           unsigned projected_layers = 0);

// Round tick step for a range: 1, 2 or 5 times a power of ten, giving about `target` ticks.
double nice_step(double range, int target);

}  // namespace magnetar::cli
