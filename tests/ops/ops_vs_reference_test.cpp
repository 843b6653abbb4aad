// Every CPU backend op against the PyTorch reference op (tests/reference/dsv4_ref/ops.py).
//
// tests/ops/op_cases.py writes the cases (random float32 inputs, float64 reference outputs);
// each test runs the backend op on the same inputs and compares with the case's tolerance:
// normalised MSE, or bit equality where the op is exact (the FP8 / FP4 round trips, top-k
// selections). NaN always fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "support/fixture_cache.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

using backend::cpu_backend;
using nlohmann::json;

struct array {
    std::vector<float> v;
    std::vector<int64_t> shape;
    int64_t rows() const {
        return shape.size() <= 1 ? 1 : static_cast<int64_t>(v.size()) / shape.back();
    }
    int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
    std::vector<int32_t> ints() const { return std::vector<int32_t>(v.begin(), v.end()); }
};

struct op_case {
    std::string name;
    std::string op;
    json params;
    std::map<std::string, array> arrays;
    double tol = 0.0;
    const array& at(const std::string& k) const {
        auto it = arrays.find(k);
        if (it == arrays.end()) throw std::runtime_error(name + ": no array " + k);
        return it->second;
    }
    bool has(const std::string& k) const { return arrays.count(k) != 0; }
};

const std::vector<op_case>& all_cases() {
    static const std::vector<op_case> cases = [] {
        const std::string src = MAGNETAR_SOURCE_DIR;
        const std::string script = src + "/tests/ops/op_cases.py";
        const std::string ref = src + "/tests/reference/dsv4_ref/ops.py";
        const std::string key = std::to_string(test::hash_inputs({script, ref}, "v1"));
        const std::string dir = test::cached_dir("op_cases", key, [&](const std::string& out) {
            std::string log;
            const int rc = test::run_command("/usr/bin/python3 " + script + " " + out, &log);
            if (rc != 0) throw std::runtime_error("op_cases.py failed:\n" + log);
        });
        std::vector<op_case> out;
        const json j = json::parse(test::read_text(dir + "/cases.json"));
        for (const auto& c : j) {
            op_case oc;
            oc.name = c["name"];
            oc.op = c["op"];
            oc.params = c["params"];
            oc.tol = c["tol"];
            for (const auto& [k, a] : c["arrays"].items()) {
                array arr;
                arr.v = test::read_f32(dir + "/" + a["file"].get<std::string>());
                arr.shape = a["shape"].get<std::vector<int64_t>>();
                oc.arrays[k] = std::move(arr);
            }
            out.push_back(std::move(oc));
        }
        return out;
    }();
    return cases;
}

std::vector<const op_case*> cases_of(const std::string& op) {
    std::vector<const op_case*> out;
    for (const auto& c : all_cases()) {
        if (c.op == op) out.push_back(&c);
    }
    EXPECT_FALSE(out.empty()) << "no cases for op " << op;
    return out;
}

cpu_backend& be() {
    static cpu_backend b(2);
    static const bool reserved = [] {
        backend::limits l;
        l.max_row = 4096;
        l.max_keys = 4096;
        l.max_index_rows = 4096;
        b.reserve(l);
        return true;
    }();
    (void)reserved;
    return b;
}

// 2-D float tensor over a vector's data: [rows, cols] with ne0 = cols.
tensor t2(std::vector<float>& v, int64_t cols) {
    return make_tensor(v.data(), ggml_type::F32, cols, static_cast<int64_t>(v.size()) / cols);
}
tensor t2i(std::vector<int32_t>& v, int64_t cols) {
    return make_tensor(v.data(), ggml_type::I32, cols, static_cast<int64_t>(v.size()) / cols);
}

uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

// Normalised MSE of got against ref (NaN or a size mismatch: infinity). Positions where the
// reference holds an infinity must hold the same infinity and are left out of the sums.
double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
    if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(got[i]) || std::isnan(ref[i]))
            return std::numeric_limits<double>::infinity();
        if (std::isinf(ref[i])) {
            if (got[i] != ref[i]) return std::numeric_limits<double>::infinity();
            continue;
        }
        const double d = static_cast<double>(got[i]) - ref[i];
        num += d * d;
        den += static_cast<double>(ref[i]) * ref[i];
    }
    return den > 0 ? num / den : num;
}

