// SIMD kernels against their scalar twins (every ISA level this CPU runs) in the f32-activation
// and q8-activation families, the GGML golden dot products, and the determinism contract: each
// output element is the same bits whatever the batch size, row range, thread count or ISA
// level. MXFP4 at every exponent, the indexer scores and the peak loops are in
// simd_mxfp4_index_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd/simd.h"
#include "core/rng.h"
#include "golden.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/dot_ref.h"
#include "quant/fp16.h"
#include "quant/iq2_tables.h"
#include "quant/quantize_act.h"
#include "quant/random_fill.h"
#include "quant/types.h"
#include "simd_test_util.h"

namespace magnetar {
namespace {

namespace simd = cpu::simd;
using simd::isa_level;
using test::abs_sum;
using test::acts;
using test::make_outs;
using test::outs;
using test::random_acts;
using test::simd_levels;
using test::weights;

const ggml_type kTypes[] = {ggml_type::F32,  ggml_type::F16,  ggml_type::BF16,    ggml_type::Q8_0,
                            ggml_type::Q4_K, ggml_type::Q2_K, ggml_type::IQ2_XXS, ggml_type::MXFP4};

std::string level_tag(isa_level l, ggml_type t) {
    return std::string(simd::level_name(l)) + "/" + type_traits_of(t).name;
}

// A random weight matrix of n_out rows, each row `stride` bytes apart (>= row_bytes).
weights random_weights(ggml_type t, int64_t n_in, int64_t n_out, uint64_t seed, size_t pad = 0) {
    weights out;
    const size_t rb = row_bytes(t, n_in);
    const size_t stride = rb + pad;
    out.bytes.assign(stride * static_cast<size_t>(n_out) + 64, 0xA5);
    Rng rng(seed);
    for (int64_t r = 0; r < n_out; ++r) {
        uint8_t* row = out.bytes.data() + static_cast<size_t>(r) * stride;
        fill_random_row(t, rng, 0.05f, row, n_in);
        if (t == ggml_type::MXFP4) {
            // The random fill gives every block one exponent; spread them instead: a row scale
            // from 2^-112 to 2^100 (every row's products and sums stay finite and normal in both
            // families), blocks within +-4 of it. Every exponent byte: SimdMxfp4 tests.
            auto* b = reinterpret_cast<block_mxfp4*>(row);
            const int base = 16 + static_cast<int>(rng.below(213));
            for (int64_t k = 0; k < n_in / QK_MXFP4; ++k)
                b[k].e = static_cast<uint8_t>(base - 4 + static_cast<int>(rng.below(9)));
        }
    }
    out.w = make_tensor(out.bytes.data(), t, n_in, n_out);
    out.w.nb[1] = stride;
    out.w.nb[2] = out.w.nb[3] = stride * static_cast<size_t>(n_out);
    return out;
}

void expect_same_bits(const outs& got, const outs& want, const std::string& what) {
    ASSERT_EQ(got.data.size(), want.data.size());
    for (size_t i = 0; i < got.data.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &got.data[i], 4);
        std::memcpy(&b, &want.data[i], 4);
        ASSERT_EQ(a, b) << what << ": element " << i << " got " << got.data[i] << " want "
                        << want.data[i];
    }
}

// Row lengths exercised per type: several blocks, and for the float types odd lengths too.
std::vector<int64_t> lengths_for(ggml_type t) {
    switch (type_traits_of(t).block_elems) {
        case 1:
            return {16, 37, 100, 1024};
        case QK8_0:
            return {32, 96, 1024};
        default:
            return {256, 768};
    }
}

// ---------------------------------------------------------------------------------------------
// f32-activation family
// ---------------------------------------------------------------------------------------------

TEST(SimdF32Act, ScalarTwinIsDequantPlusCanonicalDot) {
    // The twin itself against an independent float64 dot: a loose sanity bound.
    for (ggml_type t : kTypes) {
        const int64_t n_in = 512;
        auto w = random_weights(t, n_in, 5, 1);
        auto a = random_acts(n_in, 3, 2);
        auto y = make_outs(5, 3);
        simd::matmul_at(isa_level::scalar, t)(w.w, a.x, y.y, 0, 5, nullptr);
        std::vector<float> row(static_cast<size_t>(n_in));
        for (int64_t r = 0; r < 5; ++r) {
            to_float_of(t)(w.w.row_ptr(r), row.data(), n_in);
            for (int64_t k = 0; k < 3; ++k) {
                double ref = 0.0, mag = 0.0;
                for (int64_t i = 0; i < n_in; ++i) {
                    ref += static_cast<double>(row[i]) * a.x.f32_row(k)[i];
                    mag += std::fabs(static_cast<double>(row[i]) * a.x.f32_row(k)[i]);
                }
                EXPECT_NEAR(y.y.f32_row(k)[r], ref, 1e-6 * mag + 1e-30) << type_traits_of(t).name;
            }
        }
    }
}

TEST(SimdF32Act, EveryLevelEqualsScalarTwinBitForBit) {
    const auto levels = simd_levels();
    if (levels.empty()) GTEST_SKIP() << "no SIMD level on this CPU";
    for (isa_level l : levels) {
        for (ggml_type t : kTypes) {
            for (int64_t n_in : lengths_for(t)) {
                for (int64_t n_out : {1, 3, 4, 13, 37}) {
                    auto w = random_weights(t, n_in, n_out, 100 + n_in + n_out,
                                            /*pad=*/n_out % 2 ? 64 : 0);
                    for (int64_t n_tok : {1, 2, 3, 5, 8, 17}) {
                        auto a = random_acts(n_in, n_tok, 7 * n_tok + n_in, /*gap=*/n_tok % 3);
                        auto want = make_outs(n_out, n_tok);
                        auto got = make_outs(n_out, n_tok);
                        simd::matmul_at(isa_level::scalar, t)(w.w, a.x, want.y, 0, n_out, nullptr);
                        simd::matmul_at(l, t)(w.w, a.x, got.y, 0, n_out, nullptr);
                        expect_same_bits(got, want,
                                         level_tag(l, t) + " n_in=" + std::to_string(n_in) +
                                             " n_out=" + std::to_string(n_out) +
                                             " n_tok=" + std::to_string(n_tok));
                    }
                }
            }
        }
    }
}

TEST(SimdF32Act, RowRangesAndBatchesGiveTheSameBits) {
    for (isa_level l : simd_levels()) {
        for (ggml_type t : kTypes) {
            const int64_t n_in = type_traits_of(t).block_elems == 1 ? 80 : 512;
            const int64_t n_out = 29, n_tok = 11;
            auto w = random_weights(t, n_in, n_out, 5);
            auto a = random_acts(n_in, n_tok, 6, 5);
            const simd::matmul_fn fn = simd::matmul_at(l, t);
            auto whole = make_outs(n_out, n_tok);
            fn(w.w, a.x, whole.y, 0, n_out, nullptr);
            // Row pieces that cut the decode tiles unevenly.
            auto pieces = make_outs(n_out, n_tok);
            for (int64_t r0 = 0; r0 < n_out;) {
                const int64_t r1 = std::min(n_out, r0 + 1 + (r0 * 7) % 6);
                fn(w.w, a.x, pieces.y, r0, r1, nullptr);
                r0 = r1;
            }
            expect_same_bits(pieces, whole, level_tag(l, t) + " row pieces");
            // Token by token (decode) equals the batch (prefill).
            auto single = make_outs(n_out, n_tok);
            for (int64_t k = 0; k < n_tok; ++k) {
                const tensor xk = view_rows(a.x, k, 1);
                tensor yk = single.y;
                yk.data = single.y.row_ptr(k);
                yk.ne[1] = 1;
                fn(w.w, xk, yk, 0, n_out, nullptr);
            }
            expect_same_bits(single, whole, level_tag(l, t) + " decode vs prefill");
        }
    }
}

TEST(SimdF32Act, DispatchAndThreadPool) {
    const isa_level active = simd::active_level();
    for (ggml_type t : kTypes) {
        const simd::matmul_fn fn = simd::simd_matmul_for(t);
        if (active == isa_level::scalar) {
            EXPECT_EQ(fn, nullptr);
        } else {
            EXPECT_EQ(fn, simd::matmul_at(active, t)) << type_traits_of(t).name;
        }
    }
    EXPECT_EQ(simd::simd_matmul_for(ggml_type::I32), nullptr);
    EXPECT_EQ(simd::simd_matmul_for(ggml_type::Q8_K), nullptr);

    thread_pool one(1), three(3);
    for (ggml_type t : kTypes) {
        const int64_t n_in = 512, n_out = 301, n_tok = 6;
        auto w = random_weights(t, n_in, n_out, 9);
        auto a = random_acts(n_in, n_tok, 10, 1);
        auto y1 = make_outs(n_out, n_tok), y3 = make_outs(n_out, n_tok),
             yt = make_outs(n_out, n_tok);
        simd::matmul(one, w.w, a.x, y1.y);
        simd::matmul(three, w.w, a.x, y3.y);
        simd::matmul(three, w.w, a.x, yt.y, simd::matmul_at(isa_level::scalar, t));
        expect_same_bits(y3, y1, std::string("threads ") + type_traits_of(t).name);
        expect_same_bits(yt, y1, std::string("pool vs twin ") + type_traits_of(t).name);
    }
}

TEST(SimdF32Act, ExpertGatheredEqualsGatheredMatmul) {
    thread_pool pool(2);
    std::vector<isa_level> levels = simd_levels();
    levels.push_back(isa_level::scalar);
    for (isa_level l : levels) {
        for (ggml_type t : {ggml_type::IQ2_XXS, ggml_type::Q2_K, ggml_type::Q4_K, ggml_type::Q8_0,
                            ggml_type::MXFP4}) {
            const int64_t n_in = 512, n_out = 40, n_exp = 5, n_tok = 7, k = 3;
            auto w = random_weights(t, n_in, n_out * n_exp, 21);
            w.w.ne[1] = n_out;
            w.w.ne[2] = n_exp;
            w.w.nb[2] = w.w.nb[1] * static_cast<size_t>(n_out);
            w.w.nb[3] = w.w.nb[2] * static_cast<size_t>(n_exp);
            auto a = random_acts(n_in, n_tok, 22, 2);
            std::vector<int32_t> ex, xr, yr;
            for (int64_t tok = 0; tok < n_tok; ++tok) {
                for (int64_t i = 0; i < k; ++i) {
                    ex.push_back(static_cast<int32_t>((tok * 2 + i * 3 + (i == 2 ? 1 : 0)) %
                                                      (n_exp - 1)));  // expert 4 unused
                    xr.push_back(static_cast<int32_t>(tok));
                    yr.push_back(static_cast<int32_t>(tok * k + i));
                }
            }
            auto got = make_outs(n_out, n_tok * k);
            simd::matmul_experts(pool, w.w, a.x, got.y,
                                 {ex.data(), xr.data(), yr.data(), n_tok * k}, l);
            auto want = make_outs(n_out, n_tok * k);
            for (size_t i = 0; i < ex.size(); ++i) {
                tensor we = view_rows(w.w, static_cast<int64_t>(ex[i]) * n_out, n_out);
                tensor yi = want.y;
                yi.data = want.y.row_ptr(yr[i]);
                yi.ne[1] = 1;
                simd::matmul_at(isa_level::scalar, t)(we, view_rows(a.x, xr[i], 1), yi, 0, n_out,
                                                      nullptr);
            }
            expect_same_bits(got, want, level_tag(l, t) + " experts");
        }
    }
}

// The f32-activation kernels on GGML's own quantized rows: equal to a float64 dot of GGML's
// dequantized rows with the float activation (they are exact dequantizations, so only float
// summation error remains).
TEST(SimdF32Act, GoldenRowsMatchFloat64Dot) {
    const auto act = test::read_f32(test::golden_quants("activation.f32"));
    struct c {
        const char* name;
        ggml_type t;
    };
    const c cases[] = {{"f16", ggml_type::F16},           {"bf16", ggml_type::BF16},
                       {"q8_0", ggml_type::Q8_0},         {"q4_k", ggml_type::Q4_K},
                       {"q2_k", ggml_type::Q2_K},         {"q4_k.imatrix", ggml_type::Q4_K},
                       {"q2_k.imatrix", ggml_type::Q2_K}, {"iq2_xxs.imatrix", ggml_type::IQ2_XXS}};
    std::vector<isa_level> levels = simd_levels();
    levels.push_back(isa_level::scalar);
    for (const c& k : cases) {
        auto bin = test::read_file(test::golden_quants(std::string(k.name) + ".bin"));
        const auto deq = test::read_f32(test::golden_quants(std::string(k.name) + ".dequant.f32"));
        const tensor w = make_tensor(bin.data(), k.t, test::kGoldenCols, test::kGoldenRows);
        acts a;
        a.data = act;
        a.x = make_tensor(a.data.data(), ggml_type::F32, test::kGoldenCols, 1);
        for (isa_level l : levels) {
            auto y = make_outs(test::kGoldenRows, 1);
            simd::matmul_at(l, k.t)(w, a.x, y.y, 0, test::kGoldenRows, nullptr);
            for (int64_t r = 0; r < test::kGoldenRows; ++r) {
                double ref = 0.0, mag = 0.0;
                for (int64_t i = 0; i < test::kGoldenCols; ++i) {
                    const double p = static_cast<double>(deq[r * test::kGoldenCols + i]) * act[i];
                    ref += p;
                    mag += std::fabs(p);
                }
                EXPECT_NEAR(y.y.f32_row(0)[r], ref, 1e-6 * mag)
                    << k.name << " " << simd::level_name(l) << " row " << r;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// q8-activation family
// ---------------------------------------------------------------------------------------------

std::vector<float> random_floats(int64_t n, uint64_t seed) {
    std::vector<float> v(static_cast<size_t>(n));
    Rng rng(seed);
    for (auto& f : v) f = (2.0f * rng.uniform01() - 1.0f) * (rng.below(10) == 0 ? 30.0f : 1.0f);
    return v;
}

TEST(SimdQ8Act, ActivationConvertersMatchReferenceBytes) {
    for (isa_level l : simd_levels()) {
        for (ggml_type wt : {ggml_type::Q8_0, ggml_type::Q4_K, ggml_type::F16, ggml_type::BF16}) {
            for (int64_t n : {256, 4096}) {
                auto x = random_floats(n, 40 + n);
                x[3] = 0.5f;  // exact ties at the code boundary
                x[7] = -0.5f;
                std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
                for (const auto* src : {&x, &zeros}) {
                    std::vector<uint8_t> want(simd::act_row_bytes(wt, n)), got(want.size(), 0xCD);
                    simd::quantize_act(wt, src->data(), want.data(), n, isa_level::scalar);
                    simd::quantize_act(wt, src->data(), got.data(), n, l);
                    EXPECT_EQ(got, want) << level_tag(l, wt) << " n=" << n;
                }
            }
        }
        // Q8_K: +max and -max of equal magnitude: the first one sets the sign of the scale.
        std::vector<float> tie(256, 0.25f);
        tie[10] = -3.0f;
        tie[20] = 3.0f;
        std::vector<uint8_t> want(simd::act_row_bytes(ggml_type::Q4_K, 256)), got(want.size());
        quantize_row_q8_K(tie.data(), want.data(), 256);
        simd::quantize_act(ggml_type::Q4_K, tie.data(), got.data(), 256, l);
        EXPECT_EQ(got, want) << simd::level_name(l) << " Q8_K tie";
    }
}

TEST(SimdQ8Act, GoldenActivationsAreGgmlBytes) {
    const auto act = test::read_f32(test::golden_quants("activation.f32"));
    const auto n = static_cast<int64_t>(act.size());
    struct c {
        ggml_type wt;
        const char* file;
    };
    std::vector<isa_level> levels = simd_levels();
    levels.push_back(isa_level::scalar);
    for (isa_level l : levels) {
        for (const c& k :
             {c{ggml_type::Q8_0, "activation.q8_0.bin"}, c{ggml_type::Q2_K, "activation.q8_K.bin"},
              c{ggml_type::F16, "activation.f16.bin"}, c{ggml_type::BF16, "activation.bf16.bin"}}) {
            std::vector<uint8_t> got(simd::act_row_bytes(k.wt, n));
            simd::quantize_act(k.wt, act.data(), got.data(), n, l);
            EXPECT_EQ(got, test::read_file(test::golden_quants(k.file)))
                << k.file << " " << simd::level_name(l);
        }
    }
}

TEST(SimdQ8Act, GoldenDotProducts) {
    const auto act = test::read_f32(test::golden_quants("activation.f32"));
    const int64_t n = test::kGoldenCols;
    struct c {
        const char* name;
        ggml_type t;
        const char* act_file;
    };
    const c cases[] = {{"f16", ggml_type::F16, "activation.f16.bin"},
                       {"bf16", ggml_type::BF16, "activation.bf16.bin"},
                       {"q8_0", ggml_type::Q8_0, "activation.q8_0.bin"},
                       {"q4_k", ggml_type::Q4_K, "activation.q8_K.bin"},
                       {"q2_k", ggml_type::Q2_K, "activation.q8_K.bin"},
                       {"q4_k.imatrix", ggml_type::Q4_K, "activation.q8_K.bin"},
                       {"q2_k.imatrix", ggml_type::Q2_K, "activation.q8_K.bin"},
                       {"iq2_xxs.imatrix", ggml_type::IQ2_XXS, "activation.q8_K.bin"}};
    std::vector<isa_level> levels = simd_levels();
    levels.push_back(isa_level::scalar);
    for (const c& k : cases) {
        const auto bin = test::read_file(test::golden_quants(std::string(k.name) + ".bin"));
        const auto want = test::read_f32(test::golden_quants(std::string(k.name) + ".dot.f32"));
        const auto a = test::read_file(test::golden_quants(k.act_file));
        const size_t rb = row_bytes(k.t, n);
        for (isa_level l : levels) {
            const simd::vec_dot_fn dot = simd::vec_dot_at(l, k.t);
            ASSERT_NE(dot, nullptr);
            for (int64_t r = 0; r < test::kGoldenRows; ++r) {
                const uint8_t* wr = bin.data() + r * rb;
                const double tol = 1e-5 * abs_sum(k.t, wr, a.data(), n);
                EXPECT_NEAR(dot(wr, a.data(), n), want[r], tol)
                    << k.name << " " << simd::level_name(l) << " row " << r;
            }
        }
    }
}

TEST(SimdQ8Act, EveryLevelMatchesReferenceDot) {
    for (isa_level l : simd_levels()) {
        for (ggml_type t : kTypes) {
            for (int64_t n : lengths_for(t)) {
                if (n % type_traits_of(t).block_elems != 0) continue;
                const int64_t n_out = 9, n_tok = 5;
                auto w = random_weights(t, n, n_out, 300 + n);
                auto a = random_acts(n, n_tok, 301 + n);
                const size_t stride = simd::act_row_bytes(t, n) + 8;
                std::vector<uint8_t> q(stride * n_tok);
                for (int64_t k = 0; k < n_tok; ++k)
                    simd::quantize_act(t, a.x.f32_row(k), q.data() + k * stride, n, l);
                auto y = make_outs(n_out, n_tok);
                simd::q8_matmul_at(l, t)(w.w, q.data(), stride, y.y, 0, n_out);
                for (int64_t r = 0; r < n_out; ++r) {
                    for (int64_t k = 0; k < n_tok; ++k) {
                        const uint8_t* ak = q.data() + k * stride;
                        const float ref = dot_row_ref(t, w.w.row_ptr(r), ak, n);
                        const double tol = 2e-6 * abs_sum(t, w.w.row_ptr(r), ak, n) + 1e-30;
                        EXPECT_NEAR(y.y.f32_row(k)[r], ref, tol) << level_tag(l, t) << " n=" << n;
                        EXPECT_NEAR(simd::vec_dot_at(l, t)(w.w.row_ptr(r), ak, n), ref, tol)
                            << level_tag(l, t);
                    }
                }
            }
        }
    }
}

TEST(SimdQ8Act, PoolDriverEqualsRowKernel) {
    thread_pool pool(2);
    for (isa_level l : simd_levels()) {
        for (ggml_type t :
             {ggml_type::Q8_0, ggml_type::Q4_K, ggml_type::IQ2_XXS, ggml_type::MXFP4}) {
            const int64_t n = 512, n_out = 50, n_tok = 3;
            auto w = random_weights(t, n, n_out, 77);
            auto a = random_acts(n, n_tok, 78, 4);
            std::vector<uint8_t> q(simd::act_row_bytes(t, n) * n_tok);
            auto y = make_outs(n_out, n_tok);
            simd::q8_matmul(pool, w.w, a.x, y.y, q.data(), l);
            for (int64_t k = 0; k < n_tok; ++k) {
                for (int64_t r = 0; r < n_out; ++r) {
                    EXPECT_EQ(y.y.f32_row(k)[r],
                              simd::vec_dot_at(l, t)(w.w.row_ptr(r),
                                                     q.data() + k * simd::act_row_bytes(t, n), n));
                }
            }
        }
    }
}

// The q8 family's matrix kernels group rows (decode) and rows x tokens (prefill) into tiles
// that share loads; every (row, token) accumulator sees the same operations as a lone vec_dot,
// so tiles, remainders and row ranges must give vec_dot's bits exactly, and the reference dot
// within float summation order.
// The IQ2_XXS kernels' compile-time sign table: byte j of pattern i is -1 exactly where bit j of
// iq2_ksign(i) is set (bit 7 the parity of the 7 stored bits), +1 elsewhere.
TEST(SimdQ8Act, Iq2xxsSignBytesFollowKsign) {
    for (uint32_t i = 0; i < 128; ++i) {
        int negatives = 0;
        for (int j = 0; j < 8; ++j) {
            const auto b = static_cast<int8_t>((kIq2xxsSignBytes.v[i] >> (8 * j)) & 0xFF);
            const bool neg = j < 7 ? ((i >> j) & 1) != 0 : ((iq2_ksign(i) >> 7) & 1) != 0;
            EXPECT_EQ(b, neg ? -1 : 1) << "pattern " << i << " byte " << j;
            negatives += b < 0;
        }
        EXPECT_EQ(negatives % 2, 0) << "pattern " << i;
    }
}

TEST(SimdQ8Act, TilesEqualVecDotBitForBit) {
    for (isa_level l : simd_levels()) {
        for (ggml_type t : kTypes) {
            const int64_t n = type_traits_of(t).block_elems == 1 ? 100 : 512;
            if (n % type_traits_of(t).block_elems != 0) continue;
            for (int64_t n_out : {1, 3, 4, 13, 37}) {
                for (int64_t n_tok : {1, 2, 3, 5, 8, 17}) {
                    auto w = random_weights(t, n, n_out, 900 + n_out, 16);
                    auto a = random_acts(n, n_tok, 901 + n_tok);
                    const size_t stride = simd::act_row_bytes(t, n) + 32;
                    std::vector<uint8_t> q(stride * n_tok);
                    for (int64_t k = 0; k < n_tok; ++k)
                        simd::quantize_act(t, a.x.f32_row(k), q.data() + k * stride, n, l);
                    auto y = make_outs(n_out, n_tok);
                    // Two calls split at an odd row: ranges that cut across tiles.
                    const int64_t cut = n_out / 2 | 1;
                    const simd::q8_matmul_fn fn = simd::q8_matmul_at(l, t);
                    fn(w.w, q.data(), stride, y.y, 0, std::min(cut, n_out));
                    if (cut < n_out) fn(w.w, q.data(), stride, y.y, cut, n_out);
                    const simd::vec_dot_fn dot = simd::vec_dot_at(l, t);
                    for (int64_t k = 0; k < n_tok; ++k) {
                        const uint8_t* ak = q.data() + k * stride;
                        for (int64_t r = 0; r < n_out; ++r) {
                            const float got = y.y.f32_row(k)[r];
                            ASSERT_EQ(got, dot(w.w.row_ptr(r), ak, n))
                                << level_tag(l, t) << " rows " << n_out << " tokens " << n_tok
                                << " row " << r << " token " << k;
                            const float ref = dot_row_ref(t, w.w.row_ptr(r), ak, n);
                            EXPECT_NEAR(got, ref, 2e-6 * abs_sum(t, w.w.row_ptr(r), ak, n) + 1e-30)
                                << level_tag(l, t);
                        }
                        // Output gaps untouched.
                        EXPECT_EQ(y.data[static_cast<size_t>(k * (n_out + 3) + n_out)], -7.0f);
                    }
                }
            }
        }
    }
}

// Extreme codes: weights and activations at the ends of their ranges, where int16
// intermediate sums are closest to saturating.
TEST(SimdQ8Act, ExtremeValuesMatchReference) {
    for (isa_level l : simd_levels()) {
        for (ggml_type t : {ggml_type::Q8_0, ggml_type::Q4_K, ggml_type::Q2_K, ggml_type::IQ2_XXS,
                            ggml_type::MXFP4}) {
            const int64_t n = 512, n_out = 6, n_tok = 3;
            auto w = random_weights(t, n, n_out, 1200);
            // Saturate every code byte (keeps the block scales of the random fill).
            const size_t rb = row_bytes(t, n);
            for (int64_t r = 0; r < n_out; ++r) {
                uint8_t* p = w.w.row_ptr(r);
                const int64_t nb = n / type_traits_of(t).block_elems;
                const size_t bb = rb / static_cast<size_t>(nb);
                for (int64_t b = 0; b < nb; ++b) {
                    uint8_t* blk = p + static_cast<size_t>(b) * bb;
                    if (t == ggml_type::Q8_0) {
                        std::memset(blk + 2, r % 2 ? 0x81 : 0x7F, bb - 2);  // -127 / 127
                    } else if (t == ggml_type::Q4_K) {
                        std::memset(blk + 4 + 12, 0xFF, 128);  // codes 15
                        std::memset(blk + 4, 0xFF, 12);        // scales / mins 63
                    } else if (t == ggml_type::Q2_K) {
                        std::memset(blk, 0xFF, 16 + 64);  // scales, mins 15; codes 3
                    } else if (t == ggml_type::MXFP4) {
                        std::memset(blk + 1, r % 2 ? 0xFF : 0x77, bb - 1);  // -12 / 12
                    } else {
                        std::memset(blk + 2, r % 2 ? 0xFF : 0x00, bb - 2);
                    }
                }
            }
            std::vector<float> xs(static_cast<size_t>(n * n_tok));
            for (int64_t i = 0; i < n * n_tok; ++i) xs[i] = (i / 7) % 2 ? 1.0f : -1.0f;
            const tensor x = make_tensor(xs.data(), ggml_type::F32, n, n_tok);
            const size_t stride = simd::act_row_bytes(t, n);
            std::vector<uint8_t> q(stride * n_tok);
            for (int64_t k = 0; k < n_tok; ++k)
                simd::quantize_act(t, x.f32_row(k), q.data() + k * stride, n, l);
            auto y = make_outs(n_out, n_tok);
            simd::q8_matmul_at(l, t)(w.w, q.data(), stride, y.y, 0, n_out);
            for (int64_t k = 0; k < n_tok; ++k) {
                for (int64_t r = 0; r < n_out; ++r) {
                    const uint8_t* ak = q.data() + k * stride;
                    const float ref = dot_row_ref(t, w.w.row_ptr(r), ak, n);
                    EXPECT_NEAR(y.y.f32_row(k)[r], ref,
                                2e-6 * abs_sum(t, w.w.row_ptr(r), ak, n) + 1e-30)
                        << level_tag(l, t) << " row " << r;
                }
            }
        }
    }
}

}  // namespace
}  // namespace magnetar
