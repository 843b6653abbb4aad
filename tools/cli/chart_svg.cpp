#include "cli/chart_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace magnetar::cli {

namespace {

const char* kLeftColor = "#1f77b4";
const char* kRightColor = "#d62728";
const char* kLeftMoreColor = "#74a9cf";
const char* kRightMoreColor = "#f08080";

std::string xml_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

std::string num(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.1f", v);
    return b;
}

// Tick label in the axis's one style: with `thousands` every nonzero label in thousands with
// the decimals the step needs ("0.5k", "1.0k"), else integers, else the step's decimals.
std::string tick_label(double v, double step, bool thousands) {
    char b[64];
    if (std::fabs(v) < step * 1e-9) v = 0;  // no "-0"
    if (thousands) {
        if (v == 0) return "0";
        const double k = step / 1000;
        const int digits = k >= 1 ? 0 : std::min(3, static_cast<int>(std::ceil(-std::log10(k))));
        std::snprintf(b, sizeof b, "%.*fk", digits, v / 1000);
    } else if (step >= 1) {
        std::snprintf(b, sizeof b, "%.0f", v);
    } else {
        const int digits = std::min(6, static_cast<int>(std::ceil(-std::log10(step))));
        std::snprintf(b, sizeof b, "%.*f", digits, v);
    }
    return b;
}

// A tooltip value: three significant digits, whole numbers from 100 on.
std::string value_label(double v) {
    char b[64];
    if (std::fabs(v) >= 100) {
        std::snprintf(b, sizeof b, "%.0f", v);
    } else {
        std::snprintf(b, sizeof b, "%.3g", v);
    }
    return b;
}

// A tooltip x position as written ("512", "-1.5").
std::string x_label_of(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
}

struct axis {
    double lo = 0, hi = 1, step = 1;
};

// From zero (or from the data minimum) up to a round maximum; an empty range gets one step.
axis make_axis(double lo, double hi, bool from_zero) {
    axis a;
    if (!std::isfinite(hi)) hi = 1;
    if (!std::isfinite(lo)) lo = 0;
    if (from_zero) lo = std::min(lo, 0.0);
    if (from_zero && !(hi > 0)) hi = std::max(hi, 1.0);
    if (!(lo < hi)) {
        lo -= 1;
        hi += 1;
    }
    a.step = nice_step(hi - lo, 6);
    a.lo = std::floor(lo / a.step) * a.step;
    a.hi = std::ceil(hi / a.step) * a.step;
    if (a.hi <= a.lo) a.hi = a.lo + a.step;
    return a;
}

}  // namespace

