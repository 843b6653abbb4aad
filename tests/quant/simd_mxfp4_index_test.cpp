// SIMD kernels on MXFP4 at every exponent byte (both activation families, against the scalar
// twin and dequantize_row_mxfp4), the indexer scores against their definition, the emulated
// AVX-512 level and the benchmark's peak loops. The f32- and q8-activation families are in
// simd_kernels_test.cpp.
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
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/dot_ref.h"
#include "quant/fp16.h"
#include "quant/quantize_act.h"
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

// ---------------------------------------------------------------------------------------------
// MXFP4: every exponent byte, in both families
// ---------------------------------------------------------------------------------------------

// dequantize_row_mxfp4 scales by 2^(e - 128) for every byte, 0xFF included (2^127, GGML's
// E8M0_TO_FP32_HALF, not the OCP NaN); values of 2^128 and more are infinities. A code is
// "finite" at exponent e when its doubled value is below 2^(256 - e).
bool mxfp4_code_finite(int code, int e) {
    const int v = std::abs(static_cast<int>(kMxfp4Values[code]));
    return e < 252 || v < (1 << (256 - e));
}

// A row of n / 32 blocks, block k with exponent e(k); codes random, or only finite ones.
void fill_mxfp4_row(Rng& rng, block_mxfp4* b, int64_t nb, int (*e_of)(int64_t, int64_t),
                    int64_t row, bool finite_only) {
    for (int64_t k = 0; k < nb; ++k) {
        const int e = e_of(row, k);
        b[k].e = static_cast<uint8_t>(e);
        for (int j = 0; j < 16; ++j) {
            uint8_t nib[2];
            for (uint8_t& c : nib) {
                do {
                    c = static_cast<uint8_t>(rng.below(16));
                } while (finite_only && !mxfp4_code_finite(c, e));
            }
            b[k].qs[j] = static_cast<uint8_t>(nib[0] | nib[1] << 4);
        }
    }
}

weights mxfp4_weights(int64_t n_in, int64_t n_out, int (*e_of)(int64_t, int64_t), bool finite_only,
                      uint64_t seed) {
    weights out;
    const size_t rb = row_bytes(ggml_type::MXFP4, n_in);
    out.bytes.assign(rb * static_cast<size_t>(n_out) + 64, 0xA5);
    Rng rng(seed);
    for (int64_t r = 0; r < n_out; ++r) {
        fill_mxfp4_row(rng, reinterpret_cast<block_mxfp4*>(out.bytes.data() + r * rb),
                       n_in / QK_MXFP4, e_of, r, finite_only);
    }
    out.w = make_tensor(out.bytes.data(), ggml_type::MXFP4, n_in, n_out);
    return out;
}

// 32 rows x 8 blocks: block k of row r has exponent 8r + k, so the matrix holds every byte.
int every_exponent(int64_t r, int64_t k) {
    return static_cast<int>(8 * r + k);
}

// One-hot activations read the dequantized weights back through the kernels: y[t][o] =
// w[o][t] exactly (one product by 1, every other product a zero). Every level, decode and
// prefill, must reproduce dequantize_row_mxfp4 bit for bit, subnormals and 2^127 included.
TEST(SimdMxfp4, KernelsDequantizeEveryExponentAndCode) {
    const int64_t n_in = 256, n_out = 32, n_tok = n_in;
    auto w = mxfp4_weights(n_in, n_out, every_exponent, /*finite_only=*/true, 3);
    for (int64_t r = 0; r < n_out; ++r) {
        auto* b = reinterpret_cast<block_mxfp4*>(w.w.row_ptr(r));
        for (int64_t k = 0; k < n_in / QK_MXFP4; ++k) b[k].qs[0] = 0x91;
    }
    std::vector<float> deq(static_cast<size_t>(n_in * n_out));
    for (int64_t r = 0; r < n_out; ++r)
        dequantize_row_mxfp4(w.w.row_ptr(r), deq.data() + r * n_in, n_in);
    acts a;
    a.data.assign(static_cast<size_t>(n_in * n_tok), 0.0f);
    for (int64_t t = 0; t < n_tok; ++t) a.data[static_cast<size_t>(t * n_in + t)] = 1.0f;
    a.x = make_tensor(a.data.data(), ggml_type::F32, n_in, n_tok);
    std::vector<isa_level> levels = simd_levels();
    levels.push_back(isa_level::scalar);
    for (isa_level l : levels) {
        const simd::matmul_fn fn = simd::matmul_at(l, ggml_type::MXFP4);
        ASSERT_NE(fn, nullptr);
        auto prefill = make_outs(n_out, n_tok);
        fn(w.w, a.x, prefill.y, 0, n_out, nullptr);
        auto decode = make_outs(n_out, n_tok);
        for (int64_t t = 0; t < n_tok; ++t) {
            tensor yt = decode.y;
            yt.data = decode.y.row_ptr(t);
            yt.ne[1] = 1;
            fn(w.w, view_rows(a.x, t, 1), yt, 0, n_out, nullptr);
        }
        for (const outs* o : {&prefill, &decode}) {
            for (int64_t t = 0; t < n_tok; ++t) {
                for (int64_t r = 0; r < n_out; ++r) {
                    const float want = deq[static_cast<size_t>(r * n_in + t)];
                    const float got = o->y.f32_row(t)[r];
                    uint32_t gb, wb;
                    std::memcpy(&gb, &got, 4);
                    std::memcpy(&wb, &want, 4);
                    ASSERT_EQ(gb, wb)
                        << simd::level_name(l) << " row " << r << " element " << t << " exponent "
                        << every_exponent(r, t / 32) << " got " << got << " want " << want;
                }
            }
        }
    }
    // The scale ends: element 0 of each block is code 1 (+1 x scale), element 16 code 9.
    EXPECT_EQ(deq[0], 0x1p-128f);                                       // e = 0: subnormal 2^-128
    EXPECT_EQ(deq[32], 0x1p-127f);                                      // e = 1
    EXPECT_EQ(deq[64 + 16], -0x1p-126f);                                // e = 2
    EXPECT_EQ(deq[static_cast<size_t>(31 * n_in + 7 * 32)], 0x1p127f);  // e = 255: not NaN
}

