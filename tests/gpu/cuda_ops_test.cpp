// Every CUDA backend op against the CPU backend on identical random inputs (the CPU backend is
// itself checked against the PyTorch reference in tests/ops). Limits are normalised MSE per
// op and weight type; ops whose CUDA kernel follows the CPU arithmetic exactly (data movement,
// dequantization, the FP8 / FP4 round trips, the Hadamard rotation, top-k selections, expert
// sorting) must match bit for bit. Each case also checks the batch-invariance contract where it
// applies: a token's result is the same whether it runs alone or inside a batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gpu/gpu_harness.h"

namespace magnetar::gpu_test {
namespace {

// Float reordering only (a dot product's summation order): far below any model tolerance.
constexpr double kReorderTol = 1e-10;
// Element-wise ops whose only difference is libm (expf / log1pf / cos within an ulp or two).
constexpr double kLibmTol = 1e-11;
// A model-defined rounding (FP8 / FP4) after libm-affected arithmetic: an ulp of difference may
// move a value across a rounding midpoint now and then (one FP8 step in one element of a few
// thousand is ~1e-7); a wrong kernel is orders of magnitude above this.
constexpr double kRoundingTol = 1e-5;

const ggml_type kWeightTypes[] = {ggml_type::F32,     ggml_type::F16,  ggml_type::BF16,
                                  ggml_type::Q8_0,    ggml_type::Q4_K, ggml_type::Q2_K,
                                  ggml_type::IQ2_XXS, ggml_type::MXFP4};

std::string tname(ggml_type t) {
    return type_traits_of(t).name;
}

TEST(CudaOps, MatmulEveryWeightType) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(1);
    for (ggml_type t : kWeightTypes) {
        for (int64_t n : {1, 3, 17}) {
            const int64_t n_in = 512, n_out = 67;
            const twin w = h.weight(t, rng, n_in, n_out);
            const twin x = h.random(rng, n_in, n, 1.0f);
            const twin y = h.zeros(ggml_type::F32, n_out, n);
            h.cpu().matmul(w.c, x.c, y.c);
            h.gpu().matmul(w.g, x.g, y.g);
            const auto gy = h.gpu_f32(y);
            expect_close(gy, h.cpu_f32(y), kReorderTol,
                         "matmul " + tname(t) + " n=" + std::to_string(n));
            // Token 0 alone gives the bits it got inside the batch.
            const twin y1 = h.zeros(ggml_type::F32, n_out, 1);
            h.gpu().matmul(w.g, view_rows(x.g, n - 1, 1), y1.g);
            const auto g1 = h.gpu_f32(y1);
            const std::vector<float> last(gy.end() - n_out, gy.end());
            expect_close(g1, last, 0.0, "matmul batch invariance " + tname(t));
        }
    }
}

TEST(CudaOps, MatmulOddWidthsAndColumnViews) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(2);
    // A float row that is not a multiple of 32, and strided column views on both sides (the
    // grouped output projection's layout).
    const twin w = h.weight(ggml_type::F32, rng, 100, 45);
    const twin xw = h.random(rng, 300, 5, 1.0f);
    const twin yw = h.zeros(ggml_type::F32, 90, 5);
    h.cpu().matmul(w.c, view_cols(xw.c, 100, 100), view_cols(yw.c, 45, 45));
    h.gpu().matmul(w.g, view_cols(xw.g, 100, 100), view_cols(yw.g, 45, 45));
    expect_close(h.gpu_f32(yw), h.cpu_f32(yw), kReorderTol, "matmul column views");
    // Row views of a weight (one output group of a grouped projection).
    const twin wq = h.weight(ggml_type::Q8_0, rng, 256, 64);
    const twin x = h.random(rng, 256, 2, 1.0f);
    const twin y = h.zeros(ggml_type::F32, 16, 2);
    h.cpu().matmul(view_rows(wq.c, 32, 16), x.c, y.c);
    h.gpu().matmul(view_rows(wq.g, 32, 16), x.g, y.g);
    expect_close(h.gpu_f32(y), h.cpu_f32(y), kReorderTol, "matmul weight row view");
}