double nice_step(double range, int target) {
    if (!(range > 0) || !std::isfinite(range)) return 1;
    const double raw = range / std::max(1, target);
    const double p = std::pow(10.0, std::floor(std::log10(raw)));
    const double f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

std::string dual_axis_svg(const dual_axis_chart& c, const chart_options& o) {
    const double W = o.width, H = o.height;
    const double left = 80, right = 80, bottom = 70;
    const double pw = W - left - right;
    // Every series with its axis (false: left) and colour.
    struct drawn {
        const chart_series* se;
        bool right;
        const char* color;
    };
    std::vector<drawn> all = {{&c.left, false, kLeftColor}, {&c.right, true, kRightColor}};
    for (const chart_series& se : c.left_more) all.push_back({&se, false, kLeftMoreColor});
    for (const chart_series& se : c.right_more) all.push_back({&se, true, kRightMoreColor});
    size_t n = c.x.size();
    for (const drawn& d : all) n = std::min(n, d.se->y.size());

    double xmin = 0, xmax = 1, lmin = 0, lmax = 0, rmin = 0, rmax = 0;
    if (n > 0) {
        xmin = xmax = c.x[0];
        lmin = lmax = c.left.y[0];
        rmin = rmax = c.right.y[0];
        for (size_t i = 0; i < n; ++i) {
            xmin = std::min(xmin, c.x[i]);
            xmax = std::max(xmax, c.x[i]);
            for (const drawn& d : all) {
                double& lo = d.right ? rmin : lmin;
                double& hi = d.right ? rmax : lmax;
                lo = std::min(lo, d.se->y[i]);
                hi = std::max(hi, d.se->y[i]);
            }
        }
    }
    // Legend rows: entries laid out left to right, wrapped to the chart's width; the further
    // series start a row of their own.
    constexpr double kCharW = 7.2, kKeyW = 36, kGap = 24, kRowH = 24;
    std::vector<std::vector<size_t>> rows(1);
    std::vector<double> row_w(1, 0);
    for (size_t i = 0; i < all.size(); ++i) {
        const double w = kKeyW + kCharW * static_cast<double>(all[i].se->legend.size()) + kGap;
        if (!rows.back().empty() && (row_w.back() + w > W - 40 || i == 2)) {
            rows.emplace_back();
            row_w.push_back(0);
        }
        rows.back().push_back(i);
        row_w.back() += w;
    }
    const double top = 95 + kRowH * static_cast<double>(rows.size() - 1);
    const double ph = H - top - bottom;
    const axis ax = make_axis(xmin, xmax, false);
    const axis al = make_axis(lmin, lmax, c.y_from_zero);
    const axis ar = make_axis(rmin, rmax, c.y_from_zero);
    auto X = [&](double v) { return left + (v - ax.lo) / (ax.hi - ax.lo) * pw; };
    auto YL = [&](double v) { return top + ph - (v - al.lo) / (al.hi - al.lo) * ph; };
    auto YR = [&](double v) { return top + ph - (v - ar.lo) / (ar.hi - ar.lo) * ph; };

    std::string s;
    s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W) + "\" height=\"" + num(H) +
         "\" viewBox=\"0 0 " + num(W) + " " + num(H) +
         "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"13\">\n";
    s += "<title>" + xml_escape(o.title) + "</title>\n";
    s += "<rect x=\"0\" y=\"0\" width=\"" + num(W) + "\" height=\"" + num(H) +
         "\" fill=\"white\"/>\n";
    s += "<text x=\"" + num(W / 2) +
         "\" y=\"28\" text-anchor=\"middle\" font-size=\"18\" "
         "font-weight=\"bold\">" +
         xml_escape(o.title) + "</text>\n";
    if (!o.subtitle.empty()) {
        s += "<text x=\"" + num(W / 2) + "\" y=\"48\" text-anchor=\"middle\" fill=\"#555\">" +
             xml_escape(o.subtitle) + "</text>\n";
    }

    // Grid and ticks. Horizontal grid lines follow the left axis.
    s += "<g id=\"grid\" stroke=\"#e5e5e5\" stroke-width=\"1\">\n";
    for (double v = al.lo; v <= al.hi + al.step * 1e-9; v += al.step) {
        s += "<line x1=\"" + num(left) + "\" y1=\"" + num(YL(v)) + "\" x2=\"" + num(left + pw) +
             "\" y2=\"" + num(YL(v)) + "\"/>\n";
    }
    for (double v = ax.lo; v <= ax.hi + ax.step * 1e-9; v += ax.step) {
        s += "<line x1=\"" + num(X(v)) + "\" y1=\"" + num(top) + "\" x2=\"" + num(X(v)) +
             "\" y2=\"" + num(top + ph) + "\"/>\n";
    }
    s += "</g>\n";

    s += "<g id=\"x-axis\">\n";
    s += "<line x1=\"" + num(left) + "\" y1=\"" + num(top + ph) + "\" x2=\"" + num(left + pw) +
         "\" y2=\"" + num(top + ph) + "\" stroke=\"black\"/>\n";
    for (double v = ax.lo; v <= ax.hi + ax.step * 1e-9; v += ax.step) {
        s += "<line x1=\"" + num(X(v)) + "\" y1=\"" + num(top + ph) + "\" x2=\"" + num(X(v)) +
             "\" y2=\"" + num(top + ph + 5) + "\" stroke=\"black\"/>\n";
        s += "<text x=\"" + num(X(v)) + "\" y=\"" + num(top + ph + 20) +
             "\" text-anchor=\"middle\">" + tick_label(v, ax.step, c.x_thousands && ax.hi >= 1000) +
             "</text>\n";
    }
    s += "<text x=\"" + num(left + pw / 2) + "\" y=\"" + num(H - 20) +
         "\" text-anchor=\"middle\">" + xml_escape(c.x_label) + "</text>\n";
    s += "</g>\n";

    auto y_axis = [&](const chart_series& se, const axis& a, double x, bool is_left,
                      const char* color, auto Y) {
        s += "<g id=\"y-axis-" + xml_escape(se.id) + "\" fill=\"" + color + "\">\n";
        s += "<line x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" +
             num(top + ph) + "\" stroke=\"" + color + "\"/>\n";
        for (double v = a.lo; v <= a.hi + a.step * 1e-9; v += a.step) {
            const double tx = is_left ? x - 5 : x + 5;
            s += "<line x1=\"" + num(x) + "\" y1=\"" + num(Y(v)) + "\" x2=\"" + num(tx) +
                 "\" y2=\"" + num(Y(v)) + "\" stroke=\"" + color + "\"/>\n";
            s += "<text x=\"" + num(is_left ? x - 8 : x + 8) + "\" y=\"" + num(Y(v) + 4) +
                 "\" text-anchor=\"" + (is_left ? "end" : "start") + "\">" +
                 tick_label(v, a.step, false) + "</text>\n";
        }
        const double lx = is_left ? 22 : W - 22;
        s += "<text x=\"" + num(lx) + "\" y=\"" + num(top + ph / 2) +
             "\" text-anchor=\"middle\" transform=\"rotate(" + (is_left ? "-90 " : "90 ") +
             num(lx) + " " + num(top + ph / 2) + ")\">" + xml_escape(se.axis_label) + "</text>\n";
        s += "</g>\n";
    };
    y_axis(c.left, al, left, true, kLeftColor, YL);
    y_axis(c.right, ar, left + pw, false, kRightColor, YR);

    auto series = [&](const chart_series& se, const char* color, auto Y) {
        const std::string dash = se.dashed ? " stroke-dasharray=\"6 3\"" : "";
        s += "<g id=\"series-" + xml_escape(se.id) + "\">\n";
        if (n > 1) {
            s += std::string("<polyline fill=\"none\" stroke=\"") + color +
                 "\" stroke-width=\"2\"" + dash + " points=\"";
            for (size_t i = 0; i < n; ++i)
                s += (i ? " " : "") + num(X(c.x[i])) + "," + num(Y(se.y[i]));
            s += "\"/>\n";
        }
        for (size_t i = 0; i < n; ++i) {
            s += "<circle cx=\"" + num(X(c.x[i])) + "\" cy=\"" + num(Y(se.y[i])) +
                 "\" r=\"3.5\" fill=\"" + color + "\"><title>" + xml_escape(se.legend) + " at " +
                 x_label_of(c.x[i]) + " " + xml_escape(c.x_tooltip) + ": " + value_label(se.y[i]) +
                 " " + xml_escape(se.unit) + "</title></circle>\n";
        }
        s += "</g>\n";
    };
    for (const drawn& d : all) {
        if (d.right) {
            series(*d.se, d.color, YR);
        } else {
            series(*d.se, d.color, YL);
        }
    }

    // Legend: rows between the title and the plot, so that it never covers a point.
    s += "<g id=\"legend\">\n";
    for (size_t r = 0; r < rows.size(); ++r) {
        const double ly = 62 + kRowH * static_cast<double>(r);
        double x0 = W / 2 - row_w[r] / 2;
        s += "<rect x=\"" + num(x0 - 6) + "\" y=\"" + num(ly) + "\" width=\"" +
             num(row_w[r] - kGap + 12) + "\" height=\"" + num(kRowH) +
             "\" fill=\"white\" stroke=\"#999\"/>\n";
        for (const size_t i : rows[r]) {
            const chart_series& se = *all[i].se;
            s += "<line x1=\"" + num(x0) + "\" y1=\"" + num(ly + 12) + "\" x2=\"" + num(x0 + 30) +
                 "\" y2=\"" + num(ly + 12) + "\" stroke=\"" + all[i].color +
                 "\" stroke-width=\"2\"" + (se.dashed ? " stroke-dasharray=\"6 3\"" : "") + "/>\n";
            s += "<text x=\"" + num(x0 + kKeyW) + "\" y=\"" + num(ly + 16) + "\">" +
                 xml_escape(se.legend) + "</text>\n";
            x0 += kKeyW + kCharW * static_cast<double>(se.legend.size()) + kGap;
        }
    }
    s += "</g>\n";
    s += "</svg>\n";
    return s;
}

