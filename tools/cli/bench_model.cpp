#include "cli/bench_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/chart_svg.h"
#include "cli/common.h"
#include "cli/dot_throughput.h"
#include "cli/engine_flags.h"
#include "cli/generation.h"
#include "cli/read_bandwidth.h"
#include "core/format.h"
#include "core/progress.h"
#include "gguf/gguf.h"
#include "magnetar/engine.h"
#include "model/roofline.h"

namespace magnetar::cli {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// ---------------------------------------------------------------------------------------------
// Input tokens
// ---------------------------------------------------------------------------------------------

// The walk's token sequence, at least `need` tokens: the text tokenized as plain text, or as one
// non-thinking user turn; a text too short is repeated (tokens for plain text, the user text
// itself, joined by blank lines, for the chat rendering).
std::vector<int32_t> walk_tokens(const Engine& e, const model_bench_args& a, int64_t need) {
    std::vector<int32_t> ids;
    if (!a.prompt_file.empty()) {
        const std::string text = read_text_file(a.prompt_file);
        check(e.tokenize(text, false, &ids));
        if (ids.empty()) throw std::runtime_error(a.prompt_file + ": no tokens");
        const size_t once = ids.size();
        while (static_cast<int64_t>(ids.size()) < need) {
            ids.insert(ids.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(once));
        }
        return ids;
    }
    const std::string text = read_text_file(a.chat_prompt_file);
    auto render = [&](int reps) {
        std::string user = text;
        for (int i = 1; i < reps; ++i) user += "\n\n" + text;
        std::vector<chat_turn> turns;
        if (!a.system.empty()) turns.push_back({"system", a.system, ""});
        turns.push_back({"user", user, ""});
        std::vector<int32_t> out;
        check(e.tokenize_chat(turns, think_mode::off, static_cast<uint64_t>(need) + 1, &out));
        return out;
    };
    ids = render(1);
    const int64_t once = static_cast<int64_t>(ids.size());
    if (once < need) {
        int reps = static_cast<int>(need / std::max<int64_t>(1, once)) + 1;
        for (ids = render(reps); static_cast<int64_t>(ids.size()) < need; ids = render(++reps)) {
        }
    }
    return ids;
}

// ---------------------------------------------------------------------------------------------
// Expert selection tap
// ---------------------------------------------------------------------------------------------

// Distinct routed experts per block of each decode step, from the `moe_sel` taps
// (blk.{il}.moe_sel, mtp.moe_sel). The sum over steps divided by the steps is the average.
struct expert_counter {
    uint32_t n_layer = 0;
    std::vector<uint64_t> distinct_sum;  // per block, summed over rows
    std::vector<uint64_t> rows;          // per block

    explicit expert_counter(uint32_t n_blocks, uint32_t n_layer_)
        : n_layer(n_layer_), distinct_sum(n_blocks, 0), rows(n_blocks, 0) {}

