// The CLI on a DeepSeek V4.1 model with a tokenizer (v41-tiny with the DeepSeek vocabulary,
// support/tiny_models.h): `magnetar run -p` generates exactly the greedy continuation that the
// Session API computes on the rendered prompt, and `magnetar chat` through a pipe answers a turn
// with the same text as `run` with the same settings.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/cli_support.h"
#include "magnetar/engine.h"
#include "support/test_support.h"
#include "support/tiny_v41_engine.h"

namespace magnetar {
namespace {

using test::run_magnetar;
using test::shell_quote;

const std::string& v41_model() {
    return test::tiny_v41_model();
}
const Engine* v41_engine() {
    return test::tiny_v41_engine();
}

std::string bytes_of(const Engine& e, const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += e.token_bytes(id);
    return s;
}

std::string model_arg() {
    return "-m " + shell_quote(v41_model()) + " -t 2 ";
}

TEST(V41Text, ModelCarriesTheDeepSeekTokenizer) {
    MAGNETAR_REQUIRE_V41_MODEL();
    const Engine& e = *v41_engine();
    EXPECT_EQ(e.info().arch, "deepseek41");
    EXPECT_EQ(e.info().n_vocab, 129280u);
    // The chat template's control tokens resolve to single ids.
    std::vector<int32_t> ids;
    ASSERT_TRUE(e.tokenize("<｜User｜>hi<｜Assistant｜></think>", true, &ids).ok());
    EXPECT_EQ(ids.size(), 4u);
    EXPECT_EQ(ids.front(), e.info().special.user);
    EXPECT_EQ(ids.back(), e.info().special.think_end);
}

TEST(V41Text, RunGreedyEqualsSessionArgmax) {
    MAGNETAR_REQUIRE_V41_MODEL();
    const Engine& e = *v41_engine();
    const auto r =
        run_magnetar("run " + model_arg() + "-p 'Tell me a story.' --temp 0 -n 8 -c 256");
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto prompt = test::chat_prompt(e, "Tell me a story.", think_mode::on, 256,
                                          "You are a helpful assistant");
    const auto want = test::greedy_continuation(e, prompt, 8, 256);
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(r.out, bytes_of(e, want) + "\n");
    EXPECT_NE(r.err.find(" t/s, generation: "), std::string::npos) << r.err;

    // No system prompt, thinking off: a different rendered prompt, still the API's continuation.
    const auto r2 = run_magnetar("run " + model_arg() +
                                 "-p 'Tell me a story.' -sys '' --nothink --temp 0 -n 8 -c 256");
    ASSERT_EQ(r2.rc, 0) << r2.err;
    const auto want2 = test::greedy_continuation(
        e, test::chat_prompt(e, "Tell me a story.", think_mode::off, 256), 8, 256);
    EXPECT_EQ(r2.out, bytes_of(e, want2) + "\n");
}

TEST(V41Text, ChatTurnThroughAPipeEqualsRun) {
    MAGNETAR_REQUIRE_V41_MODEL();
    const std::string flags = "-sys '' --nothink --temp 0 -n 8 -c 512";
    const auto run = run_magnetar("run " + model_arg() + "-p 'Hello there' " + flags);
    ASSERT_EQ(run.rc, 0) << run.err;
    std::string out;
    // run_command captures stderr too: keep the banner and the timing line out.
    const std::string cmd = "(printf 'Hello there\\n' | " + test::magnetar_bin() + " chat " +
                            model_arg() + flags + " 2>/dev/null)";
    ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
    // Off a terminal stdout holds the input prompt ("magnetar> "), the reply line, and the
    // prompt again before the end of input.
    const size_t at = out.find("> ");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string prompt = out.substr(0, at + 2);
    EXPECT_EQ(out.substr(at + 2), run.out + prompt) << out;
}

}  // namespace
}  // namespace magnetar
