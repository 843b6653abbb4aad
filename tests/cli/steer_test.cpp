// `magnetar steer build` / `steer sweep` and the --dir-steering-* flags through the real binary
// on the trained default model: a direction built from distance questions (target) against
// star-kind questions (control) makes "Tell me about the star X." replies mention light years
// more as the scale goes down (amplified) and less as it goes up (removed); bad files and
// values get one clear line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_support.h"
#include "core/paths.h"
#include "support/test_support.h"

namespace magnetar::test {
namespace {

std::string trained_model() {
    return find_in_ancestors("models/magnetar-tiny.gguf");
}

std::string example(const std::string& name) {
    return std::string(MAGNETAR_SOURCE_DIR) + "/examples/steering/" + name;
}

#define REQUIRE_TRAINED()                                                                 \
    do {                                                                                  \
        if (trained_model().empty()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing"; \
    } while (0)

// Builds the distance direction once per process.
const std::string& distance_direction() {
    static const std::string path = [] {
        const std::string out = temp_dir() + "/distance.f32";
        const cmd_result r =
            run_magnetar("steer build -m " + shell_quote(trained_model()) + " -t 2 --good " +
                         shell_quote(example("kind.txt")) + " --bad " +
                         shell_quote(example("distance.txt")) + " -o " + shell_quote(out));
        EXPECT_EQ(r.rc, 0) << r.err;
        return out;
    }();
    return path;
}

TEST(Steer, BuildWritesAUnitDirectionPerLayerAndItsSidecar) {
    REQUIRE_TRAINED();
    const std::string path = distance_direction();
    const std::vector<float> v = read_f32(path);
    std::ifstream js(path.substr(0, path.size() - 4) + ".json");
    ASSERT_TRUE(js) << "no sidecar next to " << path;
    const nlohmann::json j = nlohmann::json::parse(js);
    EXPECT_EQ(j.at("model"), "magnetar-tiny");
    EXPECT_EQ(j.at("arch"), "deepseek4");
    EXPECT_EQ(j.at("component"), "ffn_out");
    EXPECT_EQ(j.at("n_target"), 24);
    EXPECT_EQ(j.at("n_control"), 24);
    EXPECT_EQ(j.at("orthogonalized"), true);
    const uint32_t L = j.at("n_layer"), D = j.at("n_embd");
    EXPECT_EQ(L, 6u);
    ASSERT_EQ(v.size(), static_cast<size_t>(L) * D);
    EXPECT_EQ(j.at("layers").size(), L);
    for (uint32_t il = 0; il < L; ++il) {
        double n2 = 0;
        for (uint32_t i = 0; i < D; ++i) n2 += static_cast<double>(v[il * D + i]) * v[il * D + i];
        EXPECT_NEAR(std::sqrt(n2), 1.0, 1e-5) << "layer " << il;
    }

    // run takes it (FFN scale 1 by default) and says so.
    const cmd_result r = run_magnetar("run -m " + shell_quote(trained_model()) +
                                      " -t 2 --nothink -n 8 -p 'Tell me about magnetars.' "
                                      "--dir-steering-file " +
                                      shell_quote(path));
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("magnetar: steering " + path + ": layers 0-5, from ffn_out"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("scales ffn 1, attn 0"), std::string::npos) << r.err;
}

struct sweep_row {
    double scale, marker_per_reply;
};

TEST(Steer, SweepChangesTheMarkerFrequencyMonotonicallyWithTheScale) {
    REQUIRE_TRAINED();
    const std::string dir = temp_dir();
    const cmd_result r = run_magnetar("steer sweep -m " + shell_quote(trained_model()) +
                                      " -t 2 --direction " + shell_quote(distance_direction()) +
                                      " --prompts " + shell_quote(example("tell.txt")) +
                                      " --scales=-1,0,1,2 -n 60 --nothink --marker light --csv " +
                                      dir + "/s.csv --svg " + dir + "/s.svg");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::ifstream csv(dir + "/s.csv");
    std::string line;
    std::getline(csv, line);
    EXPECT_EQ(line, "scale,replies,mean_tokens,median_tokens,ended,marker_per_reply,marker_share");
    std::vector<sweep_row> rows;
    while (std::getline(csv, line)) {
        std::vector<double> f;
        std::stringstream ss(line);
        std::string cell;
        while (std::getline(ss, cell, ',')) f.push_back(std::stod(cell));
        ASSERT_EQ(f.size(), 7u) << line;
        EXPECT_EQ(f[1], 23);
        rows.push_back({f[0], f[5]});
    }
    ASSERT_EQ(rows.size(), 4u);
    // Amplifying the direction (negative scales) mentions light years more, removing it less.
    for (size_t i = 1; i < rows.size(); ++i) {
        EXPECT_LT(rows[i].marker_per_reply, rows[i - 1].marker_per_reply)
            << "scale " << rows[i].scale << " vs " << rows[i - 1].scale << "\n"
            << r.out;
    }
    EXPECT_GT(rows.front().marker_per_reply, 1.25 * rows.back().marker_per_reply) << r.out;
    // The table on stdout and the chart.
    EXPECT_NE(r.out.find("'light'/reply"), std::string::npos) << r.out;
    std::ifstream svg(dir + "/s.svg");
    const std::string s((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
    EXPECT_NE(s.find("<svg"), std::string::npos);
    EXPECT_NE(s.find("series-marker"), std::string::npos);
    EXPECT_NE(s.find("steering scale"), std::string::npos);
}

TEST(Steer, BadFilesAndValuesGetOneClearLine) {
    REQUIRE_TRAINED();
    const std::string m = " -m " + shell_quote(trained_model()) + " -t 2 -n 4 -p hi ";
    cmd_result r = run_magnetar("run" + m + "--dir-steering-ffn 2");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("--dir-steering-file"), std::string::npos) << r.err;

    const std::string dir = temp_dir();
    {
        std::ofstream f(dir + "/short.f32", std::ios::binary);
        f << "0123456789abcdef";
    }
    r = run_magnetar("run" + m + "--dir-steering-file " + dir + "/short.f32");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("expected 6144 bytes (6 layers x 256 F32), got 16 bytes"),
              std::string::npos)
        << r.err;

    r = run_magnetar("run" + m + "--dir-steering-file " + shell_quote(distance_direction()) +
                     " --dir-steering-ffn 200");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("--dir-steering-ffn"), std::string::npos) << r.err;

    r = run_magnetar("steer sweep -m " + shell_quote(trained_model()) + " --direction " +
                     shell_quote(distance_direction()) + " --prompts " +
                     shell_quote(example("tell.txt")) + " --scales=1,abc");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("\"abc\" is not a number"), std::string::npos) << r.err;

    {
        std::ofstream f(dir + "/empty.txt");
        f << "\n  \n";
    }
    r = run_magnetar("steer build -m " + shell_quote(trained_model()) + " --good " + dir +
                     "/empty.txt --bad " + shell_quote(example("distance.txt")) + " -o " + dir +
                     "/x.f32");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("no prompts (one per line)"), std::string::npos) << r.err;

    r = run_magnetar("steer build -m " + shell_quote(trained_model()) +
                     " --pair-normalize --good " + shell_quote(example("tell.txt")) + " --bad " +
                     shell_quote(example("distance.txt")) + " -o " + dir + "/x.f32");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("they have 23 and 24 prompts"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace magnetar::test