TEST(CudaOps, GetRowsDequantizesBitExactly) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(3);
    for (ggml_type t : kWeightTypes) {
        const twin w = h.weight(t, rng, 256, 40, 1, 0.5f);
        const twin ids = h.i32({5, 0, 39, 5, 17}, 5);
        for (int rep : {1, 4}) {
            const twin out = h.zeros(ggml_type::F32, 256 * rep, 5);
            h.cpu().get_rows(w.c, ids.c, out.c, rep);
            h.gpu().get_rows(w.g, ids.g, out.g, rep);
            expect_close(h.gpu_f32(out), h.cpu_f32(out), 0.0, "get_rows " + tname(t));
        }
    }
}

TEST(CudaOps, CopyFillAddSwiglu) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(4);
    const twin a = h.random(rng, 96, 6, 3.0f);
    const twin b = h.random(rng, 96, 3, 3.0f);
    const twin out = h.zeros(ggml_type::F32, 96, 6);
    h.cpu().add(a.c, b.c, out.c, 2);
    h.gpu().add(a.g, b.g, out.g, 2);
    expect_close(h.gpu_f32(out), h.cpu_f32(out), 0.0, "add rep 2");

    const twin wide = h.zeros(ggml_type::F32, 200, 6);
    h.cpu().copy(a.c, view_cols(wide.c, 50, 96));
    h.gpu().copy(a.g, view_cols(wide.g, 50, 96));
    h.cpu().fill(view_cols(wide.c, 0, 50), -2.5f);
    h.gpu().fill(view_cols(wide.g, 0, 50), -2.5f);
    expect_close(h.gpu_f32(wide), h.cpu_f32(wide), 0.0, "copy into a view, fill a view");

    const twin g = h.random(rng, 96, 6, 14.0f);
    const twin u = h.random(rng, 96, 6, 14.0f);
    const twin s = h.zeros(ggml_type::F32, 96, 6);
    h.cpu().swiglu(g.c, u.c, s.c, 10.0f);
    h.gpu().swiglu(g.g, u.g, s.g, 10.0f);
    expect_close(h.gpu_f32(s), h.cpu_f32(s), kLibmTol, "swiglu");
}

TEST(CudaOps, ProjectOutSteering) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(14);
    for (const int64_t w : {int64_t{256}, int64_t{4096}, int64_t{7168}}) {
        const twin x = h.random(rng, w, 9, 4.0f);
        const twin v = h.random(rng, w, 1, 0.05f);
        for (const float s : {1.0f, -2.5f}) {
            h.cpu().project_out(x.c, v.c, s);
            h.gpu().project_out(x.g, v.g, s);
            expect_close(h.gpu_f32(x), h.cpu_f32(x), kReorderTol,
                         "project_out w " + std::to_string(w));
        }
    }
}

