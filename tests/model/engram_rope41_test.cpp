// V4.1 Engram hashing (spec v41 §3.9.2 - §3.9.5, §6.2 - §6.3) and RoPE tables (§3.3, §6.2):
// the released and tiny constants, the published hash vectors, sticky blocking with a dead
// token, row264 decoding, and the RoPE rotation's contracts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/rope41.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/engram_hash.h"
#include "quant/fp16.h"
#include "quant/fp8fp4.h"

namespace magnetar {
namespace {

using engram::layer_hash;

// ---------------------------------------------------------------------------------------------
// Engram constants
// ---------------------------------------------------------------------------------------------

const std::vector<int64_t> kPrimesL1 = {16000057, 16000079, 16000081, 16000097, 16000121, 16000129,
                                        16000133, 16000183, 16000189, 16000207, 16000211, 16000253,
                                        16000277, 16000289, 16000307, 16000321, 16000339, 16000381,
                                        16000393, 16000399, 16000403, 16000409, 16000447, 16000463};
const std::vector<int64_t> kOffsetsL1 = {
    0,         16000057,  32000136,  48000217,  64000314,  80000435,  96000564,  112000697,
    128000880, 144001069, 160001276, 176001487, 192001740, 208002017, 224002306, 240002613,
    256002934, 272003273, 288003654, 304004047, 320004446, 336004849, 352005258, 368005705};
const std::vector<int64_t> kPrimesL14 = {
    16000477, 16000487, 16000499, 16000507, 16000511, 16000573, 16000609, 16000627,
    16000667, 16000669, 16000693, 16000697, 16000711, 16000729, 16000759, 16000769,
    16000781, 16000799, 16000813, 16000819, 16000841, 16000877, 16000879, 16000889};
const std::vector<int64_t> kOffsetsL14 = {
    0,         16000477,  32000964,  48001463,  64001970,  80002481,  96003054,  112003663,
    128004290, 144004957, 160005626, 176006319, 192007016, 208007727, 224008456, 240009215,
    256009984, 272010765, 288011564, 304012377, 320013196, 336014037, 352014914, 368015793};
const std::vector<uint64_t> kReleasedMult = {76632096046245, 4839876093313,  35959672319349,
                                             73987337458391, 67716810739261, 51510806800915,
                                             30921347202721, 82619226485591};
const std::vector<uint64_t> kTinyMult = {22948963341361471, 9720090748611819,  1476226777048821,
                                         595470825660793,   29662608052400909, 1873410163432121,
                                         13919202536988139, 28638879857136817};

std::vector<layer_hash> released_layers() {
    return engram::build_layers(16000000, 2, 4, 8, 99092, kReleasedMult, {384006168, 384016682},
                                {});
}

std::vector<layer_hash> tiny_layers() {
    return engram::build_layers(100, 2, 4, 2, 256, kTinyMult, {660, 864}, {});
}

TEST(V41EngramHash, ReleasedPrimesAndOffsets) {
    const auto primes = engram::bucket_primes(16000000, 2, 4, 8);
    ASSERT_EQ(primes.size(), 2u);
    EXPECT_EQ(primes[0], kPrimesL1);
    EXPECT_EQ(primes[1], kPrimesL14);
    EXPECT_EQ(engram::column_offsets(primes[0]), kOffsetsL1);
    EXPECT_EQ(engram::column_offsets(primes[1]), kOffsetsL14);
    const auto layers = released_layers();
    EXPECT_EQ(layers[0].rows, 384006168);
    EXPECT_EQ(layers[1].rows, 384016682);
    EXPECT_EQ(engram::multiplier_bound(99092), 46539438283891);
}

TEST(V41EngramHash, TinyPrimesAndOffsets) {
    const auto primes = engram::bucket_primes(100, 2, 4, 2);
    EXPECT_EQ(primes[0], (std::vector<int64_t>{101, 103, 107, 109, 113, 127}));
    EXPECT_EQ(primes[1], (std::vector<int64_t>{131, 137, 139, 149, 151, 157}));
    EXPECT_EQ(engram::column_offsets(primes[0]),
              (std::vector<int64_t>{0, 101, 204, 311, 420, 533}));
    EXPECT_EQ(engram::column_offsets(primes[1]),
              (std::vector<int64_t>{0, 131, 268, 407, 556, 707}));
    const auto layers = tiny_layers();
    EXPECT_EQ(layers[0].rows, 660);
    EXPECT_EQ(layers[1].rows, 864);
    EXPECT_EQ(engram::multiplier_bound(256), 18014398509481983);
}

TEST(V41EngramHash, MultiplierChecks) {
    const int64_t bound = engram::multiplier_bound(99092);
    EXPECT_NO_THROW(engram::check_multipliers({1, 3, 2 * bound - 1, 5}, 4, 99092, "t"));
    EXPECT_THROW(engram::check_multipliers({1, 3, 5}, 4, 99092, "t"), Error);     // count
    EXPECT_THROW(engram::check_multipliers({1, 4, 5, 7}, 4, 99092, "t"), Error);  // even
    EXPECT_THROW(engram::check_multipliers({1, 3, 2 * bound + 1, 7}, 4, 99092, "t"),
                 Error);  // range
    EXPECT_THROW(engram::check_multipliers({-1, 3, 5, 7}, 4, 99092, "t"), Error);
    EXPECT_THROW(engram::multiplier_bound(0), Error);
    // build_layers checks the stored row counts and primes against the recomputation.
    EXPECT_THROW(engram::build_layers(100, 2, 4, 2, 256, kTinyMult, {660, 865}, {}), Error);
    std::vector<uint64_t> stored = {101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157};
    EXPECT_NO_THROW(engram::build_layers(100, 2, 4, 2, 256, kTinyMult, {}, stored));
    stored[7] = 139;
    EXPECT_THROW(engram::build_layers(100, 2, 4, 2, 256, kTinyMult, {}, stored), Error);
    std::vector<uint64_t> big = kTinyMult;
    big[0] = 0x8000000000000001ull;  // above INT64_MAX
    EXPECT_THROW(engram::build_layers(100, 2, 4, 2, 256, big, {}, {}), Error);
    EXPECT_THROW(engram::bucket_primes(100, 2, 1, 2), Error);
}

// ---------------------------------------------------------------------------------------------
// Hash vectors
// ---------------------------------------------------------------------------------------------

std::vector<int64_t> hash_all(const std::vector<layer_hash>& layers, int max_ngram, int n_head,
                              int64_t cv, int64_t pad, const std::vector<int64_t>& hist) {
    const int64_t n_col = static_cast<int64_t>(max_ngram - 1) * n_head;
    std::vector<int64_t> out(hist.size() * layers.size() * static_cast<size_t>(n_col));
    engram::hash_positions(layers, max_ngram, n_head, cv, pad, hist.data(), 0,
                           static_cast<int64_t>(hist.size()), 0, static_cast<int64_t>(hist.size()),
                           out.data());
    return out;
}

std::vector<int64_t> slice(const std::vector<int64_t>& all, int64_t p, int64_t l, int64_t n_layers,
                           int64_t n_col) {
    const auto b = all.begin() + (p * n_layers + l) * n_col;
    return std::vector<int64_t>(b, b + n_col);
}

TEST(V41EngramHash, ReleasedHashVectors) {
    const auto layers = released_layers();
    const auto all = hash_all(layers, 4, 8, 99092, 2, {0, 7, 99091, 12345, 2});
    EXPECT_EQ(
        slice(all, 0, 0, 2, 24),
        (std::vector<int64_t>{5702652,   24393184,  39183301,  61503783,  78984481,  90144770,
                              103724983, 121476532, 131476717, 152385926, 164143652, 191599181,
                              198145581, 217419202, 238329687, 247482304, 257520185, 283540304,
                              288689443, 315264704, 322314652, 348890037, 367865216, 380066193}));
    EXPECT_EQ(
        slice(all, 0, 1, 2, 24),
        (std::vector<int64_t>{14361964,  29977809,  32716444,  61209771,  67456205,  84275051,
                              108494439, 120604547, 132225184, 150270452, 174805952, 178895254,
                              193207923, 211610196, 226280582, 252505246, 261362261, 279862797,
                              301364059, 312864848, 328367036, 349372619, 363873742, 372375971}));
    EXPECT_EQ(
        slice(all, 2, 0, 2, 24),
        (std::vector<int64_t>{4120285,   20896480,  38390893,  58888205,  70109306,  81443105,
                              96533837,  125252592, 135465130, 146916152, 164515645, 190613365,
                              199937688, 209413371, 231643799, 244444211, 269195390, 279986773,
                              288575333, 312073322, 328925064, 339981892, 352930862, 375588124}));
    EXPECT_EQ(
        slice(all, 4, 1, 2, 24),
        (std::vector<int64_t>{13515235,  25722972,  37827947,  51628878,  66648833,  93615889,
                              99456457,  120791798, 135155987, 158427394, 171703745, 188332837,
                              200968092, 220494500, 229620659, 252529351, 257751966, 284251557,
                              293190323, 305038202, 322430821, 343428666, 365775118, 382661594}));
}

TEST(V41EngramHash, TinyHashVectors) {
    const auto layers = tiny_layers();
    const auto all = hash_all(layers, 4, 2, 256, 1, {2, 8, 150, 1, 255, 21});
    const int64_t want[6][2][6] = {
        {{38, 108, 299, 378, 450, 579}, {126, 267, 366, 482, 671, 848}},
        {{40, 194, 284, 345, 443, 578}, {54, 222, 273, 479, 579, 735}},
        {{73, 177, 285, 346, 451, 555}, {66, 151, 396, 448, 682, 844}},
        {{27, 195, 286, 348, 462, 601}, {37, 231, 337, 437, 625, 830}},
        {{65, 159, 213, 382, 483, 545}, {37, 192, 335, 450, 613, 844}},
        {{17, 173, 214, 417, 525, 558}, {76, 177, 367, 516, 677, 726}},
    };
    for (int p = 0; p < 6; ++p) {
        for (int l = 0; l < 2; ++l) {
            EXPECT_EQ(slice(all, p, l, 2, 6), std::vector<int64_t>(want[p][l], want[p][l] + 6))
                << "p " << p << " layer " << l;
        }
    }
}

TEST(V41EngramHash, StickyBlockingWithADeadToken) {
    const auto layers = tiny_layers();
    const int64_t pad = 1;
    const std::vector<int64_t> hist = {2, engram::kDead, 150, 7, 255};
    const auto got = hash_all(layers, 4, 2, 256, pad, hist);
    // p = 3 looks back 3 (s=0), 150 (s=1), dead (s=2: blocked), then 2 at s=3, which stays
    // blocked: the same as a history with pad at positions 0 and 1.
    const auto as_pads = hash_all(layers, 4, 2, 256, pad, {pad, pad, 150, 7, 255});
    const auto not_sticky = hash_all(layers, 4, 2, 256, pad, {2, pad, 150, 7, 255});
    for (int l = 0; l < 2; ++l) {
        EXPECT_EQ(slice(got, 3, l, 2, 6), slice(as_pads, 3, l, 2, 6));
        EXPECT_EQ(slice(got, 4, l, 2, 6), slice(as_pads, 4, l, 2, 6));
        // Only the 4-gram columns (s = 3) see the difference stickiness makes.
        const auto a = slice(got, 3, l, 2, 6), b = slice(not_sticky, 3, l, 2, 6);
        EXPECT_EQ(std::vector<int64_t>(a.begin(), a.begin() + 4),
                  std::vector<int64_t>(b.begin(), b.begin() + 4));
        EXPECT_NE(std::vector<int64_t>(a.begin() + 4, a.end()),
                  std::vector<int64_t>(b.begin() + 4, b.end()));
    }
    // The dead position itself hashes pads only: the same as a pad-only history at p = 1.
    const auto pads = hash_all(layers, 4, 2, 256, pad, {pad, pad});
    for (int l = 0; l < 2; ++l) EXPECT_EQ(slice(got, 1, l, 2, 6), slice(pads, 1, l, 2, 6));
}

TEST(V41EngramHash, PartialHistoryAndBadInput) {
    const auto layers = tiny_layers();
    const std::vector<int64_t> hist = {2, 8, 150, 1, 255, 21};
    const auto full = hash_all(layers, 4, 2, 256, 1, hist);
    // Positions 4..5 need 1..5: a history starting at position 1 suffices.
    std::vector<int64_t> out(2 * 2 * 6);
    engram::hash_positions(layers, 4, 2, 256, 1, hist.data() + 1, 1, 5, 4, 2, out.data());
    EXPECT_EQ(out, std::vector<int64_t>(full.begin() + 4 * 12, full.end()));
    // Position 3 needs position 0, which that history lacks.
    EXPECT_THROW(
        engram::hash_positions(layers, 4, 2, 256, 1, hist.data() + 1, 1, 5, 3, 1, out.data()),
        Error);
    EXPECT_THROW(engram::hash_positions(layers, 4, 2, 256, 1, hist.data(), 0, 6, 5, 2, out.data()),
                 Error);
    const std::vector<int64_t> bad = {2, 256};
    EXPECT_THROW(hash_all(layers, 4, 2, 256, 1, bad), Error);
    const std::vector<int64_t> neg = {2, -5};
    EXPECT_THROW(hash_all(layers, 4, 2, 256, 1, neg), Error);
    EXPECT_THROW(hash_all(layers, 4, 2, 256, 256, hist), Error);  // pad id out of range
    EXPECT_THROW(hash_all(layers, 4, 3, 256, 1, hist), Error);    // constants of another shape
}

// ---------------------------------------------------------------------------------------------
// Row decoding
// ---------------------------------------------------------------------------------------------

TEST(V41EngramHash, Row264Dequant) {
    EXPECT_EQ(engram::row_bytes(256), 264);
    EXPECT_EQ(engram::row_bytes(32), 33);
    EXPECT_THROW(engram::row_bytes(48), Error);
    Rng rng(5);
    std::vector<uint8_t> row(264);
    for (int d = 0; d < 256; ++d) {
        row[d] = static_cast<uint8_t>(rng.below(256));
        if ((row[d] & 0x7f) == 0x7f) row[d] = 0x7e;
    }
    for (int g = 0; g < 8; ++g) row[256 + g] = static_cast<uint8_t>(100 + 5 * g);
    std::vector<float> out(256);
    engram::dequant_row(row.data(), 256, out.data());
    for (int d = 0; d < 256; ++d) {
        const double want = static_cast<double>(quant::e4m3_decode(row[d])) *
                            std::ldexp(1.0, row[256 + d / 32] - 127);
        ASSERT_EQ(static_cast<double>(out[d]), want) << d;  // exact
        ASSERT_EQ(f32_to_bits(out[d]), f32_to_bits(quant::round_bf16(out[d]))) << d;
    }
}

// ---------------------------------------------------------------------------------------------
// RoPE
// ---------------------------------------------------------------------------------------------

void expect_table(const std::vector<float>& got, const std::vector<uint32_t>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(f32_to_bits(got[i]), want[i])
            << "pair " << i << std::hex << " got " << f32_to_bits(got[i]);
    }
}

TEST(V41RopeTable, ReleasedInvFreqTables) {
    rope41::yarn_params yarn{65536, 16.0f, 32.0f, 1.0f};
    const auto r = rope41::yarn_correction_range(64, 160000.0, yarn);
    EXPECT_EQ(r.lo, 15.0);
    EXPECT_EQ(r.hi, 25.0);
    expect_table(
        rope41::inv_freq(64, 160000.0, &yarn),
        {0x3f800000u, 0x3f300a3au, 0x3ef21c1fu, 0x3ea67d01u, 0x3e64f92eu, 0x3e1d7475u, 0x3dd88cb4u,
         0x3d94e963u, 0x3d4ccccdu, 0x3d0cd4fbu, 0x3cc1b019u, 0x3c8530ceu, 0x3c372dbfu, 0x3bfbed88u,
         0x3bad3d5eu, 0x3b6e4237u, 0x3b147ae1u, 0x3ab714e0u, 0x3a5ebdb6u, 0x3a0530ceu, 0x399bb3afu,
         0x39305978u, 0x38be904du, 0x383e9b5fu, 0x37a3d70cu, 0x36b443d0u, 0x3677eba6u, 0x362a7be8u,
         0x35ea77ffu, 0x35a13bdcu, 0x355dbf30u, 0x35187c4du});
    expect_table(
        rope41::inv_freq(64, 10000.0, nullptr),
        {0x3f800000u, 0x3f3ff911u, 0x3f0ff59au, 0x3ed7e89bu, 0x3ea1e89bu, 0x3e72d423u, 0x3e361887u,
         0x3e088d77u, 0x3dcccccdu, 0x3d99940du, 0x3d6655c2u, 0x3d2cba15u, 0x3d0186e3u, 0x3cc2434fu,
         0x3c91ad39u, 0x3c5a7bf2u, 0x3c23d70au, 0x3bf5b9b0u, 0x3bb8449cu, 0x3b8a2e77u, 0x3b4f3e38u,
         0x3b1b690du, 0x3ae91528u, 0x3aaec98eu, 0x3a83126fu, 0x3a44948cu, 0x3a136a16u, 0x39dd1725u,
         0x39a5cb60u, 0x3978a815u, 0x393a7753u, 0x390bd472u});
    // orig_ctx 0 means no YaRN.
    rope41::yarn_params off{};
    EXPECT_EQ(rope41::inv_freq(64, 160000.0, &off), rope41::inv_freq(64, 160000.0, nullptr));
}

TEST(V41RopeTable, TinyInvFreqTables) {
    expect_table(rope41::inv_freq(16, 10000.0, nullptr),
                 {0x3f800000u, 0x3ea1e89bu, 0x3dcccccdu, 0x3d0186e3u, 0x3c23d70au, 0x3b4f3e38u,
                  0x3a83126fu, 0x39a5cb60u});
    rope41::yarn_params yarn{32, 4.0f, 32.0f, 1.0f};
    const auto r = rope41::yarn_correction_range(16, 160000.0, yarn);
    EXPECT_EQ(r.lo, 0.0);
    EXPECT_EQ(r.hi, 2.0);
    expect_table(rope41::inv_freq(16, 160000.0, &yarn),
                 {0x3f800000u, 0x3e0f1bbdu, 0x3c4ccccdu, 0x3b372dbfu, 0x3a23d70au, 0x39128affu,
                  0x3803126fu, 0x36ea77ffu});
    EXPECT_THROW(rope41::inv_freq(15, 10000.0, nullptr), Error);
    EXPECT_THROW(rope41::inv_freq(16, 0.0, nullptr), Error);
}

TEST(V41RopeTable, RotationContracts) {
    const auto inv = rope41::inv_freq(16, 10000.0, nullptr);
    Rng rng(3);
    std::vector<float> x(2 * 40);  // two heads of 40, the last 16 rotated
    for (auto& v : x) v = quant::round_bf16(rng.normal());
    // Position 0 is the identity bit for bit (cos 0 = 1, sin 0 = 0).
    std::vector<float> y0(x.begin(), x.end());
    rope41::apply_heads(y0.data(), 2, 40, 16, 0, inv.data(), false);
    EXPECT_EQ(y0, x);
    for (int64_t pos : {1, 7, 1000, 65535}) {
        std::vector<float> y(x.begin(), x.end());
        rope41::apply_heads(y.data(), 2, 40, 16, pos, inv.data(), false);
        for (int h = 0; h < 2; ++h) {
            for (int d = 0; d < 24; ++d) ASSERT_EQ(y[h * 40 + d], x[h * 40 + d]);  // untouched
            for (int i = 0; i < 8; ++i) {
                const float* a = &x[h * 40 + 24 + 2 * i];
                const float* b = &y[h * 40 + 24 + 2 * i];
                const double th = static_cast<double>(static_cast<float>(pos) * inv[i]);
                const double w0 = a[0] * std::cos(th) - a[1] * std::sin(th);
                const double w1 = a[0] * std::sin(th) + a[1] * std::cos(th);
                const double tol = 2.0 * 0x1p-8 * (std::fabs(a[0]) + std::fabs(a[1]));  // bf16 ulp
                EXPECT_NEAR(b[0], w0, tol) << pos << " " << i;
                EXPECT_NEAR(b[1], w1, tol) << pos << " " << i;
                EXPECT_EQ(f32_to_bits(b[0]), f32_to_bits(quant::round_bf16(b[0])));
            }
        }
        // The inverse rotation undoes it up to the bf16 roundings.
        std::vector<float> z(y.begin(), y.end());
        rope41::apply_heads(z.data(), 2, 40, 16, pos, inv.data(), true);
        for (size_t i = 0; i < x.size(); ++i)
            EXPECT_NEAR(z[i], x[i], 0x1p-6 * (1.0 + std::fabs(x[i])));
    }
    // cos_sin gives the table apply uses: rotating (1, 0) yields (c, s) rounded to bf16.
    std::vector<float> cs(16);
    rope41::cos_sin(123, inv.data(), 8, cs.data());
    std::vector<float> e(16, 0.0f);
    for (int i = 0; i < 8; ++i) e[2 * i] = 1.0f;
    rope41::apply(e.data(), 16, 123, inv.data(), false);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(e[i], quant::round_bf16(cs[i]));
    EXPECT_THROW(rope41::apply_heads(y0.data(), 2, 8, 16, 1, inv.data(), false), Error);
}

}  // namespace
}  // namespace magnetar
