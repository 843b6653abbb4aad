// `magnetar compare-reference`: runs the fast path and the scalar reference path (every matrix
// product through the plain dequantize-and-sum twin) side by side over the first tokens of a
// prompt, and reports per layer the largest difference between their named intermediates.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/token_file.h"
#include "core/error.h"
#include "core/format.h"
#include "magnetar/engine.h"

namespace magnetar::cli {

namespace {

struct args {
    std::string model;
    std::string prompt;
    std::string tokens;
    int first = 8;
    int threads = 0;
    bool all = false;
};

void check(const status& st) {
    if (!st.ok()) throw Error(st.message());
}

struct run_out {
    std::map<std::string, std::vector<float>> rows;  // name -> all rows, in position order
    std::vector<float> logits;
};

run_out run_path(const std::string& model, bool reference, int threads,
                 const std::vector<int32_t>& toks) {
    engine_options eo;
    eo.model_path = model;
    eo.n_threads = threads;
    eo.reference_kernels = reference;
    std::unique_ptr<Engine> e;
    check(Engine::load(eo, &e));
    session_options so;
    so.n_ctx = static_cast<int64_t>(toks.size());
    so.checkpoint_interval = 0;
    std::unique_ptr<Session> s;
    check(e->create_session(so, &s));
    run_out out;
    // Every tap except the extra-cost importance taps.
    s->set_dump({"embd", "blk.*", "result_norm"},
                [&](const std::string& name, int64_t, int64_t n, int64_t w, const float* d) {
                    if (name.find("moe_swiglu") != std::string::npos) return;
                    auto& v = out.rows[name];
                    v.insert(v.end(), d, d + n * w);
                });
    check(s->eval(toks));
    out.logits.assign(s->logits().begin(), s->logits().end());
    return out;
}

// Largest |a - b| over the largest |b|: a relative measure that ignores near-zero elements.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return INFINITY;
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
        den = std::max(den, std::fabs(static_cast<double>(b[i])));
    }
    return den > 0 ? num / den : num;
}

int run(const args& a) {
    const std::string model = resolve_model_path(a.model);
    std::vector<int32_t> toks;
    if (!a.tokens.empty()) {
        toks = read_token_file(a.tokens);
    } else {
        engine_options eo;
        eo.model_path = model;
        std::unique_ptr<Engine> e;
        check(Engine::load(eo, &e));
        check(e->tokenize_chat({{"user", a.prompt.empty() ? "Hello" : a.prompt, ""}},
                               think_mode::on, 0, &toks));
    }
    if (a.first < 1) throw Error("compare-reference: --first must be at least 1");
    if (toks.size() > static_cast<size_t>(a.first)) toks.resize(static_cast<size_t>(a.first));
    if (toks.empty()) throw Error("compare-reference: no tokens");

    std::fprintf(stderr, "compare-reference: %zu tokens, fast path ...\n", toks.size());
    const run_out fast = run_path(model, false, a.threads, toks);
    std::fprintf(stderr, "compare-reference: scalar reference path ...\n");
    const run_out ref = run_path(model, true, a.threads, toks);

    // Per layer: the intermediate with the largest difference.
    struct worst {
        double rel = -1;
        std::string name;
    };
    std::map<std::string, worst> by_layer;  // "blk.3", "embd", "result_norm"
    std::vector<std::pair<std::string, double>> all;
    for (const auto& [name, rows] : ref.rows) {
        const auto it = fast.rows.find(name);
        if (it == fast.rows.end()) continue;
        const double d = rel_diff(it->second, rows);
        all.emplace_back(name, d);
        std::string group = name;
        if (name.rfind("blk.", 0) == 0) group = name.substr(0, name.find('.', 4));
        worst& w = by_layer[group];
        if (d > w.rel) w = {d, name};
    }
    std::vector<std::pair<int, std::string>> order;
    for (const auto& [g, w] : by_layer) {
        const int key =
            g.rfind("blk.", 0) == 0 ? std::stoi(g.substr(4)) : (g == "embd" ? -1 : 1 << 20);
        order.emplace_back(key, g);
    }
    std::sort(order.begin(), order.end());
    std::printf("%-12s %-28s %s\n", "layer", "worst intermediate", "max |fast - ref| / max |ref|");
    for (const auto& [k, g] : order) {
        const worst& w = by_layer[g];
        std::printf("%-12s %-28s %.3e\n", g.c_str(), w.name.c_str(), w.rel);
    }
    if (a.all) {
        std::printf("\nall intermediates:\n");
        for (const auto& [n, d] : all) std::printf("  %-32s %.3e\n", n.c_str(), d);
    }
    const double dl = rel_diff(fast.logits, ref.logits);
    const auto am = [](const std::vector<float>& v) {
        return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
    };
    std::printf("\nlogits of the last token: max rel diff %.3e, argmax fast %d / reference %d%s\n",
                dl, am(fast.logits), am(ref.logits),
                am(fast.logits) == am(ref.logits) ? "" : "  (DIFFERENT)");
    return 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    sub.add_option("-m,--model", a->model,
                   "Model GGUF (default: $MAGNETAR_MODEL or models/magnetar-tiny.gguf)");
    sub.add_option("-p,--prompt", a->prompt, "Prompt, rendered as one user turn (default: Hello)");
    sub.add_option("--tokens", a->tokens, "Token ids (JSON array file) instead of a prompt")
        ->excludes("--prompt");
    sub.add_option("--first", a->first, "Compare the first N tokens")->capture_default_str();
    sub.add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
    sub.add_flag("--all", a->all, "Also list every intermediate");
    sub.footer(
        "The fast path uses the SIMD kernels (int8 activations for quantized weights); the "
        "reference path dequantizes each weight row and sums in order. Differences of 1e-3 "
        "relative are the expected cost of int8 activation quantization; FP8 / FP4 round "
        "trips can amplify a small difference into a step (docs/engine.md).");
    return [a]() { return run(*a); };
}

}  // namespace

MAGNETAR_COMMAND(compare_reference, "compare-reference",
                 "Fast vs scalar reference path: largest difference per layer", setup);

}  // namespace magnetar::cli