TEST(CudaOps, RmsNormRopeAndRounding) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(5);
    {
        const twin x = h.random(rng, 512, 4, 4.0f);
        std::vector<float> wv(128);
        for (float& v : wv) v = 1.0f + rng.uniform_pm1() * 0.5f;
        const twin w = h.weight_f32(wv, 128);
        const twin o = h.zeros(ggml_type::F32, 512, 4);
        h.cpu().rms_norm(x.c, w.c, o.c, 128, 1e-6f);
        h.gpu().rms_norm(x.g, w.g, o.g, 128, 1e-6f);
        expect_close(h.gpu_f32(o), h.cpu_f32(o), kLibmTol, "rms_norm weighted groups");
        h.cpu().rms_norm(x.c, tensor{}, x.c, 512, 1e-6f);
        h.gpu().rms_norm(x.g, tensor{}, x.g, 512, 1e-6f);
        expect_close(h.gpu_f32(x), h.cpu_f32(x), kLibmTol, "rms_norm in place, no weight");
    }
    for (bool yarn : {false, true}) {
        for (bool inverse : {false, true}) {
            backend::rope_params rp;
            rp.n_rot = 64;
            rp.freq_base = yarn ? 160000.0f : 10000.0f;
            rp.yarn = yarn;
            rp.yarn_factor = 16.0f;
            rp.yarn_orig_ctx = 65536;
            const twin x = h.random(rng, 4 * 128, 5, 2.0f);
            h.cpu().rope_tail(x.c, 128, rp, 1000, inverse);
            h.gpu().rope_tail(x.g, 128, rp, 1000, inverse);
            expect_close(h.gpu_f32(x), h.cpu_f32(x), kLibmTol, "rope_tail");
        }
    }
    {
        // Magnitudes across many binades, including tiny blocks (the amax floor).
        std::vector<float> v(448 * 3);
        for (size_t i = 0; i < v.size(); ++i)
            v[i] = rng.uniform_pm1() * std::ldexp(1.0f, static_cast<int>(i % 64) / 4 - 10);
        for (size_t i = 0; i < 64; ++i) v[i] = rng.uniform_pm1() * 1e-7f;
        const twin x = h.f32(v, 448, 3);
        h.cpu().fp8_kv_roundtrip(x.c, 384);
        h.gpu().fp8_kv_roundtrip(x.g, 384);
        expect_close(h.gpu_f32(x), h.cpu_f32(x), 0.0, "fp8_kv_roundtrip");
    }
    for (uint32_t hd : {64u, 128u}) {
        const twin x = h.random(rng, 4 * hd, 3, 3.0f);
        h.cpu().indexer_qat(x.c, hd);
        h.gpu().indexer_qat(x.g, hd);
        expect_close(h.gpu_f32(x), h.cpu_f32(x), 0.0, "indexer_qat (Hadamard + FP4)");
    }
}

TEST(CudaOps, HyperConnections) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(6);
    backend::hc_params p;
    p.n_hc = 4;
    p.n_embd = 256;
    const int64_t nh = p.n_hc, d = p.n_embd, mixw = (2 + nh) * nh, n = 5;
    const twin fn = h.weight(ggml_type::F32, rng, nh * d, mixw, 1, 0.05f);
    const twin scale = h.weight_f32({0.7f, 1.3f, 0.9f}, 3);
    std::vector<float> bv(static_cast<size_t>(mixw));
    for (float& v : bv) v = rng.uniform_pm1();
    const twin base = h.weight_f32(bv, mixw);
    const twin x = h.random(rng, nh * d, n, 2.0f);
    const twin y = h.zeros(ggml_type::F32, d, n);
    const twin post = h.zeros(ggml_type::F32, nh, n);
    const twin comb = h.zeros(ggml_type::F32, nh * nh, n);
    const twin mix = h.zeros(ggml_type::F32, mixw, n);
    h.cpu().hc_pre(p, x.c, fn.c, scale.c, base.c, y.c, post.c, comb.c, mix.c);
    h.gpu().hc_pre(p, x.g, fn.g, scale.g, base.g, y.g, post.g, comb.g, mix.g);
    expect_close(h.gpu_f32(post), h.cpu_f32(post), kReorderTol, "hc_pre post");
    expect_close(h.gpu_f32(comb), h.cpu_f32(comb), kReorderTol, "hc_pre comb (Sinkhorn)");
    expect_close(h.gpu_f32(y), h.cpu_f32(y), kReorderTol, "hc_pre y");

    const twin f = h.random(rng, d, n, 1.0f);
    const twin out = h.zeros(ggml_type::F32, nh * d, n);
    h.cpu().hc_post(p, x.c, f.c, post.c, comb.c, out.c);
    h.gpu().hc_post(p, x.g, f.g, post.g, comb.g, out.g);
    expect_close(h.gpu_f32(out), h.cpu_f32(out), kReorderTol, "hc_post");

    const twin fnh = h.weight(ggml_type::F32, rng, nh * d, nh, 1, 0.05f);
    const twin hb = h.weight_f32({0.1f, -0.2f, 0.3f, 0.0f}, 4);
    const twin hs = h.weight_f32({1.1f}, 1);
    const twin hm = h.zeros(ggml_type::F32, nh, n);
    const twin ho = h.zeros(ggml_type::F32, d, n);
    h.cpu().hc_collapse(p, x.c, fnh.c, hs.c, hb.c, ho.c, hm.c);
    h.gpu().hc_collapse(p, x.g, fnh.g, hs.g, hb.g, ho.g, hm.g);
    expect_close(h.gpu_f32(ho), h.cpu_f32(ho), kReorderTol, "hc_collapse");
}