void expect_match(const op_case& c, const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& ref) {
    const double e = nmse(got, ref);
    if (c.tol == 0.0) {
        ASSERT_EQ(got.size(), ref.size()) << c.name << "." << what;
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(f32_bits(got[i]), f32_bits(ref[i]))
                << c.name << "." << what << ": element " << i << " got " << got[i] << " expected "
                << ref[i];
        }
    } else {
        EXPECT_LE(e, c.tol) << c.name << "." << what;
    }
    if (c.tol == 0.0) {
        std::printf("  %-28s %-18s nmse %.3e (bit-exact)\n", c.name.c_str(), what.c_str(), e);
    } else {
        std::printf("  %-28s %-18s nmse %.3e (tolerance %.0e)\n", c.name.c_str(), what.c_str(), e,
                    c.tol);
    }
}

backend::hc_params hc_of(const op_case& c) {
    backend::hc_params p;
    p.n_hc = c.params["n_hc"];
    p.n_embd = c.params["n_embd"];
    return p;
}

TEST(OpsVsReference, Sinkhorn) {
    for (const op_case* c : cases_of("sinkhorn")) {
        std::vector<float> m(16);
        cpu::sinkhorn(c->at("z").v.data(), m.data(), 4, c->params["eps"].get<float>(),
                      c->params["iters"].get<int>());
        expect_match(*c, "M", m, c->at("m").v);
        // Columns (normalised last) sum to one; rows to about one after 20 iterations, the more
        // loosely the more peaked the logits (spec §10 unit check 1).
        for (int a = 0; a < 4; ++a) {
            float rs = 0, cs = 0;
            for (int b = 0; b < 4; ++b) {
                rs += m[a * 4 + b];
                cs += m[b * 4 + a];
            }
            EXPECT_NEAR(rs, 1.0f, 5e-2f);
            EXPECT_NEAR(cs, 1.0f, 1e-4f);
        }
    }
}

TEST(OpsVsReference, HcPrePostHead) {
    for (const op_case* c : cases_of("hc_pre")) {
        const auto p = hc_of(*c);
        array x = c->at("x"), fn = c->at("fn"), sc = c->at("scale"), bs = c->at("base");
        const int64_t n = x.rows();
        std::vector<float> y(n * p.n_embd), post(n * p.n_hc), comb(n * p.n_hc * p.n_hc),
            mix(n * 24);
        be().hc_pre(p, t2(x.v, x.cols()), t2(fn.v, fn.cols()), t2(sc.v, 3), t2(bs.v, 24),
                    t2(y, p.n_embd), t2(post, p.n_hc), t2(comb, p.n_hc * p.n_hc), t2(mix, 24));
        expect_match(*c, "y", y, c->at("y").v);
        expect_match(*c, "post", post, c->at("post").v);
        expect_match(*c, "comb", comb, c->at("comb").v);
    }
    for (const op_case* c : cases_of("hc_post")) {
        const auto p = hc_of(*c);
        array x = c->at("x"), f = c->at("f"), post = c->at("post"), comb = c->at("comb");
        std::vector<float> out(x.v.size());
        be().hc_post(p, t2(x.v, x.cols()), t2(f.v, f.cols()), t2(post.v, p.n_hc),
                     t2(comb.v, p.n_hc * p.n_hc), t2(out, x.cols()));
        expect_match(*c, "out", out, c->at("out").v);
    }
    for (const op_case* c : cases_of("hc_collapse")) {
        const auto p = hc_of(*c);
        array x = c->at("x"), fn = c->at("fn"), sc = c->at("scale"), bs = c->at("base");
        const int64_t n = x.rows();
        std::vector<float> out(n * p.n_embd), mix(n * p.n_hc);
        be().hc_collapse(p, t2(x.v, x.cols()), t2(fn.v, fn.cols()), t2(sc.v, 1), t2(bs.v, p.n_hc),
                         t2(out, p.n_embd), t2(mix, p.n_hc));
        expect_match(*c, "out", out, c->at("out").v);
    }
}

