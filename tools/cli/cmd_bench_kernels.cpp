// `magnetar bench kernels`: speed of the CPU matrix-product kernels against the machine's
// memory read bandwidth, measured in the same process.
//
// Decode products (one token) stream each weight matrix from memory: the weights rotate
// through a set of copies much larger than the last-level cache, so no product finds its
// weights cached. Each measurement round times one plain streaming read of a buffer of the
// same size and one pass over the rotation set, so the reported ratio compares the kernel with
// the bandwidth available at that moment (other processes share the machine); the table shows
// medians over rounds. Prefill rows time a batch of tokens against one weight matrix
// (compute bound) and report GFLOP/s.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/simd/simd.h"
#include "cli/bench_command.h"
#include "cli/common.h"
#include "cli/ggml_peer.h"
#include "core/error.h"
#include "core/format.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "quant/random_fill.h"
#include "quant/types.h"

namespace magnetar::cli {

namespace {

namespace simd = cpu::simd;
using clock_type = std::chrono::steady_clock;

struct shape {
    int64_t n_out, n_in;
    const char* note;
};

// Flash routed-expert shapes (gate/up 4096 -> 2048, down 2048 -> 4096) and a dense one
// (attn_output_b, 8192 -> 4096).
const shape kShapes[] = {
    {2048, 4096, "expert gate/up"}, {4096, 2048, "expert down"}, {4096, 8192, "dense"}};
// MXFP4 is the V4.1 routed-expert format: its shapes are those experts (D = 5120, F = 2304).
const shape kShapesV41[] = {{2304, 5120, "V4.1 expert gate/up"}, {5120, 2304, "V4.1 expert down"}};

std::vector<shape> shapes_for(ggml_type t) {
    if (t == ggml_type::MXFP4) return {std::begin(kShapesV41), std::end(kShapesV41)};
    return {std::begin(kShapes), std::end(kShapes)};
}

struct free_deleter {
    void operator()(void* p) const { std::free(p); }
};
using buffer = std::unique_ptr<uint8_t, free_deleter>;

buffer alloc_touched(size_t bytes) {
    const size_t n = (bytes + 4095) / 4096 * 4096;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, n));
    if (!p) throw Error(strfmt("bench kernels: cannot allocate %s", human_bytes(n).c_str()));
    std::memset(p, 1, n);
    return buffer(p);
}

// CPU seconds of the calling thread: insensitive to other processes taking the core away.
double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// CPU seconds of the whole process (all threads).
double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Median over `rounds` rounds of fn's calls per second of this thread's CPU time, each round
// repeating fn for at least 50 ms: a compute rate unaffected by memory stalls elsewhere and by
// other processes taking the core.
template <class F>
double calls_per_cpu_second(int rounds, F&& fn) {
    std::vector<double> rates;
    for (int r = 0; r < rounds; ++r) {
        const double c0 = thread_cpu_seconds();
        int calls = 0;
        do {
            fn();
            ++calls;
        } while (thread_cpu_seconds() - c0 < 0.05);
        rates.push_back(calls / (thread_cpu_seconds() - c0));
    }
    return median(rates);
}

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// One streaming read of the whole buffer on the pool (widest loads of the active level);
// returns seconds.
double read_pass(thread_pool& pool, const uint8_t* data, size_t bytes) {
    constexpr size_t kSlice = 1 << 20;
    uint64_t sums[64] = {};
    const auto t0 = clock_type::now();
    pool.parallel_for(static_cast<int64_t>(bytes / kSlice), [&](int64_t b, int64_t e, int th) {
        sums[th % 64] += simd::stream_sum(data + static_cast<size_t>(b) * kSlice,
                                          static_cast<size_t>(e - b) * kSlice);
    });
    const double s = seconds_since(t0);
    volatile uint64_t sink = 0;
    for (uint64_t v : sums) sink = sink + v;
    return s;
}

// Every weight type with CPU kernels (in the type table's order), then the indexer.
std::vector<std::string> default_types() {
    std::vector<std::string> out;
    for (const type_traits& t : all_type_traits()) {
        if (simd::matmul_at(simd::isa_level::scalar, t.type) != nullptr) out.emplace_back(t.name);
    }
    out.emplace_back("indexer");
    return out;
}