TEST(CudaOps, KvStoreRing) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(7);
    const twin ring = h.zeros(ggml_type::F32, 64, 16);
    for (auto [p0, n] : {std::pair<int64_t, int64_t>{0, 5}, {5, 1}, {6, 23}, {29, 40}}) {
        const twin kv = h.random(rng, 64, n, 1.0f);
        h.cpu().kv_store(kv.c, ring.c, p0);
        h.gpu().kv_store(kv.g, ring.g, p0);
    }
    expect_close(h.gpu_f32(ring), h.cpu_f32(ring), 0.0, "kv_store");
}

// Streams 300 tokens through one compressor lane in uneven chunks and compares the rows and
// the frontier state after every chunk.
void compressor_case(uint32_t ratio, bool qat) {
    harness h;
    Rng rng(8 + ratio + (qat ? 1 : 0));
    const int64_t d = qat ? 64 : 128;
    const int64_t coff = ratio == 4 ? 2 : 1;
    const int64_t w2 = coff * d;
    const int64_t n_total = 300;
    backend::compressor_params p;
    p.ratio = ratio;
    p.width = static_cast<uint32_t>(d);
    p.rope.n_rot = 64;
    p.rope.freq_base = 160000.0f;
    p.rope.yarn = true;
    p.rope.yarn_factor = 16.0f;
    p.rope.yarn_orig_ctx = 65536;
    p.indexer_qat = qat;
    p.n_nope = qat ? 0 : static_cast<uint32_t>(d - 64);
    std::vector<float> ape(static_cast<size_t>(w2 * ratio)), norm(static_cast<size_t>(d));
    for (float& v : ape) v = rng.uniform_pm1();
    for (float& v : norm) v = 1.0f + 0.3f * rng.uniform_pm1();
    const twin ape_t = h.weight_f32(ape, w2, ratio);
    const twin norm_t = h.weight_f32(norm, d);
    const twin skv = h.zeros(ggml_type::F32, w2, coff * ratio);
    std::vector<float> neg(static_cast<size_t>(w2 * coff * ratio),
                           -std::numeric_limits<float>::infinity());
    const twin ssc = h.f32(neg, w2, coff * ratio);
    const twin rows = h.zeros(ggml_type::F32, d, n_total / ratio + 1);
    int64_t p0 = 0;
    for (int64_t chunk : {1, 7, 64, 1, 1, 130, 97}) {
        const twin kvp = h.random(rng, w2, chunk, 2.0f);
        const twin sc = h.random(rng, w2, chunk, 2.0f);
        p.p0 = p0;
        h.cpu().compressor(p, kvp.c, sc.c, ape_t.c, norm_t.c, skv.c, ssc.c, rows.c);
        h.gpu().compressor(p, kvp.g, sc.g, ape_t.g, norm_t.g, skv.g, ssc.g, rows.g);
        p0 += chunk;
        const std::string what =
            "compressor ratio " + std::to_string(ratio) + " at " + std::to_string(p0);
        expect_close(h.gpu_f32(rows), h.cpu_f32(rows), kRoundingTol, what + " rows");
        expect_close(h.gpu_f32(skv), h.cpu_f32(skv), 0.0, what + " frontier values");
        expect_close(h.gpu_f32(ssc), h.cpu_f32(ssc), 0.0, what + " frontier scores");
    }
    ASSERT_EQ(p0, n_total + 1);
}

TEST(CudaOps, CompressorMainLanes) {
    MAGNETAR_REQUIRE_CUDA();
    compressor_case(4, false);
    compressor_case(128, false);
}

TEST(CudaOps, CompressorIndexerLane) {
    MAGNETAR_REQUIRE_CUDA();
    compressor_case(4, true);
}