TEST(OpsVsReference, RopeYarn) {
    for (const op_case* c : cases_of("rope_tail")) {
        backend::rope_params r;
        r.n_rot = c->params["n_rot"];
        r.freq_base = c->params["base"];
        r.yarn = c->params["yarn"];
        if (r.yarn) {
            r.yarn_factor = c->params["factor"];
            r.yarn_orig_ctx = c->params["orig_ctx"];
            r.beta_fast = c->params["beta_fast"];
            r.beta_slow = c->params["beta_slow"];
        }
        array x = c->at("x");
        const std::vector<float> orig = x.v;
        const uint32_t hd = c->params["head_dim"];
        const int64_t p0 = c->params["p0"];
        const bool inverse = c->params["inverse"];
        be().rope_tail(t2(x.v, x.cols()), hd, r, p0, inverse);
        expect_match(*c, "y", x.v, c->at("y").v);
        // The other direction undoes it (to float rounding), and the non-RoPE dims never move.
        be().rope_tail(t2(x.v, x.cols()), hd, r, p0, !inverse);
        EXPECT_LE(nmse(x.v, orig), 1e-13) << c->name << ": forward then inverse";
        for (int64_t i = 0; i < x.rows(); ++i) {
            for (uint32_t d = 0; d < hd - r.n_rot; ++d)
                EXPECT_EQ(x.v[i * x.cols() + d], orig[i * x.cols() + d]);
        }
    }
}

TEST(OpsVsReference, Fp8RoundTrip) {
    for (const op_case* c : cases_of("fp8_kv_roundtrip")) {
        array x = c->at("x");
        be().fp8_kv_roundtrip(t2(x.v, x.cols()), c->params["n_nope"]);
        expect_match(*c, "y", x.v, c->at("y").v);
    }
}

TEST(OpsVsReference, Fp4RoundTripAndHadamard) {
    for (const op_case* c : cases_of("fp4_roundtrip")) {
        array x = c->at("x");
        for (int64_t r = 0; r < x.rows(); ++r)
            cpu::fp4_roundtrip(x.v.data() + r * x.cols(), x.cols());
        expect_match(*c, "y", x.v, c->at("y").v);
    }
    for (const op_case* c : cases_of("hadamard")) {
        array x = c->at("x");
        for (int64_t r = 0; r < x.rows(); ++r) cpu::hadamard(x.v.data() + r * x.cols(), x.cols());
        expect_match(*c, "y", x.v, c->at("y").v);
    }
    for (const op_case* c : cases_of("indexer_qat")) {
        array x = c->at("x");
        be().indexer_qat(t2(x.v, x.cols()), c->params["head_dim"]);
        expect_match(*c, "y", x.v, c->at("y").v);
    }
}

// The power-of-two scale of §12.3 is taken from the float32 bit pattern: exactly a power of
// two stays, one ulp above goes up, never ceil(log2()).
TEST(OpsVsReference, Pow2ScaleFromBits) {
    EXPECT_EQ(cpu::pow2_ceil(0.125f), 0.125f);
    EXPECT_EQ(cpu::pow2_ceil(std::nextafter(0.125f, 1.0f)), 0.25f);
    EXPECT_EQ(cpu::pow2_ceil(std::nextafter(0.125f, 0.0f)), 0.125f);
    EXPECT_EQ(cpu::pow2_ceil(3.0f), 4.0f);
    EXPECT_EQ(cpu::e4m3_round(448.0f), 448.0f);
    EXPECT_EQ(cpu::e4m3_round(1.0625f), 1.0f);   // tie between 1 and 1.125: even code
    EXPECT_EQ(cpu::e4m3_round(1.1875f), 1.25f);  // tie between 1.125 and 1.25: even code
    EXPECT_EQ(cpu::e2m1_round(2.5f), 2.0f);
    EXPECT_EQ(cpu::e2m1_round(-3.5f), -4.0f);
}

