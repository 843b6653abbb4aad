// `magnetar steer`: directional steering files (docs/steering.md).
//
//   steer build  renders each prompt of a target and a control set as a chat turn, reads the
//                last prompt row of every layer's FFN (or attention) output through the dump
//                taps, and writes the unit direction mean(target) - mean(control) per layer
//                (optionally pair-normalised, with the control mean projected out) plus its
//                JSON sidecar.
//   steer sweep  generates replies to a prompt set at several steering scales and reports a
//                measurable property per scale (reply length in tokens, the frequency of a
//                marker word) as a table, and optionally CSV and an SVG chart.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/chart_svg.h"
#include "cli/command.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "cli/generation.h"
#include "core/format.h"
#include "core/progress.h"
#include "magnetar/engine.h"
#include "magnetar/session.h"
#include "model/steering.h"

namespace magnetar::cli {

namespace {

// ---------------------------------------------------------------------------------------------
// Shared
// ---------------------------------------------------------------------------------------------

struct steer_flags {
    std::string model;
    int64_t n_ctx = 0;
    int threads = 0;
    std::string system = kDefaultSystem;
    engine_flags engine;
};

void add_steer_flags(CLI::App& sub, steer_flags& f, int64_t default_ctx) {
    f.n_ctx = default_ctx;
    sub.add_option(
        "-m,--model", f.model,
        std::string("Model GGUF (default: $MAGNETAR_MODEL or ") + kDefaultModelRelPath + ")");
    sub.add_option("-c,--ctx", f.n_ctx, "Context size in tokens (the longest prompt and reply)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{16}, int64_t{1} << 30));
    sub.add_option("-t,--threads", f.threads, "Threads (default: one per physical core)");
    sub.add_option("--system", f.system, "System prompt of every rendered prompt; \"\" for none")
        ->capture_default_str();
    add_backend_flags(sub, f.engine);
}

std::unique_ptr<Engine> load(const steer_flags& f, const std::string& steering_file, float ffn,
                             float attn) {
    engine_options eo;
    eo.model_path = resolve_model_path(f.model);
    eo.n_threads = f.threads;
    apply_engine_flags(f.engine, eo);
    eo.use_mtp = false;  // no drafts: a little less work per token
    eo.steering_file = steering_file;
    eo.steering_ffn = ffn;
    eo.steering_attn = attn;
    std::unique_ptr<Engine> engine;
    check(Engine::load(eo, &engine));
    report_engine(engine->info());
    if (!engine->info().has_tokenizer)
        throw std::runtime_error(eo.model_path + ": the model has no tokenizer (tokenizer.ggml.*)");
    return engine;
}

// One prompt per non-empty line.
std::vector<std::string> read_prompts(const std::string& path) {
    std::istringstream in(read_text_file(path));
    std::vector<std::string> out;
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        out.push_back(line);
    }
    if (out.empty()) throw std::runtime_error(path + ": no prompts (one per line)");
    return out;
}

std::vector<int32_t> render(const Engine& e, const std::string& system, const std::string& text,
                            think_mode mode, int64_t n_ctx) {
    std::vector<chat_turn> turns;
    if (!system.empty()) turns.push_back({"system", system, ""});
    turns.push_back({"user", text, ""});
    std::vector<int32_t> ids;
    check(e.tokenize_chat(turns, mode, static_cast<uint64_t>(n_ctx), &ids));
    return ids;
}

// ---------------------------------------------------------------------------------------------
// steer build
// ---------------------------------------------------------------------------------------------

struct build_args {
    steer_flags f;
    std::string good, bad, out, component = "ffn_out";
    bool think = false;
    bool pair_normalize = false;
    bool no_orthogonalize = false;
    bool overwrite = false;
};

using rows_t = std::vector<std::vector<double>>;  // [n_layer][D], summed or per prompt

// The last prompt row of `component` of every main layer for each prompt: [prompt][layer][D].
std::vector<rows_t> last_rows(const Engine& e, Session& s, const build_args& a,
                              const std::vector<std::string>& prompts, const char* label) {
    const model_info& info = e.info();
    std::vector<rows_t> out;
    Progress bar(label, prompts.size(), Progress::Unit::items);
    for (const std::string& p : prompts) {
        const std::vector<int32_t> ids =
            render(e, a.f.system, p, a.think ? think_mode::on : think_mode::off, a.f.n_ctx);
        if (static_cast<int64_t>(ids.size()) > s.n_ctx()) {
            throw std::runtime_error(strfmt("a prompt of %zu tokens does not fit --ctx %lld",
                                            ids.size(), static_cast<long long>(s.n_ctx())));
        }
        const int64_t last = static_cast<int64_t>(ids.size()) - 1;
        rows_t rows(info.n_layer);
        std::vector<bool> seen(info.n_layer, false);
        s.set_dump({"blk.*." + a.component}, [&](const std::string& name, int64_t first, int64_t n,
                                                 int64_t width, const float* data) {
            unsigned il = 0;
            if (std::sscanf(name.c_str(), "blk.%u.", &il) != 1 || il >= info.n_layer) return;
            if (last < first || last >= first + n) return;
            const float* r = data + (last - first) * width;
            rows[il].assign(r, r + width);
            seen[il] = true;
        });
        s.reset();
        check(s.eval(ids));
        for (uint32_t il = 0; il < info.n_layer; ++il) {
            if (!seen[il])
                throw std::runtime_error(strfmt("no %s tap of layer %u", a.component.c_str(), il));
        }
        out.push_back(std::move(rows));
        bar.add(1);
    }
    bar.finish();
    return out;
}

double norm(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
}

int run_build(const build_args& a) {
    check_output(a.out, a.overwrite);
    check_output(steering_sidecar_path(a.out), a.overwrite);
    const std::vector<std::string> good = read_prompts(a.good);
    const std::vector<std::string> bad = read_prompts(a.bad);
    if (a.pair_normalize && good.size() != bad.size()) {
        throw std::runtime_error(
            strfmt("--pair-normalize pairs line i of --good with line i of "
                   "--bad: they have %zu and %zu prompts",
                   good.size(), bad.size()));
    }
    const auto engine = load(a.f, "", 0.0f, 0.0f);
    const model_info& info = engine->info();
    session_options so;
    so.n_ctx = a.f.n_ctx;
    so.checkpoint_interval = 0;
    std::unique_ptr<Session> s;
    check(engine->create_session(so, &s));

    // Target: the --bad set (the property the direction stands for); control: --good.
    const std::vector<rows_t> target = last_rows(*engine, *s, a, bad, "target (--bad)");
    const std::vector<rows_t> control = last_rows(*engine, *s, a, good, "control (--good)");

    const size_t D = info.n_embd;
    steering_file f;
    f.n_layer = info.n_layer;
    f.n_embd = info.n_embd;
    f.directions.assign(static_cast<size_t>(info.n_layer) * D, 0.0f);
    f.model = info.name;
    f.arch = info.arch;
    f.component = a.component;
    f.n_target = static_cast<int64_t>(bad.size());
    f.n_control = static_cast<int64_t>(good.size());
    f.orthogonalized = !a.no_orthogonalize;
    f.pair_normalized = a.pair_normalize;
    f.note = strfmt("magnetar steer build --good %s --bad %s --component %s%s%s%s", a.good.c_str(),
                    a.bad.c_str(), a.component.c_str(), a.think ? " --think" : "",
                    a.pair_normalize ? " --pair-normalize" : "",
                    a.no_orthogonalize ? " --no-orthogonalize" : "");

    std::printf("%5s %12s %12s %12s %10s\n", "layer", "|target|", "|control|", "|diff|",
                "cos(t,c)");
    for (uint32_t il = 0; il < info.n_layer; ++il) {
        std::vector<double> mt(D, 0.0), mc(D, 0.0), d(D, 0.0);
        for (const rows_t& r : target)
            for (size_t i = 0; i < D; ++i) mt[i] += r[il][i] / static_cast<double>(target.size());
        for (const rows_t& r : control)
            for (size_t i = 0; i < D; ++i) mc[i] += r[il][i] / static_cast<double>(control.size());
        if (a.pair_normalize) {
            for (size_t k = 0; k < target.size(); ++k) {
                std::vector<double> pd(D);
                for (size_t i = 0; i < D; ++i) pd[i] = target[k][il][i] - control[k][il][i];
                const double n = norm(pd);
                if (n == 0) continue;
                for (size_t i = 0; i < D; ++i)
                    d[i] += pd[i] / n / static_cast<double>(target.size());
            }
        } else {
            for (size_t i = 0; i < D; ++i) d[i] = mt[i] - mc[i];
        }
        const double raw = norm(d);
        if (!a.no_orthogonalize) {
            // Remove the control mean's direction, so steering does not shrink every state.
            const double nc = norm(mc);
            if (nc > 0) {
                double dot = 0;
                for (size_t i = 0; i < D; ++i) dot += d[i] * mc[i] / nc;
                for (size_t i = 0; i < D; ++i) d[i] -= dot * mc[i] / nc;
            }
        }
        const double nd = norm(d);
        double cos_tc = 0;
        if (norm(mt) > 0 && norm(mc) > 0) {
            for (size_t i = 0; i < D; ++i) cos_tc += mt[i] * mc[i];
            cos_tc /= norm(mt) * norm(mc);
        }
        std::printf("%5u %12.5g %12.5g %12.5g %10.5f\n", il, norm(mt), norm(mc), raw, cos_tc);
        if (!(nd > 1e-12 * std::max(1.0, norm(mt)))) {
            std::fprintf(stderr,
                         "magnetar: warning: layer %u: the sets do not differ; no direction\n", il);
            continue;
        }
        float* v = f.directions.data() + static_cast<size_t>(il) * D;
        for (size_t i = 0; i < D; ++i) v[i] = static_cast<float>(d[i] / nd);
        f.layers.push_back(il);
    }
    write_steering_file(a.out, f);
    std::fprintf(stderr, "wrote %s and %s (%u layers x %u)\n", a.out.c_str(),
                 steering_sidecar_path(a.out).c_str(), f.n_layer, f.n_embd);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// steer sweep
// ---------------------------------------------------------------------------------------------

struct sweep_args {
    steer_flags f;
    std::string direction, prompts, scales = "-2,-1,0,1,2", marker, csv, svg;
    int64_t tokens = 160;
    float attn_scale = 0.0f;
    bool nothink = false;
    sampling_params sampling;
};

std::vector<float> parse_scales(const std::string& text) {
    std::vector<float> out;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        size_t used = 0;
        float v = 0;
        try {
            v = std::stof(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != item.size() || !std::isfinite(v) || std::fabs(v) > 100) {
            throw std::runtime_error("--scales: \"" + item +
                                     "\" is not a number in [-100, 100] (comma-separated list)");
        }
        out.push_back(v);
    }
    if (out.empty()) throw std::runtime_error("--scales: empty list");
    return out;
}

// Whole-word, case-insensitive occurrences of `word` in `text`.
int64_t count_word(const std::string& text, const std::string& word) {
    if (word.empty()) return 0;
    auto lower = [](std::string s) {
        for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return s;
    };
    const std::string t = lower(text), w = lower(word);
    auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
    int64_t n = 0;
    for (size_t at = t.find(w); at != std::string::npos; at = t.find(w, at + 1)) {
        const bool start = at == 0 || !is_word(t[at - 1]);
        const bool end = at + w.size() >= t.size() || !is_word(t[at + w.size()]);
        if (start && end) ++n;
    }
    return n;
}

struct sweep_row {
    float scale = 0;
    double mean_tokens = 0;
    double median_tokens = 0;
    double ended = 0;  // share of replies that ended (EOS) within the budget
    double marker_per_reply = 0;
    double marker_share = 0;  // share of replies with the marker
    std::string example;      // the reply to the first prompt
};

int run_sweep(const sweep_args& a) {
    const std::vector<std::string> prompts = read_prompts(a.prompts);
    const std::vector<float> scales = parse_scales(a.scales);
    const auto engine = load(a.f, a.direction, 0.0f, a.attn_scale);
    session_options so;
    so.n_ctx = a.f.n_ctx;
    std::unique_ptr<Session> s;
    check(engine->create_session(so, &s));
    const think_mode mode = a.nothink ? think_mode::off : think_mode::on;

    std::vector<sweep_row> rows;
    Progress bar("sweep", scales.size() * prompts.size(), Progress::Unit::items);
    for (const float sc : scales) {
        check(s->set_steering({sc, a.attn_scale}));
        sweep_row row;
        row.scale = sc;
        std::vector<double> lens;
        int64_t markers = 0, with_marker = 0, ended = 0;
        for (const std::string& p : prompts) {
            const std::vector<int32_t> ids = render(*engine, a.f.system, p, mode, a.f.n_ctx);
            generation g;
            g.sampling = a.sampling;
            g.n_predict = a.tokens;
            g.eos = engine->info().special.eos;
            s->reset();
            check(run_generation(*s, ids, g));
            const std::string text = engine->detokenize(g.tokens);
            lens.push_back(static_cast<double>(g.tokens.size()));
            const int64_t m = count_word(text, a.marker);
            markers += m;
            with_marker += m > 0 ? 1 : 0;
            ended += g.hit_eos ? 1 : 0;
            if (row.example.empty()) row.example = text;
            bar.add(1);
        }
        const auto n = static_cast<double>(prompts.size());
        for (double l : lens) row.mean_tokens += l / n;
        row.median_tokens = median(lens);
        row.ended = static_cast<double>(ended) / n;
        row.marker_per_reply = static_cast<double>(markers) / n;
        row.marker_share = static_cast<double>(with_marker) / n;
        rows.push_back(std::move(row));
    }
    bar.finish();

    const bool marker = !a.marker.empty();
    std::printf("%8s %8s %12s %14s %8s", "scale", "replies", "mean_tokens", "median_tokens",
                "ended");
    if (marker) std::printf(" %16s %14s", ("'" + a.marker + "'/reply").c_str(), "with_marker");
    std::printf("\n");
    for (const sweep_row& r : rows) {
        std::printf("%8.3g %8zu %12.2f %14.1f %7.0f%%", static_cast<double>(r.scale),
                    prompts.size(), r.mean_tokens, r.median_tokens, 100 * r.ended);
        if (marker) std::printf(" %16.3f %13.0f%%", r.marker_per_reply, 100 * r.marker_share);
        std::printf("\n");
    }
    for (const sweep_row& r : rows) {
        std::string ex = r.example.substr(0, 160);
        std::replace(ex.begin(), ex.end(), '\n', ' ');
        std::fprintf(stderr, "scale %g, first prompt: %s\n", static_cast<double>(r.scale),
                     ex.c_str());
    }
    if (!a.csv.empty()) {
        std::string out =
            "scale,replies,mean_tokens,median_tokens,ended,marker_per_reply,"
            "marker_share\n";
        for (const sweep_row& r : rows) {
            out += strfmt("%g,%zu,%.4f,%.1f,%.4f,%.4f,%.4f\n", static_cast<double>(r.scale),
                          prompts.size(), r.mean_tokens, r.median_tokens, r.ended,
                          r.marker_per_reply, r.marker_share);
        }
        write_file_text(a.csv, out);
        std::fprintf(stderr, "wrote %s\n", a.csv.c_str());
    }
    if (!a.svg.empty()) {
        dual_axis_chart c;
        c.x_label = "steering scale (FFN; positive removes the direction)";
        c.x_tooltip = "scale";
        c.left = {{},   "mean reply (tokens)", "mean reply tokens (left axis)", "tokens", "length",
                  false};
        if (marker) {
            c.right = {{},
                       "'" + a.marker + "' per reply",
                       "'" + a.marker + "' per reply (right axis)",
                       "per reply",
                       "marker",
                       true};
        } else {
            c.right = {
                {},  "replies ended within the budget (%)", "ended % (right axis)", "%", "ended",
                true};
        }
        for (const sweep_row& r : rows) {
            c.x.push_back(r.scale);
            c.left.y.push_back(r.mean_tokens);
            c.right.y.push_back(marker ? r.marker_per_reply : 100 * r.ended);
        }
        chart_options co;
        co.title = "magnetar steer sweep";
        co.subtitle = strfmt("%s, %s, %zu prompts, up to %lld tokens", engine->info().name.c_str(),
                             a.direction.c_str(), prompts.size(), static_cast<long long>(a.tokens));
        write_file_text(a.svg, dual_axis_svg(c, co));
        std::fprintf(stderr, "wrote %s\n", a.svg.c_str());
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------

action setup(CLI::App& sub) {
    sub.require_subcommand(1);
    auto b = std::make_shared<build_args>();
    CLI::App* build = sub.add_subcommand(
        "build",
        "Build a steering direction from a target (--bad) and a control (--good) prompt set");
    add_steer_flags(*build, b->f, 512);
    build->add_option("--good", b->good, "Control prompts, one per line")
        ->required()
        ->check(CLI::ExistingFile);
    build
        ->add_option("--bad", b->bad,
                     "Target prompts, one per line: the property the direction stands for "
                     "(a positive scale removes it)")
        ->required()
        ->check(CLI::ExistingFile);
    build->add_option("-o,--out", b->out, "Direction file to write (its sidecar: .f32 -> .json)")
        ->required();
    build->add_option("--component", b->component, "Taps to read: ffn_out or attn_out")
        ->capture_default_str()
        ->check(CLI::IsMember({"ffn_out", "attn_out"}));
    build->add_flag("--think", b->think, "Render the prompts with thinking on (default off)");
    build->add_flag("--pair-normalize", b->pair_normalize,
                    "Average unit differences of line-paired prompts instead of the means");
    build->add_flag("--no-orthogonalize", b->no_orthogonalize,
                    "Keep the control mean's component in the direction");
    build->add_flag("--overwrite", b->overwrite, "Replace the direction file when it exists");

    auto w = std::make_shared<sweep_args>();
    w->sampling.temperature = 0.0f;  // a greedy sweep is repeatable
    CLI::App* sweep = sub.add_subcommand(
        "sweep", "Generate over a prompt set at several steering scales and measure the replies");
    add_steer_flags(*sweep, w->f, 4096);
    sweep->add_option("--direction", w->direction, "Direction file (steer build)")
        ->required()
        ->check(CLI::ExistingFile);
    sweep->add_option("--prompts", w->prompts, "Prompts, one per line")
        ->required()
        ->check(CLI::ExistingFile);
    sweep->add_option("--scales", w->scales, "FFN steering scales, comma-separated")
        ->capture_default_str();
    sweep->add_option("-n,--tokens", w->tokens, "Most tokens per reply")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    sweep->add_option("--attn-scale", w->attn_scale, "Attention steering scale at every point")
        ->capture_default_str()
        ->check(CLI::Range(-100.0f, 100.0f));
    sweep->add_option("--marker", w->marker,
                      "A word whose frequency in the replies is measured (whole word, any case)");
    sweep->add_flag("--nothink", w->nothink, "Render the prompts with thinking off");
    sweep->add_option("--temp", w->sampling.temperature, "Temperature (default 0: greedy)")
        ->check(CLI::Range(0.0f, 100.0f));
    sweep->add_option("--seed", w->sampling.seed, "Sampling seed (with --temp > 0)");
    sweep->add_option("--csv", w->csv, "Also write the table as CSV");
    sweep->add_option("--svg", w->svg, "Also write a chart of the property against the scale");

    return [b, w, build, sweep]() {
        if (build->parsed()) return run_build(*b);
        if (sweep->parsed()) return run_sweep(*w);
        return 1;
    };
}

}  // namespace

MAGNETAR_COMMAND(steer, "steer", "Directional steering: build a direction file, sweep its scale",
                 setup);

}  // namespace magnetar::cli