TEST(CudaOps, IndexerTopkSelection) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(9);
    backend::indexer_params p;
    p.ratio = 4;
    p.top_k = 16;
    p.n_head = 4;
    p.head_dim = 64;
    p.weight_scale = 1.0f / 16.0f;
    const int64_t n_rows = 200;
    // QAT'd keys and queries (coarse values: many exact score ties, which must go to the lower
    // index on both sides).
    const twin rows = h.random(rng, 64, n_rows, 2.0f);
    h.cpu().indexer_qat(rows.c, 64);
    h.gpu().indexer_qat(rows.g, 64);
    for (auto [p0, n] : {std::pair<int64_t, int64_t>{0, 70}, {70, 1}, {500, 9}, {795, 5}}) {
        const twin qi = h.random(rng, 4 * 64, n, 1.0f);
        h.cpu().indexer_qat(qi.c, 64);
        h.gpu().indexer_qat(qi.g, 64);
        const twin w = h.random(rng, 4, n, 1.0f);
        const twin sel = h.zeros(ggml_type::I32, 16, n);
        p.p0 = p0;
        h.cpu().indexer_topk(p, qi.c, w.c, rows.c, sel.c);
        h.gpu().indexer_topk(p, qi.g, w.g, rows.g, sel.g);
        EXPECT_EQ(h.gpu_i32(sel), h.cpu_i32(sel)) << "indexer_topk p0=" << p0;
    }
}

TEST(CudaOps, SparseAttentionWithSinks) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(10);
    const int64_t H = 4, hd = 128, cap = 16;
    std::vector<float> sv(static_cast<size_t>(H));
    for (float& v : sv) v = rng.uniform_pm1() * 2.0f;
    const twin sinks = h.weight_f32(sv, H);
    const twin ring = h.random(rng, hd, cap, 1.0f);
    const twin comp = h.random(rng, hd, 100, 1.0f);
    for (uint32_t ratio : {0u, 4u, 128u}) {
        for (auto [p0, n] : {std::pair<int64_t, int64_t>{0, 20}, {300, 1}, {390, 7}}) {
            backend::attention_params p;
            p.p0 = p0;
            p.n_head = H;
            p.head_dim = hd;
            p.window = cap;
            p.ratio = ratio;
            p.top_k = 8;
            p.scale = 1.0f / std::sqrt(128.0f);
            const twin q = h.random(rng, H * hd, n, 1.0f);
            const twin kv = h.random(rng, hd, n, 1.0f);
            // A top-k selection per query (ascending, distinct, visible).
            std::vector<int32_t> sv_(static_cast<size_t>(8 * n));
            for (int64_t t = 0; t < n; ++t) {
                const int64_t vis = (p0 + t + 1) / 4;
                for (int i = 0; i < 8; ++i)
                    sv_[static_cast<size_t>(t * 8 + i)] =
                        vis > 8 ? static_cast<int32_t>(i * (vis / 8)) : -1;
            }
            const twin sel = h.i32(sv_, 8, n);
            const twin out = h.zeros(ggml_type::F32, H * hd, n);
            h.cpu().sparse_attention(p, q.c, kv.c, ring.c, comp.c, sel.c, sinks.c, out.c);
            h.gpu().sparse_attention(p, q.g, kv.g, ring.g, comp.g, sel.g, sinks.g, out.g);
            expect_close(
                h.gpu_f32(out), h.cpu_f32(out), kReorderTol,
                "sparse_attention ratio " + std::to_string(ratio) + " p0 " + std::to_string(p0));
        }
    }
}