TEST(OpsVsReference, CompressorFrontiers) {
    for (const op_case* c : cases_of("compressor")) {
        backend::compressor_params p;
        p.ratio = c->params["ratio"];
        p.width = c->params["width"];
        p.rope.n_rot = c->params["n_rot"];
        p.rope.freq_base = c->params["base"];
        p.rope.yarn = true;
        p.rope.yarn_factor = c->params["factor"];
        p.rope.yarn_orig_ctx = c->params["orig_ctx"];
        p.rope.beta_fast = c->params["beta_fast"];
        p.rope.beta_slow = c->params["beta_slow"];
        p.indexer_qat = c->params["indexer_qat"];
        p.n_nope = c->params["n_nope"];
        const int64_t R = p.ratio;
        const int64_t coff = R == 4 ? 2 : 1;
        const int64_t w2 = coff * p.width;
        array kvp = c->at("kvp"), sc = c->at("sc"), ape = c->at("ape"), norm = c->at("norm");
        const int64_t n = kvp.rows();
        std::vector<float> skv(coff * R * w2, 0.0f),
            ssc(coff * R * w2, -std::numeric_limits<float>::infinity());
        std::vector<float> rows((n / R) * p.width, 0.0f);
        const auto& ref_kv = c->at("state_kv").v;
        const auto& ref_sc = c->at("state_score").v;
        int64_t pos = 0, k = 0;
        for (int64_t len : c->params["chunks"].get<std::vector<int64_t>>()) {
            p.p0 = pos;
            be().compressor(p, view_rows(t2(kvp.v, w2), pos, len),
                            view_rows(t2(sc.v, w2), pos, len), t2(ape.v, w2), t2(norm.v, p.width),
                            t2(skv, w2), t2(ssc, w2), t2(rows, p.width));
            pos += len;
            const size_t sz = skv.size();
            const std::vector<float> rk(ref_kv.begin() + k * sz, ref_kv.begin() + (k + 1) * sz);
            const std::vector<float> rs(ref_sc.begin() + k * sz, ref_sc.begin() + (k + 1) * sz);
            expect_match(*c, "state_kv@" + std::to_string(pos), skv, rk);
            expect_match(*c, "state_sc@" + std::to_string(pos), ssc, rs);
            ++k;
        }
        expect_match(*c, "rows", rows, c->at("rows").v);
    }
}

TEST(OpsVsReference, IndexerTopk) {
    for (const op_case* c : cases_of("indexer_topk")) {
        backend::indexer_params p;
        p.p0 = c->params["p0"];
        p.top_k = c->params["top_k"];
        p.n_head = c->params["n_head"];
        p.head_dim = c->params["head_dim"];
        p.weight_scale = c->params["scale"].get<float>();
        array qi = c->at("qi"), wgt = c->at("wgt"), rows = c->at("rows");
        const int64_t n = qi.rows();
        std::vector<int32_t> sel(n * p.top_k, 7);
        be().indexer_topk(p, t2(qi.v, qi.cols()), t2(wgt.v, p.n_head), t2(rows.v, p.head_dim),
                          t2i(sel, p.top_k));
        expect_match(*c, "sel", std::vector<float>(sel.begin(), sel.end()), c->at("sel").v);
    }
}

// The two-query dot gives dot_f32's bits for each query, at every length (tails included).
TEST(CpuKernels, DotX2EqualsTwoDots) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t n : {0, 1, 5, 15, 16, 17, 33, 128, 131, 512}) {
        std::vector<float> a0(static_cast<size_t>(n)), a1(a0.size()), b(a0.size());
        for (size_t i = 0; i < a0.size(); ++i) {
            a0[i] = nd(rng);
            a1[i] = nd(rng) * 1e3f;
            b[i] = nd(rng);
        }
        float out[2];
        cpu::dot_f32_x2(a0.data(), a1.data(), b.data(), n, out);
        const float e0 = cpu::dot_f32(a0.data(), b.data(), n);
        const float e1 = cpu::dot_f32(a1.data(), b.data(), n);
        EXPECT_EQ(std::memcmp(&out[0], &e0, 4), 0) << n << ": " << out[0] << " vs " << e0;
        EXPECT_EQ(std::memcmp(&out[1], &e1, 4), 0) << n << ": " << out[1] << " vs " << e1;
    }
}

