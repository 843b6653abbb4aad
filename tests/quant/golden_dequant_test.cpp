// Scalar dequantizers and the IQ2_XXS tables against GGML's golden vectors: bit-exact.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "golden.h"
#include "quant/fp16.h"
#include "quant/iq2_tables.h"
#include "quant/types.h"

namespace magnetar {
namespace {

using test::golden_quants;
using test::kGoldenCols;
using test::kGoldenRows;

struct golden_case {
    const char* name;  // file stem in golden/quants
    ggml_type type;
};

void PrintTo(const golden_case& c, std::ostream* os) {
    *os << c.name;
}

class GoldenDequant : public ::testing::TestWithParam<golden_case> {};

TEST_P(GoldenDequant, ReproducesGgmlBitForBit) {
    const golden_case& c = GetParam();
    const auto bin = test::read_file(golden_quants(std::string(c.name) + ".bin"));
    const auto expected =
        test::float_bits(test::read_f32(golden_quants(std::string(c.name) + ".dequant.f32")));
    const size_t rb = row_bytes(c.type, kGoldenCols);
    ASSERT_EQ(bin.size(), rb * kGoldenRows) << c.name << ".bin has an unexpected size";
    ASSERT_EQ(expected.size(), static_cast<size_t>(kGoldenRows * kGoldenCols));

    const to_float_fn to_float = to_float_of(c.type);
    ASSERT_NE(to_float, nullptr);
    std::vector<float> row(kGoldenCols);
    for (int64_t r = 0; r < kGoldenRows; ++r) {
        to_float(bin.data() + r * rb, row.data(), kGoldenCols);
        const auto got = test::float_bits(row);
        for (int64_t col = 0; col < kGoldenCols; ++col) {
            const uint32_t want = expected[r * kGoldenCols + col];
            ASSERT_EQ(got[col], want)
                << c.name << ": first mismatch at row " << r << " col " << col << " (got "
                << row[col] << ", want " << bits_to_f32(want) << ")";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllGoldenFiles, GoldenDequant,
                         ::testing::Values(golden_case{"f16", ggml_type::F16},
                                           golden_case{"bf16", ggml_type::BF16},
                                           golden_case{"q8_0", ggml_type::Q8_0},
                                           golden_case{"q2_k", ggml_type::Q2_K},
                                           golden_case{"q4_k", ggml_type::Q4_K},
                                           golden_case{"q2_k.imatrix", ggml_type::Q2_K},
                                           golden_case{"q4_k.imatrix", ggml_type::Q4_K},
                                           golden_case{"iq2_xxs.imatrix", ggml_type::IQ2_XXS}),
                         [](const ::testing::TestParamInfo<golden_case>& info) {
                             std::string s = info.param.name;
                             for (char& ch : s) {
                                 if (ch == '.') ch = '_';
                             }
                             return s;
                         });

TEST(Iq2Tables, GridEqualsGgml) {
    const auto bytes = test::read_file(golden_quants("iq2xxs_grid.u64le"));
    ASSERT_EQ(bytes.size(), 256u * 8u);
    for (int g = 0; g < 256; ++g) {
        uint64_t want = 0;
        for (int k = 0; k < 8; ++k) want |= static_cast<uint64_t>(bytes[8 * g + k]) << (8 * k);
        ASSERT_EQ(kIq2xxsGrid[g], want) << "grid entry " << g;
    }
}

TEST(Iq2Tables, KsignsEqualGgml) {
    const auto bytes = test::read_file(golden_quants("ksigns_iq2xs.u8"));
    ASSERT_EQ(bytes.size(), 128u);
    for (uint32_t i = 0; i < 128; ++i) ASSERT_EQ(iq2_ksign(i), bytes[i]) << "sign index " << i;
}

}  // namespace
}  // namespace magnetar