struct options {
    std::vector<std::string> types = default_types();
    std::vector<int> threads;
    std::string family = "both";
    std::string level = "auto";
    int rounds = 7;
    int prefill_tokens = 64;
    uint64_t set_mb = 0;
    bool quick = false;
    std::string ggml;  // the peer library or its directory; "" = default, "off" = none
    std::string csv;
};

struct row {
    std::string family, type, shape, mode;
    int threads;
    double ms, gbs, bw, ratio, gflops;
    double cpu = 0.0;  // share of threads x wall time the threads actually ran (decode rows)
};

simd::isa_level parse_level(const std::string& s) {
    if (s == "auto") return simd::active_level();
    if (s == "off" || s == "scalar") return simd::isa_level::scalar;
    if (s == "avx2") return simd::isa_level::avx2;
    if (s == "avx512") return simd::isa_level::avx512;
    throw Error("bench kernels: --level must be auto, off, avx2 or avx512 (got " + s + ")");
}

// One measured product: a Magnetar family at the chosen level, or the ggml peer.
struct product {
    std::string family;
    std::function<void(thread_pool&, const tensor& w, const tensor& x, const tensor& y)> run;
};

// Magnetar's family `fam` at `level`; act is the q8 family's activation buffer.
product magnetar_product(const std::string& fam, ggml_type t, simd::isa_level level,
                         std::vector<uint8_t>& act) {
    if (fam == "q8") {
        return {fam, [level, &act](thread_pool& pool, const tensor& w, const tensor& x,
                                   const tensor& y) {
                    simd::q8_matmul(pool, w, x, y, act.data(), level);
                }};
    }
    const simd::matmul_fn f = simd::matmul_at(level, t);
    return {fam, [f](thread_pool& pool, const tensor& w, const tensor& x, const tensor& y) {
                simd::matmul(pool, w, x, y, f);
            }};
}

// The peer's product as GGML runs it on the CPU: the activations converted once by the peer's
// own converter, then one peer dot product per (row, token), rows split over the same pool.
product peer_product(const ggml_peer& peer, ggml_type t, std::vector<uint8_t>& act) {
    return {
        "ggml",
        [&peer, t, &act](thread_pool& pool, const tensor& w, const tensor& x, const tensor& y) {
            const int64_t n = w.ne[0], rows = w.ne[1], ntok = x.ne[1];
            const size_t ab = peer.act_row_bytes(t, n);
            for (int64_t k = 0; k < ntok; ++k)
                peer.convert_act(t, x.f32() + k * n, act.data() + static_cast<size_t>(k) * ab, n);
            pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
                for (int64_t r = b; r < e; ++r) {
                    for (int64_t k = 0; k < ntok; ++k)
                        y.f32()[k * rows + r] =
                            peer.dot(t, w.row_ptr(r), act.data() + static_cast<size_t>(k) * ab, n);
                }
            });
        }};
}