// A decode (one token, fewer than the backend's threads) splits the scoring of its rows across
// the threads; a batch scores token by token. Both select the same rows, for an even and an odd
// head count.
TEST(CpuKernels, IndexerDecodeSplitEqualsBatch) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (uint32_t heads : {4u, 5u}) {
        backend::indexer_params p;
        p.p0 = 1000;
        p.top_k = 16;
        p.n_head = heads;
        p.head_dim = 32;
        p.weight_scale = 0.1f;
        const int64_t n_tok = 3, n_rows = (p.p0 + n_tok) / 4;
        std::vector<float> qi(static_cast<size_t>(n_tok * heads * p.head_dim));
        std::vector<float> wgt(static_cast<size_t>(n_tok * heads));
        std::vector<float> rows(static_cast<size_t>(n_rows * p.head_dim));
        for (float& v : qi) v = nd(rng);
        for (float& v : wgt) v = nd(rng);
        for (float& v : rows) v = nd(rng);
        std::vector<int32_t> batch(static_cast<size_t>(n_tok * p.top_k), 7);
        be().indexer_topk(p, t2(qi, heads * p.head_dim), t2(wgt, heads), t2(rows, p.head_dim),
                          t2i(batch, p.top_k));
        for (int64_t t = 0; t < n_tok; ++t) {
            backend::indexer_params pt = p;
            pt.p0 = p.p0 + t;
            std::vector<float> q1(qi.begin() + t * heads * p.head_dim,
                                  qi.begin() + (t + 1) * heads * p.head_dim);
            std::vector<float> w1(wgt.begin() + t * heads, wgt.begin() + (t + 1) * heads);
            std::vector<int32_t> one(p.top_k, 7);
            be().indexer_topk(pt, t2(q1, heads * p.head_dim), t2(w1, heads), t2(rows, p.head_dim),
                              t2i(one, p.top_k));
            EXPECT_EQ(one, std::vector<int32_t>(batch.begin() + t * p.top_k,
                                                batch.begin() + (t + 1) * p.top_k))
                << heads << " heads, token " << t;
        }
    }
}

// Heads are computed in pairs sharing their key and value loads; every head's output is
// bit-identical to the same head run alone (3 heads: one pair and one single; a head dim with a
// dot tail).
TEST(CpuKernels, AttentionHeadPairsEqualSingleHeads) {
    std::mt19937 rng(23);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    backend::attention_params p;
    p.p0 = 40;
    p.n_head = 3;
    p.head_dim = 40;
    p.window = 8;
    p.ratio = 4;
    p.top_k = 4;
    p.scale = 0.15f;
    const int64_t n = 2, hd = p.head_dim, cap = 16, n_comp = (p.p0 + n) / 4;
    auto randv = [&](size_t count) {
        std::vector<float> v(count);
        for (float& x : v) x = nd(rng);
        return v;
    };
    std::vector<float> q = randv(static_cast<size_t>(n * 3 * hd)), kv = randv(n * hd),
                       ring = randv(cap * hd), comp = randv(n_comp * hd), sinks = randv(3);
    // Compressed rows visible to both tokens: (p0 + 1) / 4 = 10, indices 0..9.
    std::vector<int32_t> sel = {1, 3, 6, 9, 0, 2, 5, 8};
    std::vector<float> out(q.size());
    be().sparse_attention(p, t2(q, 3 * hd), t2(kv, hd), t2(ring, hd), t2(comp, hd),
                          t2i(sel, p.top_k), t2(sinks, 3), t2(out, 3 * hd));
    for (int64_t h = 0; h < 3; ++h) {
        backend::attention_params p1 = p;
        p1.n_head = 1;
        std::vector<float> q1, s1 = {sinks[static_cast<size_t>(h)]};
        for (int64_t t = 0; t < n; ++t) {
            q1.insert(q1.end(), q.begin() + (t * 3 + h) * hd, q.begin() + (t * 3 + h + 1) * hd);
        }
        std::vector<float> o1(q1.size());
        be().sparse_attention(p1, t2(q1, hd), t2(kv, hd), t2(ring, hd), t2(comp, hd),
                              t2i(sel, p.top_k), t2(s1, 1), t2(o1, hd));
        for (int64_t t = 0; t < n; ++t) {
            EXPECT_EQ(std::memcmp(o1.data() + t * hd, out.data() + (t * 3 + h) * hd,
                                  static_cast<size_t>(hd) * sizeof(float)),
                      0)
                << "head " << h << " token " << t;
        }
    }
}

