// Weight quantizers: reconstruction error on the golden input rows no worse than GGML's (by at
// most 2 % per row, weighted by the golden importance matrix where GGML used it), plus
// round-trip sanity on random rows.
#include "quant/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "golden.h"
#include "quant/blocks.h"
#include "quant/iq2_tables.h"
#include "quant/types.h"

namespace magnetar {
namespace {

using test::golden_quants;
using test::kGoldenCols;
using test::kGoldenRows;

double row_error(const float* x, const float* y, const float* w, int64_t n) {
    double e = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(x[i]) - y[i];
        e += (w ? w[i] : 1.0f) * d * d;
    }
    return e;
}

struct golden_case {
    const char* name;
    ggml_type type;
    bool imatrix;
};

void PrintTo(const golden_case& c, std::ostream* os) {
    *os << c.name;
}

class QuantizeGolden : public ::testing::TestWithParam<golden_case> {};

TEST_P(QuantizeGolden, ErrorWithinTwoPercentOfGgml) {
    const golden_case& c = GetParam();
    const auto input = test::read_f32(golden_quants("input.f32"));
    const auto imatrix = test::read_f32(golden_quants("imatrix.f32"));
    const auto ggml = test::read_f32(golden_quants(std::string(c.name) + ".dequant.f32"));
    ASSERT_EQ(input.size(), static_cast<size_t>(kGoldenRows * kGoldenCols));
    const float* qw = c.imatrix ? imatrix.data() : nullptr;

    const size_t rb = row_bytes(c.type, kGoldenCols);
    std::vector<uint8_t> q(rb * kGoldenRows);
    ASSERT_EQ(quantize_rows(c.type, input.data(), q.data(), kGoldenRows, kGoldenCols, qw),
              q.size());
    std::vector<float> ours(static_cast<size_t>(kGoldenCols));
    double sum_ours = 0, sum_ggml = 0;
    for (int64_t r = 0; r < kGoldenRows; ++r) {
        to_float_of(c.type)(q.data() + r * rb, ours.data(), kGoldenCols);
        const float* x = input.data() + r * kGoldenCols;
        const double e_ours = row_error(x, ours.data(), qw, kGoldenCols);
        const double e_ggml = row_error(x, ggml.data() + r * kGoldenCols, qw, kGoldenCols);
        sum_ours += e_ours;
        sum_ggml += e_ggml;
        EXPECT_LE(e_ours, 1.02 * e_ggml + 1e-30)
            << c.name << " row " << r << " (ours " << e_ours << ", GGML " << e_ggml << ")";
    }
    RecordProperty("error_ratio_total", std::to_string(sum_ours / sum_ggml));
}

INSTANTIATE_TEST_SUITE_P(GoldenInput, QuantizeGolden,
                         ::testing::Values(golden_case{"q8_0", ggml_type::Q8_0, false},
                                           golden_case{"q4_k", ggml_type::Q4_K, false},
                                           golden_case{"q2_k", ggml_type::Q2_K, false},
                                           golden_case{"q4_k.imatrix", ggml_type::Q4_K, true},
                                           golden_case{"q2_k.imatrix", ggml_type::Q2_K, true},
                                           golden_case{"iq2_xxs.imatrix", ggml_type::IQ2_XXS, true},
                                           golden_case{"f16", ggml_type::F16, false},
                                           golden_case{"bf16", ggml_type::BF16, false}),
                         [](const ::testing::TestParamInfo<golden_case>& info) {
                             std::string s = info.param.name;
                             for (char& ch : s) {
                                 if (ch == '.') ch = '_';
                             }
                             return s;
                         });

// The ports follow GGML's algorithms step by step and currently reproduce its bytes exactly.
// Not a format requirement (the error bound above is): a deliberate change to the search may
// drop this check, an accidental one should not.
TEST_P(QuantizeGolden, CurrentlyReproducesGgmlBytes) {
    const golden_case& c = GetParam();
    const auto input = test::read_f32(golden_quants("input.f32"));
    const auto imatrix = test::read_f32(golden_quants("imatrix.f32"));
    const auto want = test::read_file(golden_quants(std::string(c.name) + ".bin"));
    std::vector<uint8_t> got(want.size());
    quantize_rows(c.type, input.data(), got.data(), kGoldenRows, kGoldenCols,
                  c.imatrix ? imatrix.data() : nullptr);
    EXPECT_EQ(got, want) << c.name;
}

TEST(Quantize, RandomRowsRoundTrip) {
    // Relative RMS reconstruction error of gaussian rows, per type: loose upper bounds that
    // catch a broken packing (which gives errors of order 1).
    struct c {
        ggml_type t;
        double max_rel;
    };
    Rng rng(5);
    const int64_t n = 1024;
    std::vector<float> x(static_cast<size_t>(n)), imat(static_cast<size_t>(n)),
        y(static_cast<size_t>(n));
    for (auto& v : x) v = rng.normal();
    for (auto& v : imat) v = 0.5f + rng.uniform01();
    for (const c& k :
         {c{ggml_type::F16, 1e-3}, c{ggml_type::BF16, 5e-3}, c{ggml_type::Q8_0, 0.01},
          c{ggml_type::Q4_K, 0.12}, c{ggml_type::Q2_K, 0.45}, c{ggml_type::IQ2_XXS, 0.45}}) {
        for (const float* qw :
             {static_cast<const float*>(nullptr), static_cast<const float*>(imat.data())}) {
            std::vector<uint8_t> q(row_bytes(k.t, n));
            quantize_rows(k.t, x.data(), q.data(), 1, n, qw);
            to_float_of(k.t)(q.data(), y.data(), n);
            const double rel = std::sqrt(
                row_error(x.data(), y.data(), nullptr, n) /
                row_error(x.data(), std::vector<float>(static_cast<size_t>(n), 0.0f).data(),
                          nullptr, n));
            EXPECT_LT(rel, k.max_rel) << type_traits_of(k.t).name << (qw ? " imatrix" : "");
        }
    }
    // All-zero rows quantize to zeros.
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    for (ggml_type t : {ggml_type::Q8_0, ggml_type::Q4_K, ggml_type::Q2_K, ggml_type::IQ2_XXS}) {
        std::vector<uint8_t> q(row_bytes(t, n));
        quantize_rows(t, zeros.data(), q.data(), 1, n, imat.data());
        to_float_of(t)(q.data(), y.data(), n);
        for (float v : y) ASSERT_EQ(v, 0.0f) << type_traits_of(t).name;
    }
}

}  // namespace
}  // namespace magnetar