    void add(const std::string& name, int64_t n_rows, int64_t width, const float* data) {
        size_t b = 0;
        if (name.rfind("mtp.", 0) == 0) {
            b = n_layer;
        } else {
            b = std::strtoul(name.c_str() + 4, nullptr, 10);  // "blk.N.moe_sel"
        }
        if (b >= distinct_sum.size()) return;
        for (int64_t r = 0; r < n_rows; ++r) {
            std::set<int> ids;
            for (int64_t j = 0; j < width; ++j) ids.insert(static_cast<int>(data[r * width + j]));
            distinct_sum[b] += ids.size();
            rows[b] += 1;
        }
    }
};

// ---------------------------------------------------------------------------------------------
// One frontier
// ---------------------------------------------------------------------------------------------

struct frontier_row {
    int64_t ctx = 0;
    int64_t prefill_tokens = 0;
    double prefill_s = 0;
    int64_t gen_tokens = 0;
    double gen_s = 0;
    uint64_t kvcache_bytes = 0;
    double weight_bytes = 0;   // per decoded token, averaged over the probe
    double kv_bytes = 0;       // per decoded token
    double prefill_flops = 0;  // of the interval's tokens (roofline::prefill_flops)
    double prefill_tps() const { return prefill_s > 0 ? prefill_tokens / prefill_s : 0; }
    double gen_tps() const { return gen_s > 0 ? gen_tokens / gen_s : 0; }
    // Weight + KV bytes streamed per second of generation.
    double achieved_gbs() const { return (weight_bytes + kv_bytes) * gen_tps() * 1e-9; }
    double prefill_gflops() const { return prefill_s > 0 ? prefill_flops / prefill_s * 1e-9 : 0; }
    projection_output proj;
    // --mtp-draft >= 2: a plain probe without taps and the speculative probe of the same tokens.
    double plain_s = 0;
    double spec_s = 0;
    int64_t spec_steps = 0;
    int64_t spec_drafted = 0;
    int64_t spec_kept = 0;
    // --sessions N >= 2: one session's plain probe, and N sessions stepped together.
    double solo_s = 0;
    double batch_s = 0;
    int batch_sessions = 0;
    double solo_tps() const { return solo_s > 0 ? gen_tokens / solo_s : 0; }
    double batch_tps() const { return batch_s > 0 ? batch_sessions * gen_tokens / batch_s : 0; }
    double plain_tps() const { return plain_s > 0 ? gen_tokens / plain_s : 0; }
    double spec_tps() const { return spec_s > 0 ? gen_tokens / spec_s : 0; }
    double tokens_per_step() const {
        return spec_steps > 0 ? static_cast<double>(spec_steps + spec_kept) / spec_steps : 0;
    }
    double kept_rate() const {
        return spec_drafted > 0 ? static_cast<double>(spec_kept) / spec_drafted : 0;
    }
    // The greedy probe's backend op groups (Engine::time_ops), slowest first.
    std::vector<Engine::op_time> ops;
};

// "decode step 41.20 ms: q8_0 matmul 55.1 % (22.70 ms), ..., not in an op group 2.0 %": the
// probe's op groups per step and as shares of its wall time; groups under 0.5 % are summed
// into "smaller groups".
std::string step_breakdown(const frontier_row& r) {
    if (r.gen_tokens <= 0 || r.gen_s <= 0) return "no decode steps";
    const double step = r.gen_s / static_cast<double>(r.gen_tokens);
    std::string out = strfmt("decode step %.2f ms:", step * 1e3);
    double timed = 0, small = 0;
    for (const Engine::op_time& t : r.ops) {
        timed += t.seconds;
        const double share = t.seconds / r.gen_s;
        if (share < 0.005) {
            small += t.seconds;
            continue;
        }
        out += strfmt(" %s %.1f %% (%.2f ms),", t.name.c_str(), 100.0 * share,
                      t.seconds / static_cast<double>(r.gen_tokens) * 1e3);
    }
    if (small > 0) out += strfmt(" smaller groups %.1f %%,", 100.0 * small / r.gen_s);
    out += strfmt(" not in an op group %.1f %%", 100.0 * std::max(0.0, r.gen_s - timed) / r.gen_s);
    return out;
}

// The greedy token that is not EOS (first maximum, as Session::argmax).
int32_t best_non_eos(std::span<const float> l, int32_t eos) {
    int32_t best = -1;
    for (size_t i = 0; i < l.size(); ++i) {
        if (static_cast<int32_t>(i) == eos) continue;
        if (best < 0 || l[i] > l[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    }
    return best;
}

// Greedy generation timed twice from the frontier: one eval() per token (no taps), then
// speculative steps of up to a.mtp_draft tokens. An in-memory checkpoint (which, unlike a
// payload, holds the MTP block's state) returns to the frontier after each. Throws when the
// speculative tokens differ from the plain ones (they must not: docs/engine.md).
void spec_probe(Session& s, const model_bench_args& a, int32_t eos, frontier_row& r) {
    const int64_t at = s.n_past();
    check(s.checkpoint());
    std::vector<int32_t> plain;
    auto t0 = clock_type::now();
    for (int64_t i = 0; i < a.gen_tokens; ++i) {
        const int32_t next = best_non_eos(s.logits(), eos);
        check(s.eval(std::span<const int32_t>(&next, 1)));
        plain.push_back(next);
    }
    r.plain_s = seconds_since(t0);
    check(s.rewind(at));

    const token_chooser choose = [eos](std::span<const float> row) {
        return best_non_eos(row, eos);
    };
    speculation_options so;
    so.n_draft = a.mtp_draft - 1;
    so.min_margin = a.mtp_margin;
    std::vector<int32_t> got;
    t0 = clock_type::now();
    int32_t id = choose(s.logits());
    while (static_cast<int64_t>(got.size()) < a.gen_tokens) {
        so.max_keep = a.gen_tokens - static_cast<int64_t>(got.size()) - 1;
        speculation_result sr;
        check(s.eval_speculative(id, so, choose, &sr));
        got.push_back(id);
        got.insert(got.end(), sr.drafts.begin(), sr.drafts.begin() + sr.kept);
        if (!sr.drafts.empty()) {
            ++r.spec_steps;
            r.spec_drafted += static_cast<int64_t>(sr.drafts.size());
            r.spec_kept += sr.kept;
        }
        id = sr.next;
    }
    r.spec_s = seconds_since(t0);
    check(s.rewind(at));
    if (got != plain) {
        throw std::runtime_error(
            strfmt("bench: speculative decoding at ctx %lld gave other tokens than plain "
                   "decoding",
                   static_cast<long long>(r.ctx)));
    }
}

// ---------------------------------------------------------------------------------------------
// Projection base (a CSV of this tool on a model with another layer count)
// ---------------------------------------------------------------------------------------------

struct base_rates {
    double prefill_tps = 0, gen_tps = 0;
};

// --sessions N: the session's state at the frontier (`snapshot`) loaded into N sessions that
// decode greedily together for gen_tokens steps, one Engine::decode_batch step per token, and
// the same steps of `s` alone, timed before and after the group (the faster of the two counts:
// no credit for pages the other probe warmed). Session i > 0 starts from another token of the
// text, so the streams (and their experts) differ. `s` is left at the snapshot.
void batch_probe(const Engine& e, Session& s, std::vector<std::unique_ptr<Session>>& group,
                 const std::vector<uint8_t>& snapshot, const std::vector<int32_t>& text,
                 const model_bench_args& a, int32_t eos, frontier_row& r) {
    const auto solo = [&] {
        const auto t0 = clock_type::now();
        for (int64_t i = 0; i < a.gen_tokens; ++i) {
            const int32_t next = best_non_eos(s.logits(), eos);
            check(s.eval(std::span<const int32_t>(&next, 1)));
        }
        const double sec = seconds_since(t0);
        check(s.load_payload(snapshot));
        return sec;
    };
    const double before = solo();
    std::vector<Session*> ptrs;
    std::vector<int32_t> step(group.size());
    for (size_t i = 0; i < group.size(); ++i) {
        check(group[i]->load_payload(snapshot));
        ptrs.push_back(group[i].get());
        step[i] = i == 0 ? best_non_eos(group[i]->logits(), eos) : text[(i * 7919) % text.size()];
    }
    const auto t0 = clock_type::now();
    for (int64_t k = 0; k < a.gen_tokens; ++k) {
        if (k > 0) {
            for (size_t i = 0; i < group.size(); ++i)
                step[i] = best_non_eos(group[i]->logits(), eos);
        }
        check(e.decode_batch(ptrs, step));
    }
    r.batch_s = seconds_since(t0);
    r.batch_sessions = static_cast<int>(group.size());
    r.solo_s = std::min(before, solo());
}

std::map<int64_t, base_rates> read_base_csv(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path + ": cannot read");
    std::string line;
    if (!std::getline(in, line)) throw std::runtime_error(path + ": empty CSV");
    std::vector<std::string> cols;
    {
        std::stringstream ss(line);
        for (std::string c; std::getline(ss, c, ',');) cols.push_back(c);
    }
    auto col = [&](const char* name) {
        const auto it = std::find(cols.begin(), cols.end(), name);
        if (it == cols.end()) throw std::runtime_error(path + ": no column " + name);
        return static_cast<size_t>(it - cols.begin());
    };
    const size_t c_ctx = col("ctx_tokens"), c_pre = col("prefill_tps"), c_gen = col("gen_tps");
    std::map<int64_t, base_rates> out;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        std::vector<std::string> f;
        std::stringstream ss(line);
        for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
        if (f.size() < cols.size()) throw std::runtime_error(path + ": short row: " + line);
        out[std::stoll(f[c_ctx])] = {std::stod(f[c_pre]), std::stod(f[c_gen])};
    }
    return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public helpers
// ---------------------------------------------------------------------------------------------

std::vector<int64_t> bench_frontiers(int64_t ctx_start, int64_t ctx_max, int64_t step_incr,
                                     double step_mul) {
    if (ctx_start < 1) throw std::runtime_error("--ctx-start must be at least 1");
    if (ctx_max < ctx_start) throw std::runtime_error("--ctx-max must be at least --ctx-start");
    if (!(step_mul >= 1.0)) throw std::runtime_error("--step-mul must be at least 1");
    if (step_mul == 1.0 && step_incr < 1)
        throw std::runtime_error("--step-incr must be at least 1");
    std::vector<int64_t> f;
    for (int64_t c = ctx_start; c <= ctx_max;) {
        f.push_back(c);
        const int64_t next =
            step_mul > 1.0 ? static_cast<int64_t>(std::ceil(static_cast<double>(c) * step_mul))
                           : c + step_incr;
        c = std::max(next, c + 1);
    }
    return f;
}

projection_output project(const projection_input& in, uint32_t layers) {
    projection_output out;
    const double L = layers, N = in.n_layer, m = in.mtp ? 1.0 : 0.0;
    if (in.base_layers > 0 && in.base_layers != in.n_layer && in.base_prefill_tps > 0 &&
        in.base_gen_tps > 0 && in.prefill_tps > 0 && in.gen_tps > 0) {
        // Two models that differ only in their layer count: t(N) = t_fixed + N * t_layer.
        const double M = in.base_layers;
        auto two = [&](double tps_n, double tps_m) {
            const double tn = 1.0 / tps_n, tm = 1.0 / tps_m;
            const double t_layer = (tn - tm) / (N - M);
            const double t_fixed = tn - N * t_layer;
            const double t = t_fixed + L * t_layer;
            return t_layer > 0 && t > 0 ? 1.0 / t : 0.0;
        };
        out.prefill_tps = two(in.prefill_tps, in.base_prefill_tps);
        out.gen_tps = two(in.gen_tps, in.base_gen_tps);
        if (out.prefill_tps > 0 && out.gen_tps > 0) {
            out.from_difference = true;
            return out;
        }
    }
    // One model: decode's layer-independent time is its share of the bytes (head, embedding
    // row, MTP block); prefill's is negligible (the head runs for one row per sync), with the
    // MTP block costing one layer.
    if (in.gen_tps > 0 && N > 0) {
        const double t = 1.0 / in.gen_tps;
        const double t_fixed = t * std::clamp(in.fixed_share, 0.0, 1.0);
        const double t_layer = (t - t_fixed) / N;
        out.gen_tps = 1.0 / (t_fixed + L * t_layer);
    }
    if (in.prefill_tps > 0 && N > 0) out.prefill_tps = in.prefill_tps * (N + m) / (L + m);
    return out;
}

// ---------------------------------------------------------------------------------------------
// Flags
// ---------------------------------------------------------------------------------------------

void add_model_bench_flags(CLI::App& app, model_bench_args& a) {
    app.add_option("-m,--model", a.model,
                   "GGUF model (default: $MAGNETAR_MODEL, models/magnetar-tiny.gguf)");
    app.add_option("-t,--threads", a.threads, "Threads (default: physical cores)");
    app.add_option("--prompt-file", a.prompt_file, "Text walked as plain-text tokens");
    app.add_option("--chat-prompt-file", a.chat_prompt_file,
                   "Text rendered as one non-thinking user turn, then walked");
    app.add_option("--system", a.system, "System prompt of --chat-prompt-file (also spelled -sys)")
        ->capture_default_str();
    app.add_option("--ctx-start", a.ctx_start, "First frontier (tokens)")->capture_default_str();
    app.add_option("--ctx-max", a.ctx_max, "Last frontier (tokens)")->capture_default_str();
    app.add_option("--step-incr", a.step_incr, "Linear frontier step (with --step-mul 1)")
        ->capture_default_str();
    app.add_option("--step-mul", a.step_mul, "Geometric frontier step: next = ceil(cur * F)")
        ->capture_default_str();
    app.add_option("--ctx-alloc", a.ctx_alloc,
                   "Allocated context (default ctx-max + gen-tokens + 1)");
    app.add_option("-n,--gen-tokens,--tokens", a.gen_tokens, "Greedy tokens per frontier")
        ->capture_default_str();
    app.add_option("--chunk", a.chunk, "Prefill chunk size")->capture_default_str();
    app.add_option("--csv", a.csv, "Write the CSV here instead of stdout");
    app.add_option("--svg", a.svg, "Write the throughput-vs-context chart (SVG) here");
    app.add_option("--project-layers", a.project_layers,
                   "Project decode / prefill t/s to a model of this many layers (Flash: 43)");
    app.add_option("--project-base", a.project_base,
                   "CSV of this tool on the same kind of model with another layer count "
                   "(with --project-base-layers): per-layer cost from the difference");
    app.add_option("--project-base-layers", a.project_base_layers,
                   "Layer count of the --project-base model");
    app.add_option("--mtp", a.mtp, "Separate MTP GGUF (default: the model's own block)");
    app.add_option("--mtp-draft", a.mtp_draft,
                   "N >= 2: also time generation with speculative decoding, up to N tokens a "
                   "step, against plain decoding of the same tokens (extra CSV columns)")
        ->capture_default_str()
        ->check(CLI::Range(0, 16));
    app.add_option("--mtp-margin", a.mtp_margin,
                   "Stop drafting before a draft whose MTP top-1 minus top-2 logit is below this")
        ->capture_default_str()
        ->check(CLI::Range(0.0f, 1000.0f));
    app.add_option("--sessions", a.sessions,
                   "Also time N sessions decoding together (one batched step per token, as "
                   "serve --parallel does) against one session alone")
        ->check(CLI::Range(2, 64));
    app.add_option(
        "--read-mb", a.read_mb,
        "Buffer of the streaming-read bandwidth measurement, MiB (default: the model's weight "
        "bytes, within 64 MiB .. 2 GiB)");
}

// ---------------------------------------------------------------------------------------------
// The walk
// ---------------------------------------------------------------------------------------------

int run_model_bench(const model_bench_args& a) {
    if (a.prompt_file.empty() == a.chat_prompt_file.empty()) {
        throw std::runtime_error(
            "give exactly one of --prompt-file FILE and --chat-prompt-file FILE");
    }
    if (a.gen_tokens < 1) throw std::runtime_error("--gen-tokens must be at least 1");
    if (a.chunk < 1) throw std::runtime_error("--chunk must be at least 1");
    if (!a.project_base.empty() && a.project_base_layers == 0) {
        throw std::runtime_error("--project-base needs --project-base-layers");
    }
    if (!a.project_base.empty() && a.project_layers == 0) {
        throw std::runtime_error("--project-base needs --project-layers");
    }
    const std::vector<int64_t> frontiers =
        bench_frontiers(a.ctx_start, a.ctx_max, a.step_incr, a.step_mul);
    const int64_t last = frontiers.back();
    if (frontiers.size() == 1) {
        std::fprintf(stderr,
                     "bench: warning: one frontier (%lld tokens): throughput against context "
                     "needs two or more (--ctx-start below --ctx-max)\n",
                     static_cast<long long>(last));
    }
    const int64_t ctx_alloc = a.ctx_alloc > 0 ? a.ctx_alloc : a.ctx_max + a.gen_tokens + 1;
    if (ctx_alloc <= last + a.gen_tokens) {
        throw std::runtime_error(
            strfmt("--ctx-alloc %lld must exceed the last frontier plus "
                   "--gen-tokens (%lld)",
                   static_cast<long long>(ctx_alloc), static_cast<long long>(last + a.gen_tokens)));
    }
    std::map<int64_t, base_rates> base;
    if (!a.project_base.empty()) base = read_base_csv(a.project_base);

    engine_options eo;
    eo.model_path = resolve_model_path(a.model);
    eo.n_threads = a.threads;
    eo.mtp_path = a.mtp;
    std::unique_ptr<Engine> engine;
    check(Engine::load(eo, &engine));
    const model_info& info = engine->info();
    const bool speculating = a.mtp_draft >= 2;
    if (speculating) {
        engine_flags mf;
        mf.mtp_draft = a.mtp_draft;
        check_mtp_flags(mf, info);
    }
    if (!info.has_tokenizer) {
        throw std::runtime_error(eo.model_path +
                                 ": the model has no tokenizer, and the walk's "
                                 "input is text; time a file without one with `bench kv`, `run "
                                 "--tokens` or `eval-logits`");
    }

    // Byte accounting from the model file's tensor directory (mapped again, lazily): V4 and V4.1
    // (packed rows, Engram gathers, CSA2 modes) alike.
    const auto file = gguf::reader::open(eo.model_path);
    const roofline rl = roofline::from_file(*file);
    const uint32_t n_blocks = static_cast<uint32_t>(rl.blocks().size());

    const std::vector<int32_t> tokens = walk_tokens(*engine, a, last);

    std::fprintf(stderr, "bench: %s, %u layers%s, %s of weights, %d threads\n", info.name.c_str(),
                 info.n_layer, rl.has_mtp() ? " + MTP" : "", human_bytes(info.weight_bytes).c_str(),
                 info.n_threads);
    const read_bandwidth bw = measure_read_bandwidth(
        info.n_threads, a.read_mb > 0 ? a.read_mb << 20 : probe_bytes_for_model(info.weight_bytes));
    std::fprintf(stderr,
                 "bench: streaming read %.2f GB/s (median of %d passes over %s%s, best %.2f)\n",
                 bw.gbs, bw.passes, human_bytes(bw.bytes).c_str(),
                 a.read_mb > 0 ? "" : ", sized to the model's weights", bw.best_gbs);
    const dot_throughput dot = measure_dot_throughput(info.n_threads);
    std::fprintf(stderr,
                 "bench: dot throughput int8 %.1f GOP/s, f32 FMA %.1f GFLOP/s (median of "
                 "%d passes, %d threads)\n",
                 dot.int8_gops, dot.f32_gflops, dot.passes, dot.threads);

    session_options so;
    so.drafts = speculating;
    so.n_ctx = ctx_alloc;
    so.chunk_size = a.chunk;
    so.checkpoint_interval = 0;  // the walk restores from its own snapshot
    std::unique_ptr<Session> session;
    check(engine->create_session(so, &session));
    const bool batching = a.sessions >= 2;
    std::vector<std::unique_ptr<Session>> group;
    for (int i = 0; i < (batching ? a.sessions : 0); ++i) {
        session_options gso = so;
        gso.drafts = false;
        group.emplace_back();
        check(engine->create_session(gso, &group.back()));
    }

    FILE* out = stdout;
    std::unique_ptr<FILE, int (*)(FILE*)> csv_file(nullptr, &std::fclose);
    if (!a.csv.empty()) {
        csv_file.reset(std::fopen(a.csv.c_str(), "w"));
        if (!csv_file) throw std::runtime_error(a.csv + ": cannot write");
        out = csv_file.get();
    }
    const bool projecting = a.project_layers > 0;
    std::fprintf(out,
                 "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,"
                 "weight_bytes_per_token,kv_bytes_per_token,achieved_gbs,read_gbs,roofline_ratio,"
                 "prefill_gflops,dot_gops,prefill_dot_ratio%s%s%s\n",
                 projecting ? ",proj_prefill_tps,proj_gen_tps" : "",
                 speculating ? ",plain_gen_tps,mtp_gen_tps,mtp_speedup,mtp_tokens_per_step,"
                               "mtp_kept_rate"
                             : "",
                 batching ? ",solo_gen_tps,batch_sessions,batch_gen_tps,batch_ratio" : "");
    std::fflush(out);

    const uint64_t work = static_cast<uint64_t>(last) +
                          static_cast<uint64_t>(frontiers.size() * a.gen_tokens) *
                              (1 + (speculating ? 2 : 0) + (batching ? 2 + a.sessions : 0));
    Progress progress("bench", work, Progress::Unit::tokens);
    uint64_t gen_done = 0;

    const int32_t eos = info.special.eos;
    std::vector<frontier_row> rows;
    std::vector<uint8_t> snapshot;
    for (const int64_t ctx : frontiers) {
        frontier_row r;
        r.ctx = ctx;
        // Incremental prefill to the frontier (timed).
        eval_options ev;
        ev.progress = [&](int64_t done, int64_t) {
            progress.update(static_cast<uint64_t>(done) + gen_done);
        };
        sync_result sr;
        auto t0 = clock_type::now();
        check(session->sync(std::span<const int32_t>(tokens.data(), static_cast<size_t>(ctx)), ev,
                            &sr));
        r.prefill_s = seconds_since(t0);
        r.prefill_tokens = sr.evaluated;
        r.kvcache_bytes = session->payload_size();
        for (int64_t pos = ctx - sr.evaluated; pos < ctx; ++pos) {
            r.prefill_flops += rl.prefill_flops(pos);
        }

        if (speculating) {
            spec_probe(*session, a, eos, r);
            gen_done += 2 * static_cast<uint64_t>(a.gen_tokens);
            progress.update(static_cast<uint64_t>(ctx) + gen_done);
        }

        // Snapshot (untimed), greedy probe (timed), restore (untimed).
        check(session->save_payload(&snapshot));
        if (batching) {
            batch_probe(*engine, *session, group, snapshot, tokens, a, eos, r);
            gen_done += static_cast<uint64_t>(a.gen_tokens) * (2 + a.sessions);
            progress.update(static_cast<uint64_t>(ctx) + gen_done);
        }
        expert_counter experts(n_blocks, info.n_layer);
        session->set_dump(
            {"blk.*.moe_sel", "mtp.moe_sel"},
            [&experts](const std::string& name, int64_t, int64_t n_rows, int64_t width,
                       const float* data) { experts.add(name, n_rows, width, data); });
        engine->time_ops(true);
        (void)engine->take_op_times();
        t0 = clock_type::now();
        for (int64_t i = 0; i < a.gen_tokens; ++i) {
            const int32_t next = best_non_eos(session->logits(), eos);
            check(session->eval(std::span<const int32_t>(&next, 1)));
        }
        r.gen_s = seconds_since(t0);
        r.gen_tokens = a.gen_tokens;
        engine->time_ops(false);
        r.ops = engine->take_op_times();
        session->set_dump({}, nullptr);
        gen_done += static_cast<uint64_t>(a.gen_tokens);
        progress.update(static_cast<uint64_t>(ctx) + gen_done);
        check(session->load_payload(snapshot));

        // Bytes per decoded token, averaged over the probe's positions ctx .. ctx + n - 1.
        double wsum = 0, ksum = 0;
        for (int64_t i = 0; i < a.gen_tokens; ++i) {
            const int64_t pos = ctx + i;
            wsum += static_cast<double>(rl.dense_bytes(pos));
            ksum += static_cast<double>(rl.kv_bytes(pos).total());
        }
        double expert_bytes = 0;  // per token
        for (uint32_t b = 0; b < n_blocks; ++b) {
            if (experts.rows[b] == 0) continue;
            expert_bytes += static_cast<double>(rl.blocks()[b].expert) *
                            static_cast<double>(experts.distinct_sum[b]) /
                            static_cast<double>(experts.rows[b]);
        }
        r.weight_bytes = wsum / static_cast<double>(a.gen_tokens) + expert_bytes;
        r.kv_bytes = ksum / static_cast<double>(a.gen_tokens);

        if (projecting) {
            projection_input pin;
            pin.n_layer = info.n_layer;
            pin.mtp = rl.has_mtp();
            pin.prefill_tps = r.prefill_tps();
            pin.gen_tps = r.gen_tps();
            // Layer-independent bytes: globals, plus the MTP block (weights and its ring).
            double fixed = static_cast<double>(rl.global_bytes());
            if (rl.has_mtp()) {
                const block_bytes& mb = rl.blocks()[info.n_layer];
                const double sel = experts.rows[info.n_layer]
                                       ? static_cast<double>(experts.distinct_sum[info.n_layer]) /
                                             static_cast<double>(experts.rows[info.n_layer])
                                       : 0.0;
                fixed += static_cast<double>(mb.fixed) + static_cast<double>(mb.expert) * sel;
            }
            const double total = r.weight_bytes + r.kv_bytes;
            pin.fixed_share = total > 0 ? fixed / total : 0;
            const auto it = base.find(ctx);
            if (it != base.end()) {
                pin.base_layers = a.project_base_layers;
                pin.base_prefill_tps = it->second.prefill_tps;
                pin.base_gen_tps = it->second.gen_tps;
            }
            r.proj = project(pin, a.project_layers);
        }

        std::fprintf(out, "%lld,%lld,%.2f,%lld,%.2f,%llu,%.0f,%.0f,%.2f,%.2f,%.3f",
                     static_cast<long long>(r.ctx), static_cast<long long>(r.prefill_tokens),
                     r.prefill_tps(), static_cast<long long>(r.gen_tokens), r.gen_tps(),
                     static_cast<unsigned long long>(r.kvcache_bytes), r.weight_bytes, r.kv_bytes,
                     r.achieved_gbs(), bw.gbs, bw.gbs > 0 ? r.achieved_gbs() / bw.gbs : 0.0);
        std::fprintf(out, ",%.2f,%.2f,%.3f", r.prefill_gflops(), dot.int8_gops,
                     dot.int8_gops > 0 ? r.prefill_gflops() / dot.int8_gops : 0.0);
        if (projecting) std::fprintf(out, ",%.2f,%.2f", r.proj.prefill_tps, r.proj.gen_tps);
        if (speculating) {
            std::fprintf(out, ",%.2f,%.2f,%.3f,%.3f,%.3f", r.plain_tps(), r.spec_tps(),
                         r.plain_tps() > 0 ? r.spec_tps() / r.plain_tps() : 0.0,
                         r.tokens_per_step(), r.kept_rate());
        }
        if (batching) {
            std::fprintf(out, ",%.2f,%d,%.2f,%.3f", r.solo_tps(), r.batch_sessions, r.batch_tps(),
                         r.solo_tps() > 0 ? r.batch_tps() / r.solo_tps() : 0.0);
        }
        std::fprintf(out, "\n");
        std::fflush(out);
        rows.push_back(r);
    }
    progress.finish();

    // Summary on stderr.
    for (const frontier_row& r : rows) {
        std::fprintf(stderr,
                     "bench: ctx %6lld  prefill %8.2f t/s = %.1f GFLOP/s = %.2f of int8 dot  gen "
                     "%7.2f t/s  %s weights + %s KV per token  %.2f GB/s = %.2f of read "
                     "bandwidth\n",
                     static_cast<long long>(r.ctx), r.prefill_tps(), r.prefill_gflops(),
                     dot.int8_gops > 0 ? r.prefill_gflops() / dot.int8_gops : 0.0, r.gen_tps(),
                     human_bytes(static_cast<uint64_t>(r.weight_bytes)).c_str(),
                     human_bytes(static_cast<uint64_t>(r.kv_bytes)).c_str(), r.achieved_gbs(),
                     bw.gbs > 0 ? r.achieved_gbs() / bw.gbs : 0.0);
    }
    for (const frontier_row& r : rows) {
        if (r.ops.empty()) continue;  // a backend without op timing
        std::fprintf(stderr, "bench: ctx %6lld  %s\n", static_cast<long long>(r.ctx),
                     step_breakdown(r).c_str());
    }
    if (speculating) {
        for (const frontier_row& r : rows) {
            std::fprintf(stderr,
                         "bench: ctx %6lld  mtp-draft %d: gen %7.2f t/s vs plain %7.2f t/s = "
                         "%.3fx, %.2f tokens per verify step, %.1f %% of drafts kept\n",
                         static_cast<long long>(r.ctx), a.mtp_draft, r.spec_tps(), r.plain_tps(),
                         r.plain_tps() > 0 ? r.spec_tps() / r.plain_tps() : 0.0,
                         r.tokens_per_step(), 100.0 * r.kept_rate());
        }
    }
    if (batching) {
        for (const frontier_row& r : rows) {
            std::fprintf(stderr,
                         "bench: ctx %6lld  %d sessions together: %7.2f t/s aggregate vs one "
                         "session %7.2f t/s = %.2fx\n",
                         static_cast<long long>(r.ctx), r.batch_sessions, r.batch_tps(),
                         r.solo_tps(), r.solo_tps() > 0 ? r.batch_tps() / r.solo_tps() : 0.0);
        }
    }
    if (projecting) {
        for (const frontier_row& r : rows) {
            std::fprintf(
                stderr,
                "bench: projected to %u layers at ctx %lld: prefill %.2f t/s, decode "
                "%.2f t/s (%s)\n",
                a.project_layers, static_cast<long long>(r.ctx), r.proj.prefill_tps, r.proj.gen_tps,
                r.proj.from_difference
                    ? strfmt("difference with the %u-layer CSV", a.project_base_layers).c_str()
                    : strfmt("one model, %u layers", info.n_layer).c_str());
        }
    }

    if (!a.svg.empty()) {
        std::vector<throughput_point> pts;
        for (const frontier_row& r : rows) {
            pts.push_back({static_cast<double>(r.ctx), r.prefill_tps(), r.gen_tps(),
                           r.proj.prefill_tps, r.proj.gen_tps});
        }
        chart_options co;
        co.title = "magnetar bench: " + info.name;
        co.subtitle = strfmt(
            "%u layers, %d threads, %lld generated tokens per frontier, "
            "streaming read %.1f GB/s",
            info.n_layer, info.n_threads, static_cast<long long>(a.gen_tokens), bw.gbs);
        write_file_text(a.svg, throughput_svg(pts, co, projecting ? a.project_layers : 0));
        std::fprintf(stderr, "bench: wrote %s\n", a.svg.c_str());
    }
    return 0;
}

}  // namespace magnetar::cli