TEST(OpsVsReference, SinkAttention) {
    for (const op_case* c : cases_of("sparse_attention")) {
        backend::attention_params p;
        p.p0 = c->params["p0"];
        p.n_head = c->params["n_head"];
        p.head_dim = c->params["head_dim"];
        p.window = c->params["window"];
        p.ratio = c->params["ratio"];
        p.top_k = c->params["top_k"];
        p.scale = c->params["scale"].get<float>();
        array q = c->at("q"), kv = c->at("kv"), ring = c->at("ring"), comp = c->at("comp"),
              sinks = c->at("sinks");
        std::vector<int32_t> sel = c->at("sel").ints();
        const int64_t n = q.rows();
        std::vector<float> out(q.v.size());
        be().sparse_attention(p, t2(q.v, q.cols()), t2(kv.v, p.head_dim), t2(ring.v, p.head_dim),
                              t2(comp.v, p.head_dim), t2i(sel, c->at("sel").cols()),
                              t2(sinks.v, p.n_head), t2(out, q.cols()));
        (void)n;
        expect_match(*c, "out", out, c->at("out").v);
    }
}

TEST(OpsVsReference, MoeRouting) {
    for (const op_case* c : cases_of("router")) {
        backend::router_params p;
        p.n_used = c->params["k"];
        p.scale = c->params["scale"].get<float>();
        p.normalize = c->params["normalize"];
        array logits = c->at("logits");
        const int64_t n = logits.rows();
        std::vector<float> bias = c->has("bias") ? c->at("bias").v : std::vector<float>{};
        std::vector<int32_t> table =
            c->has("table") ? c->at("table").ints() : std::vector<int32_t>{};
        std::vector<int32_t> ids = c->has("ids") ? c->at("ids").ints() : std::vector<int32_t>(n, 0);
        std::vector<int32_t> sel(n * p.n_used);
        std::vector<float> wts(n * p.n_used);
        be().router(p, t2(logits.v, logits.cols()),
                    bias.empty() ? tensor{} : t2(bias, logits.cols()),
                    table.empty() ? tensor{} : t2i(table, p.n_used), t2i(ids, n),
                    t2i(sel, p.n_used), t2(wts, p.n_used));
        const op_case exact{c->name, c->op, c->params, {}, 0.0};
        expect_match(exact, "sel", std::vector<float>(sel.begin(), sel.end()), c->at("sel").v);
        expect_match(*c, "weights", wts, c->at("weights").v);
    }
}

TEST(OpsVsReference, SwigluAndRmsNorm) {
    for (const op_case* c : cases_of("swiglu")) {
        array g = c->at("g"), u = c->at("u");
        std::vector<float> out(g.v.size());
        be().swiglu(t2(g.v, g.cols()), t2(u.v, u.cols()), t2(out, g.cols()),
                    c->params["clamp"].get<float>());
        expect_match(*c, "out", out, c->at("out").v);
    }
    for (const op_case* c : cases_of("rms_norm")) {
        array x = c->at("x");
        std::vector<float> w = c->has("w") ? c->at("w").v : std::vector<float>{};
        const uint32_t group = c->params["group"];
        std::vector<float> out(x.v.size());
        be().rms_norm(t2(x.v, x.cols()), w.empty() ? tensor{} : t2(w, group), t2(out, x.cols()),
                      group, 1e-6f);
        expect_match(*c, "out", out, c->at("out").v);
    }
}

}  // namespace
}  // namespace magnetar
