// `magnetar inspect` on a full-width Flash layer pair with the published quant mix reports the
// per-layer byte counts that the formulas of spec model.md §3.3-§3.4 predict.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace {

// GGML block geometry, written out here independently of src/quant.
uint64_t bytes_of(const std::string& type, uint64_t n) {
    if (type == "f32") return 4 * n;
    if (type == "f16") return 2 * n;
    if (type == "q8_0") return n / 32 * 34;
    if (type == "q2_K") return n / 256 * 84;
    if (type == "iq2_xxs") return n / 256 * 66;
    if (type == "q4_K") return n / 256 * 144;
    ADD_FAILURE() << "unknown type " << type;
    return 0;
}

// One Flash layer (D 4096, 64 heads x 512, q_lora 1024, 8 output groups x 1024, 256 experts of
// F 2048, indexer 64 x 128) in the published q2 mix, learned routing.
uint64_t flash_layer_bytes(int ratio) {
    const uint64_t D = 4096, H = 64, hd = 512, ql = 1024, G = 8, ol = 1024, E = 256, F = 2048;
    const uint64_t IH = 64, Id = 128;
    uint64_t b = 0;
    // HC sites (attn + ffn): fn F16 [4D, 24], base F32 [24], scale F32 [3]
    b += 2 * (bytes_of("f16", 4 * D * 24) + bytes_of("f32", 24) + bytes_of("f32", 3));
    // norms: attn, ffn [D]; q_a_norm [q_lora]; kv_a_norm [hd]; sinks [H]
    b += bytes_of("f32", 2 * D + ql + hd + H);
    // attention projections, Q8_0
    b += bytes_of("q8_0", D * ql) + bytes_of("q8_0", ql * H * hd) + bytes_of("q8_0", D * hd);
    b += bytes_of("q8_0", (hd * H / G) * (G * ol)) + bytes_of("q8_0", G * ol * D);
    // main compressor: coff = 2 for ratio 4
    const uint64_t c = ratio == 4 ? 2 : 1;
    b += bytes_of("f16", c * hd * ratio) + 2 * bytes_of("f16", D * c * hd) + bytes_of("f32", hd);
    if (ratio == 4) {
        b += bytes_of("f16", ql * IH * Id) + bytes_of("f16", D * IH);
        b += bytes_of("f16", 2 * Id * 4) + 2 * bytes_of("f16", D * 2 * Id) + bytes_of("f32", Id);
    }
    // router F16 [D, E] and selection bias F32 [E]
    b += bytes_of("f16", D * E) + bytes_of("f32", E);
    // routed experts: gate/up IQ2_XXS, down Q2_K
    b += 2 * bytes_of("iq2_xxs", D * F * E) + bytes_of("q2_K", F * D * E);
    // shared expert, Q8_0
    b += 3 * bytes_of("q8_0", D * F);
    return b;
}

TEST(Inspect, FlashLayersPublishedMatchSpecFormulas) {
    const std::string dir = magnetar::test::temp_dir();
    const std::string path = dir + "/flash2.gguf";
    std::string out;
    ASSERT_EQ(magnetar::test::run_command(
                  magnetar::test::magnetar_bin() +
                      " gen-model --preset flash-layers:2 --weights published -q -o " + path,
                  &out),
              0)
        << out;
    std::string json_text;
    int rc = magnetar::test::run_command(
        magnetar::test::magnetar_bin() + " inspect --json --summary " + path + " 2>/dev/null",
        &json_text);
    std::filesystem::remove(path);
    ASSERT_EQ(rc, 0) << json_text;
    const auto j = nlohmann::json::parse(json_text);
    ASSERT_EQ(j["n_layer"], 2);
    ASSERT_EQ(j["layers"].size(), 2u);
    EXPECT_EQ(j["layers"][0]["compress_ratio"], 4);
    EXPECT_EQ(j["layers"][1]["compress_ratio"], 128);
    EXPECT_EQ(j["layers"][0]["bytes"].get<uint64_t>(), flash_layer_bytes(4));
    EXPECT_EQ(j["layers"][1]["bytes"].get<uint64_t>(), flash_layer_bytes(128));
    // Globals: embeddings F16, head Q8_0, output HC F16 + F32 base/scale, final norm F32.
    const uint64_t D = 4096, V = 129280;
    EXPECT_EQ(j["embedding_bytes"].get<uint64_t>(),
              bytes_of("f16", D * V) + bytes_of("q8_0", D * V));
    EXPECT_EQ(j["global_bytes"].get<uint64_t>(), bytes_of("f16", D * V) + bytes_of("q8_0", D * V) +
                                                     bytes_of("f16", 4 * D * 4) +
                                                     bytes_of("f32", 4 + 1 + D));
    EXPECT_EQ(j["routed_expert_bytes"].get<uint64_t>(),
              2 * (2 * bytes_of("iq2_xxs", D * 2048 * 256) + bytes_of("q2_K", 2048 * D * 256)));
}

}  // namespace