// Every exponent byte with every code (infinities where the value overflows): each level equals
// the scalar twin bit for bit, or both are NaN (infinities of both signs in one dot).
TEST(SimdMxfp4, EveryLevelEqualsTwinAtEveryExponent) {
    const int64_t n_in = 256, n_out = 32;
    auto w = mxfp4_weights(n_in, n_out, every_exponent, /*finite_only=*/false, 4);
    for (isa_level l : simd_levels()) {
        for (int64_t n_tok : {1, 3, 17}) {
            auto a = random_acts(n_in, n_tok, 50 + n_tok, 2);
            auto want = make_outs(n_out, n_tok);
            auto got = make_outs(n_out, n_tok);
            simd::matmul_at(isa_level::scalar, ggml_type::MXFP4)(w.w, a.x, want.y, 0, n_out,
                                                                 nullptr);
            simd::matmul_at(l, ggml_type::MXFP4)(w.w, a.x, got.y, 0, n_out, nullptr);
            int n_special = 0;
            for (size_t i = 0; i < got.data.size(); ++i) {
                const float g = got.data[i], e = want.data[i];
                if (!std::isfinite(e)) ++n_special;
                if (std::isnan(g) && std::isnan(e)) continue;
                uint32_t gb, eb;
                std::memcpy(&gb, &g, 4);
                std::memcpy(&eb, &e, 4);
                ASSERT_EQ(gb, eb) << simd::level_name(l) << " n_tok " << n_tok << " element " << i
                                  << " got " << g << " want " << e;
            }
            // The exponents near 255 overflow: the comparison covers infinities and NaN.
            EXPECT_GT(n_special, 0) << simd::level_name(l);
        }
    }
}

// q8 family at every exponent byte: rows with exponents 0-127 against activations near 2^13,
// rows with 128-255 against activations near 2^-14 (the Q8_0 scale is fp16, so the product of
// the two scales stays a normal float and the sums finite); codes that would dequantize to
// infinity left out so the tolerance (from the dequantized rows) is finite. Tiles equal vec_dot
// bit for bit; vec_dot equals the reference within float summation order.
TEST(SimdMxfp4, Q8FamilyAtEveryExponent) {
    const int64_t n = 256, n_out = 128, n_tok = 5;
    for (const bool high : {false, true}) {
        int (*e_of)(int64_t, int64_t) =
            high ? +[](int64_t r, int64_t) { return static_cast<int>(128 + r); }
                 : +[](int64_t r, int64_t) { return static_cast<int>(r); };
        auto w = mxfp4_weights(n, n_out, e_of, /*finite_only=*/true, high ? 6 : 5);
        auto a = random_acts(n, n_tok, 7);
        const float scale = high ? 0x1p-14f : 0x1p13f;
        for (float& v : a.data) v *= scale;
        for (isa_level l : simd_levels()) {
            const size_t stride = simd::act_row_bytes(ggml_type::MXFP4, n);
            std::vector<uint8_t> q(stride * n_tok);
            for (int64_t k = 0; k < n_tok; ++k)
                simd::quantize_act(ggml_type::MXFP4, a.x.f32_row(k), q.data() + k * stride, n, l);
            const simd::vec_dot_fn dot = simd::vec_dot_at(l, ggml_type::MXFP4);
            auto prefill = make_outs(n_out, n_tok);
            simd::q8_matmul_at(l, ggml_type::MXFP4)(w.w, q.data(), stride, prefill.y, 0, n_out);
            for (int64_t k = 0; k < n_tok; ++k) {
                const uint8_t* ak = q.data() + k * stride;
                auto decode = make_outs(n_out, 1);
                simd::q8_matmul_at(l, ggml_type::MXFP4)(w.w, ak, stride, decode.y, 0, n_out);
                for (int64_t r = 0; r < n_out; ++r) {
                    const float want = dot(w.w.row_ptr(r), ak, n);
                    ASSERT_TRUE(std::isfinite(want)) << "row " << r;
                    ASSERT_EQ(prefill.y.f32_row(k)[r], want)
                        << simd::level_name(l) << " prefill, exponent " << e_of(r, 0);
                    ASSERT_EQ(decode.y.f32_row(0)[r], want)
                        << simd::level_name(l) << " decode, exponent " << e_of(r, 0);
                    const float ref = dot_row_ref(ggml_type::MXFP4, w.w.row_ptr(r), ak, n);
                    const double mag = abs_sum(ggml_type::MXFP4, w.w.row_ptr(r), ak, n);
                    ASSERT_GT(mag, 0.0);
                    EXPECT_NEAR(want, ref, 2e-6 * mag)
                        << simd::level_name(l) << " exponent " << e_of(r, 0);
                }
            }
        }
    }
}

