// `magnetar score`: reference files, the K + 1-bin divergence against a direct computation from
// full logits, the statistics of a model against itself, bad files, and continuation cases.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/cli_support.h"

namespace fs = std::filesystem;

namespace magnetar::test {
namespace {

constexpr int kVocab = 512;  // v41-tiny without a tokenizer
constexpr int kCtx = 48;
constexpr int kChunks = 2;

class ScoreTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ =
            (fs::temp_directory_path() / ("magnetar-score-" + std::to_string(::getpid()))).string();
        fs::create_directories(dir_);
        for (int seed : {1, 2}) {
            const cmd_result r =
                run_magnetar("gen-model --preset v41-tiny --weights f32 -q --seed " +
                             std::to_string(seed) + " -o " + shell_quote(model(seed)));
            ASSERT_EQ(r.rc, 0) << r.err;
        }
        std::mt19937 rng(7);
        std::vector<int32_t> ids(kCtx * kChunks + 5);
        for (int32_t& id : ids) id = static_cast<int32_t>(rng() % kVocab);
        std::ofstream(tokens()) << nlohmann::json(ids).dump();
        ids_ = ids;
    }
    static void TearDownTestSuite() { fs::remove_all(dir_); }

    static std::string model(int seed) { return dir_ + "/m" + std::to_string(seed) + ".gguf"; }
    static std::string tokens() { return dir_ + "/ids.json"; }
    static std::string path(const std::string& name) { return dir_ + "/" + name; }

    static cmd_result save(int seed, const std::string& out, int top_k) {
        return run_magnetar("score save -q -t 1 -m " + shell_quote(model(seed)) + " --tokens " +
                            shell_quote(tokens()) + " -o " + shell_quote(out) + " --ctx " +
                            std::to_string(kCtx) + " --top-k " + std::to_string(top_k) +
                            " --greedy-prompt 16 --greedy 8");
    }
    static cmd_result kld(int seed, const std::string& ref, const std::string& json) {
        return run_magnetar("score kld -q -t 1 -m " + shell_quote(model(seed)) + " --ref " +
                            shell_quote(ref) + " --json " + shell_quote(json));
    }
    static nlohmann::json read_json(const std::string& p) {
        std::ifstream f(p);
        return nlohmann::json::parse(f);
    }

    // [kCtx - 1][kVocab] log-softmax rows of chunk c (positions 0 .. kCtx - 2) from eval-logits.
    static std::vector<std::vector<double>> log_probs(int seed, int c) {
        const std::vector<int32_t> chunk(ids_.begin() + c * kCtx,
                                         ids_.begin() + (c + 1) * kCtx - 1);
        const std::string in = path("chunk.json"), out = path("chunk.f32");
        std::ofstream(in) << nlohmann::json(chunk).dump();
        const cmd_result r =
            run_magnetar("eval-logits -t 1 -m " + shell_quote(model(seed)) + " --tokens " +
                         shell_quote(in) + " --out " + shell_quote(out) + " --all-positions");
        EXPECT_EQ(r.rc, 0) << r.err;
        std::ifstream f(out, std::ios::binary);
        std::vector<std::vector<double>> rows(chunk.size(), std::vector<double>(kVocab));
        std::vector<float> row(kVocab);
        for (auto& lp : rows) {
            f.read(reinterpret_cast<char*>(row.data()), kVocab * sizeof(float));
            double m = row[0], s = 0;
            for (float v : row) m = std::max(m, static_cast<double>(v));
            for (float v : row) s += std::exp(v - m);
            for (int i = 0; i < kVocab; ++i) lp[i] = row[i] - m - std::log(s);
        }
        EXPECT_TRUE(f.good());
        return rows;
    }

    static std::string dir_;
    static std::vector<int32_t> ids_;
};

std::string ScoreTest::dir_;
std::vector<int32_t> ScoreTest::ids_;

TEST_F(ScoreTest, AModelAgainstItselfHasNoDivergence) {
    const cmd_result s = save(1, path("self.mgref"), 16);
    ASSERT_EQ(s.rc, 0) << s.err;
    EXPECT_NE(s.out.find("2 chunks of 48 tokens, 94 scored"), std::string::npos) << s.out;
    const cmd_result k = kld(1, path("self.mgref"), path("self.json"));
    ASSERT_EQ(k.rc, 0) << k.err;
    const auto j = read_json(path("self.json"));
    EXPECT_EQ(j["positions"], 94);
    EXPECT_LT(j["kld"]["max"].get<double>(), 1e-6);
    EXPECT_EQ(j["top1"].get<double>(), 1.0);
    EXPECT_EQ(j["greedy_lcp"].get<double>(), 8.0);
    EXPECT_NEAR(j["nll"].get<double>(), j["reference_nll"].get<double>(), 1e-5);
}