TEST(CudaOps, RouterLearnedAndHashed) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(11);
    const int64_t E = 64, k = 6, n = 13;
    const twin logits = h.random(rng, E, n, 4.0f);
    std::vector<float> bv(static_cast<size_t>(E));
    for (float& v : bv) v = 0.1f * rng.uniform_pm1();
    const twin bias = h.weight_f32(bv, E);
    backend::router_params p;
    p.n_used = k;
    p.scale = 1.5f;
    const twin sel = h.zeros(ggml_type::I32, k, n);
    const twin wts = h.zeros(ggml_type::F32, k, n);
    h.cpu().router(p, logits.c, bias.c, tensor{}, tensor{}, sel.c, wts.c);
    h.gpu().router(p, logits.g, bias.g, tensor{}, tensor{}, sel.g, wts.g);
    EXPECT_EQ(h.gpu_i32(sel), h.cpu_i32(sel)) << "router selection";
    expect_close(h.gpu_f32(wts), h.cpu_f32(wts), kLibmTol, "router weights");

    // Hash routing: table rows picked by token id.
    std::vector<int32_t> table(static_cast<size_t>(k * 50));
    for (auto& v : table) v = static_cast<int32_t>(rng.below(E));
    twin tab;
    tab.host = std::make_shared<std::vector<uint8_t>>(table.size() * 4);
    std::memcpy(tab.host->data(), table.data(), tab.host->size());
    tab.c = make_tensor(tab.host->data(), ggml_type::I32, k, 50);
    tab.g = tab.c;
    h.gpu().map_host_region(tab.host->data(), tab.host->size(), "hash table");
    std::vector<int32_t> idv(static_cast<size_t>(n));
    for (auto& v : idv) v = static_cast<int32_t>(rng.below(50));
    const twin ids = h.i32(idv, n);
    p.normalize = false;
    h.cpu().router(p, logits.c, tensor{}, tab.c, ids.c, sel.c, wts.c);
    h.gpu().router(p, logits.g, tensor{}, tab.g, ids.g, sel.g, wts.g);
    EXPECT_EQ(h.gpu_i32(sel), h.cpu_i32(sel)) << "hash router selection";
    expect_close(h.gpu_f32(wts), h.cpu_f32(wts), kLibmTol, "hash router weights");
}

TEST(CudaOps, MoeExpertGrouped) {
    MAGNETAR_REQUIRE_CUDA();
    harness h;
    Rng rng(12);
    const int64_t D = 256, F = 256, E = 8, k = 2;
    for (ggml_type t : {ggml_type::Q2_K, ggml_type::IQ2_XXS, ggml_type::Q4_K, ggml_type::F32}) {
        backend::moe_weights mw{h.weight(t, rng, D, F, E).c, h.weight(t, rng, D, F, E).c,
                                h.weight(t, rng, F, D, E).c};
        for (int64_t n : {1, 9, 40}) {
            const twin x = h.random(rng, D, n, 1.0f);
            std::vector<int32_t> sv(static_cast<size_t>(n * k));
            for (int64_t tk = 0; tk < n; ++tk) {
                const int32_t a = static_cast<int32_t>(rng.below(E));
                sv[static_cast<size_t>(tk * k)] = a;
                sv[static_cast<size_t>(tk * k + 1)] =
                    static_cast<int32_t>((a + 1 + rng.below(E - 1)) % E);
            }
            const twin sel = h.i32(sv, k, n);
            const twin wts = h.random(rng, k, n, 1.0f);
            const twin xg = h.zeros(ggml_type::F32, D, n * k);
            const twin g = h.zeros(ggml_type::F32, F, n * k);
            const twin u = h.zeros(ggml_type::F32, F, n * k);
            const twin c = h.zeros(ggml_type::F32, D, n * k);
            const twin slots = h.zeros(ggml_type::I32, 2 * n * k + E + 1);
            const twin out = h.zeros(ggml_type::F32, D, n);
            backend::moe_workspace wc{xg.c, g.c, u.c, c.c, slots.c};
            backend::moe_workspace wg{xg.g, g.g, u.g, c.g, slots.g};
            h.cpu().moe(x.c, sel.c, wts.c, mw, 10.0f, out.c, wc);
            h.gpu().moe(x.g, sel.g, wts.g, mw, 10.0f, out.g, wg);
            const std::string what = "moe " + tname(t) + " n=" + std::to_string(n);
            EXPECT_EQ(h.gpu_i32(slots), h.cpu_i32(slots)) << what << ": expert-sorted slot layout";
            expect_close(h.gpu_f32(out), h.cpu_f32(out), kReorderTol, what);
        }
    }
}

TEST(CudaOps, UnmappedHostTensorIsAClearError) {
    MAGNETAR_REQUIRE_CUDA();
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts its own CUDA context
    harness h;
    std::vector<float> host(64, 1.0f);
    const tensor t = make_tensor(host.data(), ggml_type::F32, 64);
    EXPECT_DEATH(h.gpu().fill(t, 0.0f), "neither in a device buffer nor in a mapped");
}

}  // namespace
}  // namespace magnetar::gpu_test
