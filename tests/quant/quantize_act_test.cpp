// Activation quantizers (byte-exact with GGML) and the scalar reference dot products (equal
// to GGML's CPU dot products up to float summation order).
#include "quant/quantize_act.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "golden.h"
#include "quant/blocks.h"
#include "quant/dot_ref.h"
#include "quant/types.h"

namespace magnetar {
namespace {

using test::golden_quants;
using test::kGoldenCols;
using test::kGoldenRows;

void expect_bytes_equal(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                        size_t block_bytes, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << what << ": first mismatch at byte " << i << " (block "
                                   << i / block_bytes << ", offset " << i % block_bytes << ")";
    }
}

TEST(QuantizeAct, Q8_0MatchesGgml) {
    const auto act = test::read_f32(golden_quants("activation.f32"));
    const auto want = test::read_file(golden_quants("activation.q8_0.bin"));
    const auto n = static_cast<int64_t>(act.size());
    std::vector<uint8_t> got(row_bytes(ggml_type::Q8_0, n));
    quantize_row_q8_0(act.data(), got.data(), n);
    expect_bytes_equal(got, want, sizeof(block_q8_0), "activation.q8_0.bin");
}

TEST(QuantizeAct, Q8_KMatchesGgml) {
    const auto act = test::read_f32(golden_quants("activation.f32"));
    const auto want = test::read_file(golden_quants("activation.q8_K.bin"));
    const auto n = static_cast<int64_t>(act.size());
    std::vector<uint8_t> got(row_bytes(ggml_type::Q8_K, n));
    quantize_row_q8_K(act.data(), got.data(), n);
    expect_bytes_equal(got, want, sizeof(block_q8_K), "activation.q8_K.bin");
}

// The golden rows include an all-zero row and rows of tiny values: both quantizers must give
// zero scales and codes there, and never produce codes outside [-127, 127].
TEST(QuantizeAct, ZeroAndExtremeBlocks) {
    std::vector<float> x(QK_K, 0.0f);
    std::vector<uint8_t> q8_0(row_bytes(ggml_type::Q8_0, QK_K), 0xAB);
    std::vector<uint8_t> q8_k(row_bytes(ggml_type::Q8_K, QK_K), 0xAB);
    quantize_row_q8_0(x.data(), q8_0.data(), QK_K);
    quantize_row_q8_K(x.data(), q8_k.data(), QK_K);
    for (uint8_t b : q8_0) EXPECT_EQ(b, 0);
    for (uint8_t b : q8_k) EXPECT_EQ(b, 0);

    // Q8_0 maps the largest magnitude to +-127 with d > 0. Q8_K divides by -max (max keeps its
    // sign), so a positive maximum becomes the code -127 with a negative d.
    for (int i = 0; i < QK_K; ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
    x[5] = 100.0f;
    quantize_row_q8_0(x.data(), q8_0.data(), QK_K);
    quantize_row_q8_K(x.data(), q8_k.data(), QK_K);
    const auto* b0 = reinterpret_cast<const block_q8_0*>(q8_0.data());
    const auto* bk = reinterpret_cast<const block_q8_K*>(q8_k.data());
    EXPECT_EQ(b0[0].qs[5], 127);
    EXPECT_EQ(bk[0].qs[5], -127);
    EXPECT_FLOAT_EQ(bk[0].d, -100.0f / 127.0f);
    for (int g = 0; g < QK_K / 16; ++g) {
        int sum = 0;
        for (int l = 0; l < 16; ++l) sum += bk[0].qs[16 * g + l];
        EXPECT_EQ(bk[0].bsums[g], sum);
    }
}

// The golden activation happens to contain no exact rounding ties, so it cannot tell GGML's
// x86 Q8_0 path (ties to even) from quantize_row_q8_0_ref (roundf, ties away from zero). We
// follow the x86 path, which is also what SIMD conversions do natively; this pins it.
TEST(QuantizeAct, TiesRoundToEven) {
    std::vector<float> x(QK_K, 0.0f);
    x[0] = 127.0f;  // amax 127: Q8_0 scale 1, Q8_K scale -1 (codes are negated)
    const float ties[] = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 126.5f};
    const int even[] = {0, 2, 2, 0, -2, 126};
    for (int i = 0; i < 6; ++i) x[1 + i] = ties[i];
    std::vector<uint8_t> q8_0(row_bytes(ggml_type::Q8_0, QK_K));
    std::vector<uint8_t> q8_k(row_bytes(ggml_type::Q8_K, QK_K));
    quantize_row_q8_0(x.data(), q8_0.data(), QK_K);
    quantize_row_q8_K(x.data(), q8_k.data(), QK_K);
    const auto* b0 = reinterpret_cast<const block_q8_0*>(q8_0.data());
    const auto* bk = reinterpret_cast<const block_q8_K*>(q8_k.data());
    EXPECT_EQ(b0[0].d, 0x3c00u);  // fp16 1.0
    EXPECT_EQ(bk[0].d, -1.0f);
    for (int i = 0; i < 6; ++i) {
        EXPECT_EQ(b0[0].qs[1 + i], even[i]) << "Q8_0 input " << ties[i];
        EXPECT_EQ(bk[0].qs[1 + i], -even[i]) << "Q8_K input " << ties[i];
    }
}

struct dot_case {
    const char* name;  // file stem in golden/quants
    ggml_type type;
};

void PrintTo(const dot_case& c, std::ostream* os) {
    *os << c.name;
}

const char* partner_file(ggml_type t) {
    switch (dot_partner_type(t)) {
        case ggml_type::Q8_0:
            return "activation.q8_0.bin";
        case ggml_type::Q8_K:
            return "activation.q8_K.bin";
        case ggml_type::F16:
            return "activation.f16.bin";
        case ggml_type::BF16:
            return "activation.bf16.bin";
        default:
            return nullptr;
    }
}

class GoldenDot : public ::testing::TestWithParam<dot_case> {};

// Tolerance: relative 1e-5 of sum |w_i * a_i| (golden README), computed from the dequantized
// weight and dequantized activation.
TEST_P(GoldenDot, MatchesGgmlWithinSummationOrder) {
    const dot_case& c = GetParam();
    const ggml_type at = dot_partner_type(c.type);
    const auto w = test::read_file(golden_quants(std::string(c.name) + ".bin"));
    const auto act = test::read_file(golden_quants(partner_file(c.type)));
    const auto want = test::read_f32(golden_quants(std::string(c.name) + ".dot.f32"));
    const size_t rb = row_bytes(c.type, kGoldenCols);
    ASSERT_EQ(w.size(), rb * kGoldenRows);
    ASSERT_EQ(act.size(), row_bytes(at, kGoldenCols));
    ASSERT_EQ(want.size(), static_cast<size_t>(kGoldenRows));

    std::vector<float> a_deq(kGoldenCols), w_deq(kGoldenCols);
    to_float_of(at)(act.data(), a_deq.data(), kGoldenCols);
    for (int64_t r = 0; r < kGoldenRows; ++r) {
        const uint8_t* row = w.data() + r * rb;
        to_float_of(c.type)(row, w_deq.data(), kGoldenCols);
        double abs_sum = 0.0;
        for (int64_t i = 0; i < kGoldenCols; ++i)
            abs_sum += std::fabs(static_cast<double>(w_deq[i]) * a_deq[i]);
        const float got = dot_row_ref(c.type, row, act.data(), kGoldenCols);
        EXPECT_TRUE(std::isfinite(got)) << "row " << r;
        EXPECT_LE(std::fabs(static_cast<double>(got) - want[r]), 1e-5 * abs_sum)
            << c.name << " row " << r << ": got " << got << ", GGML " << want[r] << ", sum|w*a| "
            << abs_sum;
    }
}

INSTANTIATE_TEST_SUITE_P(
    AllGoldenFiles, GoldenDot,
    ::testing::Values(dot_case{"f16", ggml_type::F16}, dot_case{"bf16", ggml_type::BF16},
                      dot_case{"q8_0", ggml_type::Q8_0}, dot_case{"q2_k", ggml_type::Q2_K},
                      dot_case{"q4_k", ggml_type::Q4_K}, dot_case{"q2_k.imatrix", ggml_type::Q2_K},
                      dot_case{"q4_k.imatrix", ggml_type::Q4_K},
                      dot_case{"iq2_xxs.imatrix", ggml_type::IQ2_XXS}),
    [](const ::testing::TestParamInfo<dot_case>& info) {
        std::string s = info.param.name;
        for (char& ch : s) {
            if (ch == '.') ch = '_';
        }
        return s;
    });

// F32 has no golden dot file: compare with a double-precision sum over the golden input.
TEST(DotRef, F32MatchesDoubleSum) {
    const auto w = test::read_f32(golden_quants("input.f32"));
    const auto act = test::read_f32(golden_quants("activation.f32"));
    for (int64_t r = 0; r < kGoldenRows; ++r) {
        const float* row = w.data() + r * kGoldenCols;
        double sum = 0.0, abs_sum = 0.0;
        for (int64_t i = 0; i < kGoldenCols; ++i) {
            sum += static_cast<double>(row[i]) * act[i];
            abs_sum += std::fabs(static_cast<double>(row[i]) * act[i]);
        }
        const float got = dot_row_ref(ggml_type::F32, row, act.data(), kGoldenCols);
        EXPECT_LE(std::fabs(got - sum), 1e-6 * abs_sum + 1e-30) << "row " << r;
    }
}

TEST(DotRef, PartnerTypes) {
    EXPECT_EQ(dot_partner_type(ggml_type::F32), ggml_type::F32);
    EXPECT_EQ(dot_partner_type(ggml_type::F16), ggml_type::F16);
    EXPECT_EQ(dot_partner_type(ggml_type::BF16), ggml_type::BF16);
    EXPECT_EQ(dot_partner_type(ggml_type::Q8_0), ggml_type::Q8_0);
    EXPECT_EQ(dot_partner_type(ggml_type::Q2_K), ggml_type::Q8_K);
    EXPECT_EQ(dot_partner_type(ggml_type::Q4_K), ggml_type::Q8_K);
    EXPECT_EQ(dot_partner_type(ggml_type::IQ2_XXS), ggml_type::Q8_K);
}

}  // namespace
}  // namespace magnetar
