// The generator's weight scales keep activations in a realistic range through every layer: no
// overflow and no collapse to zero. Measured with the independent reference
// (tests/reference/ref.py activation-stats) on the tiny presets, over a sequence that crosses the
// window and every compression boundary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gen-model/gen_model.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

nlohmann::json activation_stats(const std::string& preset, genmodel::weight_scheme ws) {
    const std::string dir = test::temp_dir();
    genmodel::options o;
    o.preset = preset;
    o.weights = ws;
    o.seed = 1;
    o.output = dir + "/m.gguf";
    o.quiet = true;
    genmodel::generate(o);
    // 260 tokens: past the 16-row window, 65 ratio-4 rows (indexer selecting), 2 ratio-128 rows.
    std::string ids = "[0";
    for (int i = 1; i < 260; ++i) ids += "," + std::to_string((i * 7919) % 120000 + 3);
    ids += "]";
    test::write_file(dir + "/ids.json", std::vector<uint8_t>(ids.begin(), ids.end()));
    std::string out;
    const int rc = test::run_command(
        "/usr/bin/python3 " + std::string(MAGNETAR_SOURCE_DIR) +
            "/tests/reference/ref.py activation-stats --quiet --dtype float32 -m " + o.output +
            " --tokens " + dir + "/ids.json 2>&1",
        &out);
    EXPECT_EQ(rc, 0) << out;
    return nlohmann::json::parse(out);
}

void expect_realistic(const nlohmann::json& j) {
    ASSERT_TRUE(j.at("all_finite").get<bool>());
    for (const auto& layer : j.at("layers")) {
        for (const auto& [name, s] : layer.items()) {
            if (name == "layer") continue;
            const std::string where = layer.at("layer").get<std::string>() + "." + name;
            const double rms = s.at("rms").get<double>();
            EXPECT_GT(rms, 0.1) << where << " collapses";
            EXPECT_LT(rms, 10.0) << where << " grows";
            EXPECT_GT(s.at("min_row_rms").get<double>(), 0.05)
                << where << " has a near-zero position";
            EXPECT_LT(s.at("max_abs").get<double>(), 100.0) << where << " has an outlier";
        }
    }
    const double head = j.at("result_norm").at("rms").get<double>();
    EXPECT_GT(head, 0.5);
    EXPECT_LT(head, 2.0);
}

TEST(ActivationRange, TinyF32) {
    expect_realistic(activation_stats("tiny", genmodel::weight_scheme::f32));
}

TEST(ActivationRange, TinyMtpPublished) {
    const auto j = activation_stats("tiny-mtp", genmodel::weight_scheme::published);
    expect_realistic(j);
    EXPECT_EQ(j.at("layers").size(), 7u) << "six main layers plus the MTP block";
}

}  // namespace
}  // namespace magnetar