// The benchmark's arithmetic-ceiling loops (simd::peak_int8 / peak_f32) report work in
// proportion to their rounds and compute the same value on every call, so the bench's dot
// throughput is a count of work done, not of calls.
// The indexer's scores: the scalar twin against the definition (dot_f32 per head, heads summed
// in order), and every SIMD level against the twin, bit for bit: head counts odd and even, row
// lengths with and without a tail after the last 16, odd key counts, padded key rows.
TEST(SimdIndex, ScoresEqualTheDefinitionBitForBit) {
    Rng rng(77);
    auto normal = [&] { return rng.normal(); };
    std::vector<isa_level> levels = simd_levels();
    const simd::index_scores_fn twin = simd::index_scores_at(isa_level::scalar);
    ASSERT_NE(twin, nullptr);
    ASSERT_NE(simd::index_scores(), nullptr);
    for (int64_t hd : {128, 64, 33, 16, 7}) {
        for (int64_t nh : {64, 3, 2, 1}) {
            for (int64_t n : {1, 2, 3, 17}) {
                const int64_t stride = hd + 5;
                std::vector<float> q(static_cast<size_t>(nh * hd)), w(static_cast<size_t>(nh));
                std::vector<float> keys(static_cast<size_t>(n * stride),
                                        std::numeric_limits<float>::quiet_NaN());
                for (float& v : q) v = normal();
                for (float& v : w) v = normal();
                for (int64_t s = 0; s < n; ++s) {
                    for (int64_t i = 0; i < hd; ++i) keys[s * stride + i] = normal();
                }
                const float scale = 0.0883883f;
                std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
                for (int64_t s = 0; s < n; ++s) {
                    float acc = 0.0f;
                    for (int64_t h = 0; h < nh; ++h) {
                        const float d =
                            cpu::dot_f32(q.data() + h * hd, keys.data() + s * stride, hd);
                        acc += (w[h] * scale) * std::max(d, 0.0f);
                    }
                    want[s] = acc;
                }
                twin(q.data(), w.data(), scale, nh, hd, keys.data(), stride, n, got.data());
                const std::string tag = "hd " + std::to_string(hd) + " heads " +
                                        std::to_string(nh) + " keys " + std::to_string(n);
                for (int64_t s = 0; s < n; ++s) {
                    ASSERT_EQ(f32_to_bits(got[s]), f32_to_bits(want[s])) << "scalar " << tag;
                }
                for (isa_level l : levels) {
                    std::fill(got.begin(), got.end(), -1.0f);
                    simd::index_scores_at(l)(q.data(), w.data(), scale, nh, hd, keys.data(), stride,
                                             n, got.data());
                    for (int64_t s = 0; s < n; ++s) {
                        ASSERT_EQ(f32_to_bits(got[s]), f32_to_bits(want[s]))
                            << simd::level_name(l) << " " << tag << " key " << s;
                    }
                }
            }
        }
    }
}

#if defined(MAGNETAR_TEST_EMULATED_AVX512)
// The emulated-AVX-512 build (test_simd_emu512) must really run the AVX-512 level wherever AVX2
// runs, or every test of this executable would pass without touching it.
TEST(SimdEmulated, Avx512LevelRunsWhereAvx2Does) {
    if (!simd::cpu_supports(isa_level::avx2)) GTEST_SKIP() << "no AVX2: nothing to emulate on";
    EXPECT_TRUE(simd::cpu_supports(isa_level::avx512));
    EXPECT_NE(simd::q8_matmul_at(isa_level::avx512, ggml_type::IQ2_XXS), nullptr);
}
#endif

TEST(SimdPeak, LoopsCountTheirWork) {
    for (auto fn : {simd::peak_int8, simd::peak_f32}) {
        uint64_t m1 = 0, m2 = 0, m3 = 0;
        const uint64_t a = fn(1000, &m1);
        const uint64_t b = fn(2000, &m2);
        const uint64_t c = fn(1000, &m3);
        EXPECT_GT(m1, 0u);
        EXPECT_EQ(m1 % 1000, 0u);
        EXPECT_EQ(m2, 2 * m1);
        EXPECT_EQ(m3, m1);
        EXPECT_EQ(a, c);  // deterministic
        (void)b;
    }
}

}  // namespace
}  // namespace magnetar
