#include "cli/bench_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace magnetar::cli {

namespace {

const char* kPrefillColor = "#1f77b4";
const char* kGenColor = "#d62728";

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

// Tick label: integers without decimals, "k" for thousands of tokens on the context axis.
std::string tick_label(double v, double step, bool ctx) {
    char b[64];
    if (ctx && v >= 1000 && std::fmod(v, 1000.0) == 0) {
        std::snprintf(b, sizeof b, "%gk", v / 1000);
    } else if (step >= 1) {
        std::snprintf(b, sizeof b, "%.0f", v);
    } else {
        const int digits = std::min(6, static_cast<int>(std::ceil(-std::log10(step))));
        std::snprintf(b, sizeof b, "%.*f", digits, v);
    }
    return b;
}

struct axis {
    double lo = 0, hi = 1, step = 1;
};

// From zero (throughput) or from the data minimum (context) up to a round maximum.
axis make_axis(double lo, double hi, bool from_zero) {
    axis a;
    if (!(hi > 0) || !std::isfinite(hi)) hi = 1;
    if (from_zero || !(lo < hi)) lo = 0;
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

std::string throughput_svg(const std::vector<throughput_point>& points, const chart_options& o) {
    const double W = o.width, H = o.height;
    const double left = 80, right = 80, top = 95, bottom = 70;
    const double pw = W - left - right, ph = H - top - bottom;

    double cmin = 0, cmax = 1, pmax = 0, gmax = 0;
    if (!points.empty()) {
        cmin = cmax = points.front().ctx;
        for (const auto& p : points) {
            cmin = std::min(cmin, p.ctx);
            cmax = std::max(cmax, p.ctx);
            pmax = std::max(pmax, p.prefill_tps);
            gmax = std::max(gmax, p.gen_tps);
        }
    }
    const axis ax = make_axis(cmin, cmax, false);
    const axis ap = make_axis(0, pmax, true);
    const axis ag = make_axis(0, gmax, true);
    auto X = [&](double v) { return left + (v - ax.lo) / (ax.hi - ax.lo) * pw; };
    auto YP = [&](double v) { return top + ph - (v - ap.lo) / (ap.hi - ap.lo) * ph; };
    auto YG = [&](double v) { return top + ph - (v - ag.lo) / (ag.hi - ag.lo) * ph; };

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

    // Grid and ticks. Horizontal grid lines follow the prefill (left) axis.
    s += "<g id=\"grid\" stroke=\"#e5e5e5\" stroke-width=\"1\">\n";
    for (double v = ap.lo; v <= ap.hi + ap.step * 1e-9; v += ap.step) {
        s += "<line x1=\"" + num(left) + "\" y1=\"" + num(YP(v)) + "\" x2=\"" + num(left + pw) +
             "\" y2=\"" + num(YP(v)) + "\"/>\n";
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
             "\" text-anchor=\"middle\">" + tick_label(v, ax.step, true) + "</text>\n";
    }
    s += "<text x=\"" + num(left + pw / 2) + "\" y=\"" + num(H - 20) +
         "\" text-anchor=\"middle\">context (tokens)</text>\n";
    s += "</g>\n";

    auto y_axis = [&](const char* id, const axis& a, double x, bool is_left, const char* color,
                      const char* label, auto Y) {
        s += std::string("<g id=\"") + id + "\" fill=\"" + color + "\">\n";
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
             num(lx) + " " + num(top + ph / 2) + ")\">" + label + "</text>\n";
        s += "</g>\n";
    };
    y_axis("y-axis-prefill", ap, left, true, kPrefillColor, "prefill (tokens/s)", YP);
    y_axis("y-axis-generation", ag, left + pw, false, kGenColor, "generation (tokens/s)", YG);

    auto series = [&](const char* id, const char* color, const char* dash, auto value, auto Y) {
        s += std::string("<g id=\"") + id + "\">\n";
        if (points.size() > 1) {
            s += std::string("<polyline fill=\"none\" stroke=\"") + color +
                 "\" stroke-width=\"2\"" + dash + " points=\"";
            for (size_t i = 0; i < points.size(); ++i) {
                s += (i ? " " : "") + num(X(points[i].ctx)) + "," + num(Y(value(points[i])));
            }
            s += "\"/>\n";
        }
        for (const auto& p : points) {
            s += "<circle cx=\"" + num(X(p.ctx)) + "\" cy=\"" + num(Y(value(p))) +
                 "\" r=\"3.5\" fill=\"" + color + "\"><title>" + tick_label(p.ctx, 1, false) +
                 " tokens: " + num(value(p)) + " t/s</title></circle>\n";
        }
        s += "</g>\n";
    };
    series(
        "series-prefill", kPrefillColor, "",
        [](const throughput_point& p) { return p.prefill_tps; }, YP);
    series(
        "series-generation", kGenColor, " stroke-dasharray=\"6 3\"",
        [](const throughput_point& p) { return p.gen_tps; }, YG);

    // Legend: one row between the title and the plot, so it never covers a point.
    const double lx = W / 2 - 200, ly = 62;
    s += "<g id=\"legend\">\n";
    s += "<rect x=\"" + num(lx) + "\" y=\"" + num(ly) +
         "\" width=\"400\" height=\"24\" fill=\"white\" stroke=\"#999\"/>\n";
    s += "<line x1=\"" + num(lx + 10) + "\" y1=\"" + num(ly + 12) + "\" x2=\"" + num(lx + 40) +
         "\" y2=\"" + num(ly + 12) + "\" stroke=\"" + kPrefillColor + "\" stroke-width=\"2\"/>\n";
    s += "<text x=\"" + num(lx + 46) + "\" y=\"" + num(ly + 16) +
         "\">prefill t/s (left axis)</text>\n";
    s += "<line x1=\"" + num(lx + 205) + "\" y1=\"" + num(ly + 12) + "\" x2=\"" + num(lx + 235) +
         "\" y2=\"" + num(ly + 12) + "\" stroke=\"" + kGenColor +
         "\" stroke-width=\"2\" stroke-dasharray=\"6 3\"/>\n";
    s += "<text x=\"" + num(lx + 241) + "\" y=\"" + num(ly + 16) +
         "\">generation t/s (right axis)</text>\n";
    s += "</g>\n";
    s += "</svg>\n";
    return s;
}

}  // namespace magnetar::cli