// Largest |a - b| over the largest |a|: how closely two products of the same bytes agree.
double relative_gap(const std::vector<float>& a, const std::vector<float>& b, size_t n) {
    double gap = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; ++i) {
        gap = std::max(gap, std::fabs(static_cast<double>(a[i]) - b[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
    }
    return scale > 0.0 ? gap / scale : gap;
}

// Above this the peer is not computing the same product (a different layout or a broken
// library): its rows would mean nothing.
constexpr double kPeerMaxGap = 0.05;

void bench_type(const options& o, ggml_type t, simd::isa_level level, size_t set_bytes,
                const uint8_t* bw_buf, const ggml_peer* peer, std::vector<row>& out) {
    const char* tname = type_traits_of(t).name;
    std::vector<std::string> fams;
    if (o.family == "f32" || o.family == "both") fams.push_back("f32");
    if (o.family == "q8" || o.family == "both") fams.push_back("q8");
    const bool with_peer = peer && peer->supports(t);
    if (peer && !with_peer)
        std::fprintf(stderr, "  ggml peer: no %s kernel in %s; no peer rows\n", tname,
                     peer->name().c_str());
    const std::vector<shape> shapes = shapes_for(t);
    const int n_shapes = o.quick ? 1 : static_cast<int>(shapes.size());
    for (int si = 0; si < n_shapes; ++si) {
        const shape& sh = shapes[si];
        const size_t rb = row_bytes(t, sh.n_in);
        const size_t mat = rb * static_cast<size_t>(sh.n_out);
        const int64_t copies =
            std::max<int64_t>(4, static_cast<int64_t>((set_bytes + mat - 1) / mat));
        buffer weights = alloc_touched(mat * static_cast<size_t>(copies));
        {
            Rng rng(1234);
            for (int64_t r = 0; r < sh.n_out; ++r)
                fill_random_row(t, rng, 0.05f, weights.get() + static_cast<size_t>(r) * rb,
                                sh.n_in);
            for (int64_t c = 1; c < copies; ++c)
                std::memcpy(weights.get() + static_cast<size_t>(c) * mat, weights.get(), mat);
        }
        const int64_t n_tok_max = std::max<int64_t>(1, o.prefill_tokens);
        std::vector<float> xbuf(static_cast<size_t>(sh.n_in * n_tok_max));
        {
            Rng rng(99);
            for (auto& v : xbuf) v = 2.0f * rng.uniform01() - 1.0f;
        }
        std::vector<float> ybuf(static_cast<size_t>(sh.n_out * n_tok_max));
        std::vector<uint8_t> act(simd::act_row_bytes(t, sh.n_in) * static_cast<size_t>(n_tok_max));
        std::vector<uint8_t> peer_act(with_peer ? peer->act_row_bytes(t, sh.n_in) : 0);
        const std::string shape_name =
            strfmt("%lldx%lld", static_cast<long long>(sh.n_out), static_cast<long long>(sh.n_in));
        const auto matrix = [&](int64_t c, int64_t n_rows) {
            return make_tensor(weights.get() + static_cast<size_t>(c) * mat, t, sh.n_in, n_rows);
        };

        std::vector<product> products;
        for (const std::string& fam : fams)
            products.push_back(magnetar_product(fam, t, level, act));
        if (with_peer) products.push_back(peer_product(*peer, t, peer_act));
        const tensor x1 = make_tensor(xbuf.data(), ggml_type::F32, sh.n_in, 1);
        const tensor y1 = make_tensor(ybuf.data(), ggml_type::F32, sh.n_out, 1);

        // The peer against Magnetar's first family on the same bytes and token.
        std::string peer_note;
        if (with_peer) {
            thread_pool pool(1);
            products.front().run(pool, matrix(0, sh.n_out), x1, y1);
            const std::vector<float> ours(ybuf.begin(), ybuf.begin() + sh.n_out);
            products.back().run(pool, matrix(0, sh.n_out), x1, y1);
            const double gap = relative_gap(ours, ybuf, static_cast<size_t>(sh.n_out));
            if (!(gap <= kPeerMaxGap))
                throw Error(
                    strfmt("bench kernels: the ggml peer (%s) disagrees with Magnetar "
                           "on %s %s: largest gap %.3g of the largest output",
                           peer->name().c_str(), tname, shape_name.c_str(), gap));
            peer_note = strfmt(", agrees with %s to %.1e", products.front().family.c_str(), gap);
        }

        for (int nth : o.threads) {
            thread_pool pool(nth);
            // Decode: one token, weights rotating through the set; every product in each round
            // after the same streaming read, so all of them see the same machine.
            const size_t np = products.size();
            std::vector<std::vector<double>> ms(np), gbs(np), bws(np), ratios(np), cpus(np);
            for (const product& p : products) {  // warm-up pass
                for (int64_t c = 0; c < copies; ++c) p.run(pool, matrix(c, sh.n_out), x1, y1);
            }
            for (int r = 0; r < o.rounds; ++r) {
                const double bw =
                    static_cast<double>(set_bytes) / read_pass(pool, bw_buf, set_bytes) / 1e9;
                for (size_t pi = 0; pi < np; ++pi) {
                    const auto t0 = clock_type::now();
                    const double c0 = process_cpu_seconds();
                    for (int64_t c = 0; c < copies; ++c)
                        products[pi].run(pool, matrix(c, sh.n_out), x1, y1);
                    const double wall = seconds_since(t0);
                    cpus[pi].push_back((process_cpu_seconds() - c0) / (wall * nth));
                    const double s = wall / static_cast<double>(copies);
                    const double g = static_cast<double>(mat) / s / 1e9;
                    ms[pi].push_back(s * 1e3);
                    gbs[pi].push_back(g);
                    bws[pi].push_back(bw);
                    ratios[pi].push_back(g / bw);
                }
            }
            for (size_t pi = 0; pi < np; ++pi) {
                const product& p = products[pi];
                const bool is_peer = p.family == "ggml";
                const row decode{
                    p.family,
                    tname,
                    shape_name,
                    "decode",
                    nth,
                    median(ms[pi]),
                    median(gbs[pi]),
                    median(bws[pi]),
                    median(ratios[pi]),
                    2.0 * static_cast<double>(sh.n_in * sh.n_out) / (median(ms[pi]) * 1e-3) / 1e9,
                    median(cpus[pi])};
                out.push_back(decode);
                std::string note = is_peer ? peer_note : std::string();
                // Prefill: n_tok tokens against one matrix (Magnetar's families only: GGML's
                // batched products go through other paths than its dot products).
                if (o.prefill_tokens > 1 && !is_peer) {
                    const tensor w = matrix(0, sh.n_out);
                    const tensor xp = make_tensor(xbuf.data(), ggml_type::F32, sh.n_in, n_tok_max);
                    const tensor yp = make_tensor(ybuf.data(), ggml_type::F32, sh.n_out, n_tok_max);
                    p.run(pool, w, xp, yp);
                    // One thread runs on the calling thread: timed in its CPU time, like the
                    // hot rows; more threads in wall-clock time.
                    double m = 0.0;
                    if (nth == 1) {
                        m = 1e3 / calls_per_cpu_second(std::max(3, o.rounds / 2),
                                                       [&] { p.run(pool, w, xp, yp); });
                    } else {
                        std::vector<double> pms;
                        for (int r = 0; r < std::max(3, o.rounds / 2); ++r) {
                            const auto t0 = clock_type::now();
                            p.run(pool, w, xp, yp);
                            pms.push_back(seconds_since(t0) * 1e3);
                        }
                        m = median(pms);
                    }
                    const double flops = 2.0 * static_cast<double>(sh.n_in * sh.n_out * n_tok_max);
                    out.push_back({p.family, tname, shape_name,
                                   strfmt("prefill%d", o.prefill_tokens), nth, m,
                                   static_cast<double>(mat) / (m * 1e-3) / 1e9, 0.0, 0.0,
                                   flops / (m * 1e-3) / 1e9});
                    note += strfmt(", prefill %.1f GFLOP/s", out.back().gflops);
                }
                // Hot: a cache-resident slice of rows, one thread, timed in thread CPU time (the
                // kernel's compute rate, independent of memory and of other processes).
                if (nth == 1) {
                    const int64_t hot_rows =
                        std::max<int64_t>(16, static_cast<int64_t>((128u << 10) / rb) / 16 * 16);
                    const tensor w = matrix(0, std::min<int64_t>(hot_rows, sh.n_out));
                    const tensor yh = make_tensor(ybuf.data(), ggml_type::F32, w.ne[1], 1);
                    p.run(pool, w, x1, yh);
                    const double hot_gws = static_cast<double>(w.ne[0] * w.ne[1]) / 1e9 *
                                           calls_per_cpu_second(std::max(3, o.rounds),
                                                                [&] { p.run(pool, w, x1, yh); });
                    note += strfmt(", hot %.2f Gweights/cpu-s", hot_gws);
                    out.push_back({p.family, tname, shape_name, "hot", 1, 0.0,
                                   hot_gws * static_cast<double>(rb) / static_cast<double>(sh.n_in),
                                   0.0, 0.0, 2.0 * hot_gws});
                }
                std::fprintf(stderr,
                             "  %-4s %-8s %-10s %d thr: decode %.3f ms %.1f GB/s (%.2f of %.1f "
                             "GB/s read, cpu %.0f%%)%s\n",
                             p.family.c_str(), tname, shape_name.c_str(), nth, decode.ms,
                             decode.gbs, decode.ratio, decode.bw, 100.0 * decode.cpu, note.c_str());
            }
        }
    }
}

// The lightning indexer's scores at Flash's shape (64 heads of 128 against the 8,192 compressed
// rows of a 32k-token context), one thread on cache-warm data in thread CPU time: the scalar
// twin and the chosen level (the same bits), GFLOP/s counting 2 per multiply-add of the dots.
void bench_indexer(const options& o, simd::isa_level level, std::vector<row>& out) {
    constexpr int64_t kHeads = 64, kDim = 128, kKeys = 8192;
    Rng rng(1234);
    std::vector<float> q(kHeads * kDim), w(kHeads), keys(kKeys * kDim), score(kKeys);
    for (float& v : q) v = rng.normal();
    for (float& v : w) v = rng.normal();
    for (float& v : keys) v = rng.normal();
    const double flop = 2.0 * kHeads * kDim * kKeys;
    std::vector<simd::isa_level> levels = {simd::isa_level::scalar};
    if (level != simd::isa_level::scalar) levels.push_back(level);
    double rate[2] = {0.0, 0.0};
    for (size_t li = 0; li < levels.size(); ++li) {
        const simd::index_scores_fn fn = simd::index_scores_at(levels[li]);
        rate[li] = flop / 1e9 * calls_per_cpu_second(o.rounds, [&] {
                       fn(q.data(), w.data(), 0.125f, kHeads, kDim, keys.data(), kDim, kKeys,
                          score.data());
                   });
        out.push_back({simd::level_name(levels[li]), "indexer", "64x128x8k", "hot", 1,
                       1e3 * flop / (rate[li] * 1e9), 0.0, 0.0, 0.0, rate[li]});
        std::fprintf(stderr, "  indexer scores, %s: %.2f ms per token, %.1f GFLOP/s per core\n",
                     simd::level_name(levels[li]), 1e3 * flop / (rate[li] * 1e9), rate[li]);
    }
    if (levels.size() == 2) {
        std::fprintf(stderr, "  indexer scores: %s / scalar twin = %.2fx\n",
                     simd::level_name(level), rate[1] / rate[0]);
    }
}

int run_bench(const options& o_in) {
    options o = o_in;
    if (o.threads.empty()) {
        const int all = thread_pool::physical_cores();
        o.threads = {1};
        if (all > 1) o.threads.push_back(all);
    }
    if (o.quick) o.rounds = std::min(o.rounds, 3);
    const simd::isa_level level = parse_level(o.level);
    if (!simd::cpu_supports(level))
        throw Error(std::string("bench kernels: this CPU cannot run level ") +
                    simd::level_name(level));
    if (o.family != "f32" && o.family != "q8" && o.family != "both")
        throw Error("bench kernels: --family must be f32, q8 or both");

    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = 32l << 20;
    const size_t set_bytes =
        o.set_mb ? o.set_mb << 20
                 : std::max<size_t>(size_t{256} << 20, static_cast<size_t>(llc) * 16);
    std::fprintf(stderr, "bench kernels: level %s (best on this CPU: %s), threads",
                 simd::level_name(level), simd::level_name(simd::active_level()));
    for (int n : o.threads) std::fprintf(stderr, " %d", n);
    std::fprintf(stderr, ", LLC %s, weight set %s per measurement, %d rounds\n",
                 human_bytes(static_cast<uint64_t>(llc)).c_str(), human_bytes(set_bytes).c_str(),
                 o.rounds);
    buffer bw_buf = alloc_touched(set_bytes);

    // The ggml peer: asked for by --ggml, else the bench package when it is installed.
    std::unique_ptr<ggml_peer> peer;
    if (o.ggml != "off") {
        const std::string where = o.ggml.empty() ? ggml_peer::default_location() : o.ggml;
        if (!where.empty()) {
            peer = ggml_peer::load(where);
            std::fprintf(stderr, "bench kernels: ggml peer %s (family 'ggml')\n",
                         peer->name().c_str());
        } else {
            std::fprintf(stderr,
                         "bench kernels: no ggml peer (install it with `npm ci` in "
                         "scripts/bench, or pass --ggml)\n");
        }
    }

    std::vector<row> rows;
    for (const std::string& tn : o.types) {
        if (tn == "indexer") {
            bench_indexer(o, level, rows);
            continue;
        }
        const auto t = type_from_name(tn);
        if (!t || simd::matmul_at(simd::isa_level::scalar, *t) == nullptr)
            throw Error("bench kernels: no kernel for type " + tn);
        bench_type(o, *t, level, set_bytes, bw_buf.get(), peer.get(), rows);
    }

    std::printf("%-6s %-8s %-10s %-10s %4s %9s %11s %9s %9s %5s %9s\n", "family", "type", "shape",
                "mode", "thr", "ms", "weight GB/s", "read GB/s", "ratio", "cpu%", "GFLOP/s");
    for (const row& r : rows) {
        std::printf("%-6s %-8s %-10s %-10s %4d %9s %11s %9s %9s %5s %9.1f\n", r.family.c_str(),
                    r.type.c_str(), r.shape.c_str(), r.mode.c_str(), r.threads,
                    r.ms > 0 ? strfmt("%.3f", r.ms).c_str() : "-",
                    r.gbs > 0 ? strfmt("%.1f", r.gbs).c_str() : "-",
                    r.bw > 0 ? strfmt("%.1f", r.bw).c_str() : "-",
                    r.ratio > 0 ? strfmt("%.2f", r.ratio).c_str() : "-",
                    r.cpu > 0 ? strfmt("%.0f", 100.0 * r.cpu).c_str() : "-", r.gflops);
    }
    constexpr double kTargetRatio = 0.85;
    // Per type, shape, mode and threads: Magnetar's faster family, and the peer's row of the
    // same measurement when there is one.
    const auto summary = [&](const std::string& mode, bool target) {
        for (size_t i = 0; i < rows.size(); ++i) {
            const row& a = rows[i];
            if (a.mode != mode || a.family == "ggml" || a.type == "indexer") continue;
            const row* best = &a;
            const row* ggml = nullptr;
            bool first = true;
            for (size_t j = 0; j < rows.size(); ++j) {
                const row& b = rows[j];
                if (b.mode != mode || b.type != a.type || b.shape != a.shape ||
                    b.threads != a.threads)
                    continue;
                if (b.family == "ggml") {
                    ggml = &b;
                    continue;
                }
                if (j < i) first = false;
                if (b.gbs > best->gbs) best = &b;
            }
            if (!first) continue;
            std::printf("%-8s %-10s %4d %-6s %11.1f", best->type.c_str(), best->shape.c_str(),
                        best->threads, best->family.c_str(), best->gbs);
            if (target) {
                std::printf(" %9.1f %9.2f %5.0f %-6s", best->bw, best->ratio, 100.0 * best->cpu,
                            best->ratio >= kTargetRatio ? "met" : "below");
            }
            if (ggml) {
                std::printf(" %9.1f %7.2fx", ggml->gbs, best->gbs / ggml->gbs);
            } else if (peer) {
                std::printf(" %9s %8s", "-", "-");
            }
            std::printf("\n");
        }
    };
    std::printf(
        "\ndecode summary: ratio = weight GB/s / streaming-read GB/s (same threads, same "
        "rounds); target >= %.2f\n",
        kTargetRatio);
    std::printf("%-8s %-10s %4s %-6s %11s %9s %9s %5s %-6s", "type", "shape", "thr", "family",
                "weight GB/s", "read GB/s", "ratio", "cpu%", "target");
    if (peer) std::printf(" %9s %8s", "ggml GB/s", "vs ggml");
    std::printf("\n");
    summary("decode", true);
    if (peer) {
        std::printf(
            "\nhot summary (one thread, cache-resident rows, thread CPU time), against the ggml "
            "peer %s\n",
            peer->name().c_str());
        std::printf("%-8s %-10s %4s %-6s %11s %9s %8s\n", "type", "shape", "thr", "family",
                    "weight GB/s", "ggml GB/s", "vs ggml");
        summary("hot", false);
    }
    if (!o.csv.empty()) {
        FILE* f = std::fopen(o.csv.c_str(), "w");
        if (!f) throw Error("bench kernels: cannot write " + o.csv);
        std::fprintf(
            f,
            "family,type,shape,mode,threads,ms,weight_gbs,read_gbs,ratio,cpu_share,gflops,level\n");
        for (const row& r : rows) {
            std::fprintf(f, "%s,%s,%s,%s,%d,%.4f,%.3f,%.3f,%.4f,%.3f,%.3f,%s\n", r.family.c_str(),
                         r.type.c_str(), r.shape.c_str(), r.mode.c_str(), r.threads, r.ms, r.gbs,
                         r.bw, r.ratio, r.cpu, r.gflops, simd::level_name(level));
        }
        std::fclose(f);
    }
    return 0;
}

action setup(CLI::App& sub) {
    auto o = std::make_shared<options>();
    sub.add_option("--types", o->types,
                   "Weight types to measure, and 'indexer' (the indexer's score kernel)")
        ->capture_default_str();
    sub.add_option("--threads", o->threads, "Thread counts (default: 1 and all physical cores)");
    sub.add_option("--family", o->family,
                   "Kernel family: f32 (float activations), q8 (GGML-compatible), both")
        ->capture_default_str();
    sub.add_option("--level", o->level,
                   "ISA level: auto, off, avx2, avx512 (MAGNETAR_SIMD caps auto)")
        ->capture_default_str();
    sub.add_option("--rounds", o->rounds, "Measurement rounds per row (medians are reported)")
        ->capture_default_str();
    sub.add_option("--prefill-tokens", o->prefill_tokens,
                   "Tokens of the batched prefill rows (1: none)")
        ->capture_default_str();
    sub.add_option("--set-mb", o->set_mb,
                   "MiB of weights rotated per measurement (default: max(256, 16 x LLC))");
    sub.add_flag("--quick", o->quick, "First shape only, at most 3 rounds");
    sub.add_option("--ggml", o->ggml,
                   "GGML CPU library (libggml-cpu*.so, or a directory of them: the variant this "
                   "CPU scores best) timed beside Magnetar as family 'ggml'; 'off' for none "
                   "(default: MAGNETAR_GGML_LIB, else scripts/bench's node-llama-cpp package "
                   "when installed)");
    sub.add_option("--csv", o->csv, "Also write the table as CSV to this file");
    sub.footer(
        "Shapes (rows x columns = n_out x n_in): 2048x4096 and 4096x2048 (Flash routed experts), "
        "4096x8192 (dense attn_output_b); mxfp4 (the V4.1 routed-expert format) uses the V4.1 "
        "expert shapes 2304x5120 and 5120x2304 instead. 'ratio' is the kernel's weight "
        "bandwidth over a plain streaming read measured with the same threads in the same round "
        "(median of the per-round ratios); the decode summary picks the faster family per type "
        "and marks ratio >= 0.85. 'cpu%' is the share of threads x wall time the threads "
        "actually ran: well below 100 means other processes took the cores and the wall-clock "
        "rows understate the kernel. 'hot' rows: one thread on a cache-resident slice of the "
        "matrix, timed in thread CPU time: the kernel's compute rate (weight GB/s and GFLOP/s at "
        "that rate), unaffected by memory and by other processes. 'indexer': the lightning "
        "indexer's scores (64 heads of 128 against 8192 compressed rows) in GFLOP/s per core, "
        "the scalar twin and the chosen level. 'ggml' rows: the same bytes through the GGML peer's "
        "own activation converter and dot product per row and token (decode and hot rows; its "
        "batched products take other paths, so it has no prefill rows); a peer whose outputs "
        "differ from Magnetar's by more than 5 % of the largest is an error.");
    return [o]() { return run_bench(*o); };
}

}  // namespace

MAGNETAR_BENCH_COMMAND(kernels, "kernels",
                       "CPU matrix-product kernels against the measured memory bandwidth", setup);

}  // namespace magnetar::cli