TEST_F(ScoreTest, DivergenceMatchesTheFullDistributionsAndBoundsItFromBelow) {
    // The exact KL(model 1 || model 2) per position, from both models' full logits.
    double exact = 0, nll2 = 0;
    int n = 0;
    for (int c = 0; c < kChunks; ++c) {
        const auto p = log_probs(1, c), q = log_probs(2, c);
        for (size_t i = 0; i < p.size(); ++i, ++n) {
            for (int t = 0; t < kVocab; ++t) exact += std::exp(p[i][t]) * (p[i][t] - q[i][t]);
            nll2 -= q[i][static_cast<size_t>(ids_[c * kCtx + i + 1])];
        }
    }
    exact /= n;
    nll2 /= n;
    ASSERT_GT(exact, 0.01);

    // Every token in the top K: the bins are the distribution, the divergence is exact.
    ASSERT_EQ(save(1, path("all.mgref"), kVocab).rc, 0);
    ASSERT_EQ(kld(2, path("all.mgref"), path("all.json")).rc, 0);
    const auto all = read_json(path("all.json"));
    EXPECT_NEAR(all["kld"]["mean"].get<double>(), exact, 1e-4 * exact);
    EXPECT_NEAR(all["nll"].get<double>(), nll2, 1e-4);
    EXPECT_LT(all["top1"].get<double>(), 1.0);

    // Top 4 and the rest: a lower bound.
    ASSERT_EQ(save(1, path("k4.mgref"), 4).rc, 0);
    ASSERT_EQ(kld(2, path("k4.mgref"), path("k4.json")).rc, 0);
    const double k4 = read_json(path("k4.json"))["kld"]["mean"].get<double>();
    EXPECT_GT(k4, 0.0);
    EXPECT_LE(k4, exact * (1 + 1e-6));
}

TEST_F(ScoreTest, DamagedReferencesAndBadTokensAreErrors) {
    ASSERT_EQ(save(1, path("good.mgref"), 8).rc, 0);
    const auto size = fs::file_size(path("good.mgref"));
    fs::copy_file(path("good.mgref"), path("short.mgref"), fs::copy_options::overwrite_existing);
    fs::resize_file(path("short.mgref"), size - 3);
    cmd_result r = kld(1, path("short.mgref"), path("x.json"));
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("truncated or damaged"), std::string::npos) << r.err;

    std::ofstream(path("magic.mgref")) << "GGUF and nothing else";
    r = kld(1, path("magic.mgref"), path("x.json"));
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("bad magic"), std::string::npos) << r.err;

    // The V4 tiny model has the DeepSeek vocabulary, not the reference's 512.
    r = run_magnetar("score kld -q -t 1 -m " + shell_quote(cli_tiny_model()) + " --ref " +
                     shell_quote(path("good.mgref")));
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("vocabulary"), std::string::npos) << r.err;

    std::ofstream(path("big.json")) << "[1, 2, 99999]";
    r = run_magnetar("score save -q -t 1 -m " + shell_quote(model(1)) + " --tokens " +
                     shell_quote(path("big.json")) + " -o " + shell_quote(path("x.mgref")) +
                     " --ctx 2 --greedy-prompt 1");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("token id 99999"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(path("x.mgref")));
}

TEST(ScoreCases, WritesOneRowPerCaseAndNamesBadLines) {
    const std::string dir =
        (fs::temp_directory_path() / ("magnetar-cases-" + std::to_string(::getpid()))).string();
    fs::create_directories(dir);
    std::ofstream(dir + "/cases.jsonl")
        << "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"mode\": \"nothink\", "
           "\"continuation\": \"Hi there.\"}\n"
           "{\"text\": \"Magnetars are\", \"continuation\": \" neutron stars\"}\n";
    cmd_result r = run_magnetar("score cases -q -t 1 -m " + shell_quote(cli_tiny_model()) + " -f " +
                                shell_quote(dir + "/cases.jsonl") + " --ctx 256");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out.rfind(
                  "case\tprompt_tokens\ttarget_tokens\tnll\tavg_nll\tfirst_match\tgreedy_lcp\n", 0),
              0u)
        << r.out;
    EXPECT_NE(r.out.find("\n1\t"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\n2\t"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("2 cases"), std::string::npos) << r.err;

    std::ofstream(dir + "/bad.jsonl") << "{\"text\": \"no continuation\"}\n";
    r = run_magnetar("score cases -q -t 1 -m " + shell_quote(cli_tiny_model()) + " -f " +
                     shell_quote(dir + "/bad.jsonl"));
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("bad.jsonl:1"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("continuation"), std::string::npos) << r.err;
    fs::remove_all(dir);
}

}  // namespace
}  // namespace magnetar::test