std::string throughput_svg(const std::vector<throughput_point>& points, const chart_options& o,
                           unsigned projected_layers) {
    dual_axis_chart c;
    c.x_label = "context (tokens)";
    c.x_tooltip = "tokens";
    c.x_thousands = true;
    c.left = {{}, "prefill (tokens/s)", "prefill t/s (left axis)", "t/s", "prefill", false};
    c.right = {{},  "generation (tokens/s)", "generation t/s (right axis)", "t/s", "generation",
               true};
    if (projected_layers > 0) {
        const std::string at = ", " + std::to_string(projected_layers) + " layers (projected)";
        c.left_more.push_back({{}, "", "prefill t/s" + at, "t/s", "prefill-projected", true});
        c.right_more.push_back(
            {{}, "", "generation t/s" + at, "t/s", "generation-projected", true});
    }
    for (const throughput_point& p : points) {
        c.x.push_back(p.ctx);
        c.left.y.push_back(p.prefill_tps);
        c.right.y.push_back(p.gen_tps);
        if (projected_layers > 0) {
            c.left_more[0].y.push_back(p.proj_prefill_tps);
            c.right_more[0].y.push_back(p.proj_gen_tps);
        }
    }
    return dual_axis_svg(c, o);
}

}  // namespace magnetar::cli
