// The type-traits table: ids and block geometry must equal GGML's, since they are read from
// and written to GGUF files; byte-size arithmetic must reject bad element counts.
#include "quant/types.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace magnetar {
namespace {

struct ggml_geometry {
    ggml_type type;
    uint32_t id;
    const char* name;
    uint32_t block_elems;
    uint32_t block_bytes;
};

// From ggml.h (enum ggml_type) and ggml.c (type_traits: blck_size, type_size).
constexpr ggml_geometry kGgml[] = {
    {ggml_type::F32, 0, "f32", 1, 4},
    {ggml_type::F16, 1, "f16", 1, 2},
    {ggml_type::Q8_0, 8, "q8_0", 32, 34},
    {ggml_type::Q2_K, 10, "q2_K", 256, 84},
    {ggml_type::Q4_K, 12, "q4_K", 256, 144},
    {ggml_type::Q8_K, 15, "q8_K", 256, 292},
    {ggml_type::IQ2_XXS, 16, "iq2_xxs", 256, 66},
    {ggml_type::I32, 26, "i32", 1, 4},
    {ggml_type::BF16, 30, "bf16", 1, 2},
};

TEST(TypeTraits, MatchGgml) {
    for (const auto& g : kGgml) {
        SCOPED_TRACE(g.name);
        EXPECT_EQ(static_cast<uint32_t>(g.type), g.id);
        const type_traits* tr = find_type_traits(g.id);
        ASSERT_NE(tr, nullptr);
        EXPECT_EQ(tr->type, g.type);
        EXPECT_STREQ(tr->name, g.name);
        EXPECT_EQ(tr->block_elems, g.block_elems);
        EXPECT_EQ(tr->block_bytes, g.block_bytes);
        EXPECT_EQ(&type_traits_of(g.type), tr);
        EXPECT_EQ(type_name(g.id), g.name);
        EXPECT_EQ(tr->is_quantized, g.block_elems > 1);
        EXPECT_EQ(tr->is_float, g.type == ggml_type::F32 || g.type == ggml_type::F16 ||
                                    g.type == ggml_type::BF16);
        EXPECT_EQ(to_float_of(g.type) == nullptr, g.type == ggml_type::I32);
    }
}

TEST(TypeTraits, UnknownIds) {
    for (uint32_t id :
         {2u, 3u, 6u, 7u, 9u, 11u, 13u, 14u, 17u, 29u, 31u, 40u, 1000u, 0xffffffffu}) {
        EXPECT_EQ(find_type_traits(id), nullptr) << id;
    }
    EXPECT_EQ(type_name(2), "type#2");
    EXPECT_EQ(type_name(4000000000u), "type#4000000000");
}

// MXFP4 (OCP MX): element value = E2M1(code) * 2^(e - 127); GGML stores element j in the low
// nibble of qs[j] and element j + 16 in the high nibble.
TEST(TypeTraits, Mxfp4Dequant) {
    const type_traits* tr = find_type_traits(39);
    ASSERT_NE(tr, nullptr);
    EXPECT_EQ(tr->block_elems, 32u);
    EXPECT_EQ(tr->block_bytes, 17u);
    uint8_t block[17] = {};
    block[0] = 127;  // scale 1
    const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int j = 0; j < 16; ++j) {
        const int lo = j;       // element j: code j (sign bit for j >= 8)
        const int hi = 15 - j;  // element j + 16: code 15 - j
        block[1 + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
    float out[32];
    to_float_of(tr->type)(block, out, 32);
    for (int j = 0; j < 16; ++j) {
        const float want_lo = (j & 8 ? -1.0f : 1.0f) * e2m1[j & 7];
        const float want_hi = ((15 - j) & 8 ? -1.0f : 1.0f) * e2m1[(15 - j) & 7];
        EXPECT_EQ(out[j], want_lo) << j;
        EXPECT_EQ(out[j + 16], want_hi) << j;
    }
    block[0] = 130;  // scale 8
    to_float_of(tr->type)(block, out, 32);
    EXPECT_EQ(out[7], 48.0f);
    EXPECT_EQ(type_bytes(ggml_type::MXFP4, 2304), 2304u / 32u * 17u);
    ASSERT_NE(find_type_traits(24), nullptr);  // I8
    EXPECT_EQ(type_bytes(ggml_type::I8, 264), 264u);
}

TEST(TypeTraits, TypeBytes) {
    EXPECT_EQ(type_bytes(ggml_type::Q4_K, 4096), 2304u);
    EXPECT_EQ(type_bytes(ggml_type::Q2_K, 4096), 1344u);
    EXPECT_EQ(type_bytes(ggml_type::IQ2_XXS, 4096), 1056u);
    EXPECT_EQ(type_bytes(ggml_type::Q8_0, 4096), 4352u);
    EXPECT_EQ(type_bytes(ggml_type::F16, 4096), 8192u);
    EXPECT_EQ(type_bytes(ggml_type::F32, 0), 0u);
    EXPECT_EQ(type_bytes(ggml_type::F32, 7), 28u);

    // Not a multiple of the block size.
    EXPECT_EQ(type_bytes(ggml_type::Q4_K, 100), std::nullopt);
    EXPECT_EQ(type_bytes(ggml_type::Q8_0, 33), std::nullopt);
    EXPECT_EQ(type_bytes(ggml_type::IQ2_XXS, 4096 + 128), std::nullopt);

    // Overflow of 64 bits.
    constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
    EXPECT_EQ(type_bytes(ggml_type::F32, kMax), std::nullopt);
    EXPECT_EQ(type_bytes(ggml_type::F32, kMax / 4 + 1), std::nullopt);
    EXPECT_EQ(type_bytes(ggml_type::F32, kMax / 4), (kMax / 4) * 4);
    EXPECT_EQ(type_bytes(ggml_type::Q8_0, kMax - 31), std::nullopt);  // 2^59 - 1 blocks x 34
    EXPECT_EQ(type_bytes(ggml_type::Q8_0, uint64_t{1} << 63), (uint64_t{1} << 58) * 34);
    EXPECT_EQ(type_bytes(ggml_type::Q8_0, uint64_t{1} << 40), (uint64_t{1} << 35) * 34);

    EXPECT_EQ(row_bytes(ggml_type::Q2_K, 4096), 1344u);
    EXPECT_EQ(row_bytes(ggml_type::BF16, 3), 6u);
}

TEST(TypeTraits, FromName) {
    EXPECT_EQ(type_from_name("q8_0"), ggml_type::Q8_0);
    EXPECT_EQ(type_from_name("Q8_0"), ggml_type::Q8_0);
    EXPECT_EQ(type_from_name("q2_k"), ggml_type::Q2_K);
    EXPECT_EQ(type_from_name("Q4_K"), ggml_type::Q4_K);
    EXPECT_EQ(type_from_name("iq2_xxs"), ggml_type::IQ2_XXS);
    EXPECT_EQ(type_from_name("IQ2_XXS"), ggml_type::IQ2_XXS);
    EXPECT_EQ(type_from_name("bf16"), ggml_type::BF16);
    EXPECT_EQ(type_from_name("F32"), ggml_type::F32);
    EXPECT_EQ(type_from_name("i32"), ggml_type::I32);
    for (const auto& g : kGgml) EXPECT_EQ(type_from_name(g.name), g.type) << g.name;

    EXPECT_EQ(type_from_name(""), std::nullopt);
    EXPECT_EQ(type_from_name("q4_0"), std::nullopt);
    EXPECT_EQ(type_from_name("q8"), std::nullopt);
    EXPECT_EQ(type_from_name("q8_0 "), std::nullopt);
    EXPECT_EQ(type_from_name("iq2_xs"), std::nullopt);
    EXPECT_EQ(type_from_name("f32x"), std::nullopt);
}

TEST(TypeTraits, EveryTypeHasItsScalarKernelRow) {
    // core's table (ids, layouts) and quant's (reference kernels) must list the same types.
    int n = 0;
    for (uint32_t id = 0; id < 256; ++id) {
        const type_traits* tr = find_type_traits(id);
        if (!tr) continue;
        ++n;
        SCOPED_TRACE(tr->name);
        EXPECT_TRUE(has_scalar_kernels(tr->type));
        // Numeric types dequantize; raw byte and index types have nothing to dequantize.
        EXPECT_EQ(to_float_of(tr->type) != nullptr, tr->is_float || tr->is_quantized);
    }
    EXPECT_EQ(n, 11);
    EXPECT_EQ(all_type_traits().size(), 11u);
}

// The columns of quant's table agree with each other: a weight type (one with a reference dot)
// dequantizes and multiplies with one of the activation formats; a quantization target
// dequantizes; only K / IQ types take an importance matrix; every type has random rows.
TEST(TypeTraits, KernelTableColumnsAgree) {
    int weights = 0;
    for (const type_traits& tr : all_type_traits()) {
        SCOPED_TRACE(tr.name);
        const scalar_kernels& k = scalar_kernels_of(tr.type);
        EXPECT_EQ(k.type, tr.type);
        EXPECT_NE(k.random_row, nullptr);
        if (k.from_float != nullptr) {
            EXPECT_NE(k.to_float, nullptr);
        }
        if (k.uses_imatrix) {
            EXPECT_EQ(tr.block_elems, static_cast<uint32_t>(QK_K));
        }
        if (k.dot == nullptr) continue;
        ++weights;
        EXPECT_NE(k.to_float, nullptr);
        EXPECT_NE(k.from_float, nullptr);
        const ggml_type p = k.dot_partner;
        EXPECT_TRUE(p == ggml_type::F32 || p == ggml_type::F16 || p == ggml_type::BF16 ||
                    p == ggml_type::Q8_0 || p == ggml_type::Q8_K);
        // Blocks of the partner tile the weight's blocks.
        EXPECT_EQ(tr.block_elems % type_traits_of(p).block_elems, 0u);
    }
    EXPECT_EQ(weights, 8);  // f32 f16 bf16 q8_0 q2_K q4_K iq2_xxs mxfp4
}

}  // namespace
}  // namespace magnetar
