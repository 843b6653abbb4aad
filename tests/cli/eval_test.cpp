// `magnetar eval` through the real binary on the trained default model: the shipped question
// set (examples/eval/magnetar-world.jsonl) with its report (text and JSON), the thinking budget
// closed softly and hard, the trace, the terminal UI under a pseudo-terminal (the list, the
// reply, q quits with the report), and clear errors for bad files and budgets.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
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

std::string shipped_set() {
    return std::string(MAGNETAR_SOURCE_DIR) + "/examples/eval/magnetar-world.jsonl";
}

#define REQUIRE_TRAINED()                                                                 \
    do {                                                                                  \
        if (trained_model().empty()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing"; \
    } while (0)

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
    std::ifstream f(path);
    std::vector<nlohmann::json> out;
    std::string line;
    while (std::getline(f, line))
        if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    return out;
}

TEST(Eval, ShippedSetOnTheTrainedModel) {
    REQUIRE_TRAINED();
    const std::string dir = temp_dir();
    const cmd_result r = run_magnetar(
        "eval --plain -m " + shell_quote(trained_model()) + " -t 2 -n 128 --nothink --system '' " +
        "--hard-limit-reply-budget 32 --soft-limit-reply-budget 64 --report-json " + dir +
        "/r.json " + shell_quote(shipped_set()));
    ASSERT_EQ(r.rc, 0) << r.err;
    std::ifstream f(dir + "/r.json");
    const nlohmann::json rep = nlohmann::json::parse(f);
    ASSERT_EQ(rep["questions"].size(), 34u);
    std::set<std::string> kinds, passed_kinds;
    for (const auto& q : rep["questions"]) {
        kinds.insert(q["kind"]);
        if (q["result"] == "PASS") passed_kinds.insert(q["kind"]);
        EXPECT_TRUE(q["result"] == "PASS" || q["result"] == "FAIL") << q.dump();
        EXPECT_GT(q["generated_tokens"].get<int>(), 0);
        EXPECT_EQ(q["thinking_closed"], "none");  // --nothink
    }
    EXPECT_EQ(kinds, (std::set<std::string>{"choice", "integer", "exact", "lines"}));
    // The trained model answers distances, moon counts and constellations in its own words (17
    // of 34 when this was written, docs/eval.md); a broken grader or generation scores near zero.
    const int passed = rep["totals"]["passed"];
    EXPECT_GE(passed, 12) << r.out;
    EXPECT_TRUE(passed_kinds.count("integer") && passed_kinds.count("exact")) << r.out;
    EXPECT_EQ(rep["totals"]["failed"].get<int>() + passed, 34);
    // The text report: one row per question and the score line.
    EXPECT_NE(r.out.find("distance-1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("score: " + std::to_string(passed) + " / 34 passed"), std::string::npos)
        << r.out;
}

TEST(Eval, TheThinkingBlockIsClosedHardOrSoftWhenTheBudgetRunsLow) {
    REQUIRE_TRAINED();
    const std::string dir = temp_dir();
    const std::string base = "eval --plain -m " + shell_quote(trained_model()) +
                             " -t 2 --questions 4 " + shell_quote(shipped_set());
    // Hard: 24 tokens, the last 16 kept for the answer: thinking is cut after 8.
    cmd_result r = run_magnetar(base +
                                " -n 24 --hard-limit-reply-budget 16 "
                                "--soft-limit-reply-budget 16 --trace " +
                                dir + "/hard.jsonl");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::vector<nlohmann::json> t = read_jsonl(dir + "/hard.jsonl");
    ASSERT_EQ(t.size(), 4u);
    for (const auto& q : t) {
        EXPECT_EQ(q["thinking_closed"], "hard") << q.dump();
        const std::string out = q["output"];
        EXPECT_NE(out.find("</think>"), std::string::npos) << out;
        EXPECT_LE(q["generated_tokens"].get<int>(), 24);
        EXPECT_FALSE(q["prompt"].get<std::string>().empty());
    }
    // Soft: with 50 of 60 tokens left, </think> is taken as soon as it is among the top 128.
    r = run_magnetar(base +
                     " -n 60 --hard-limit-reply-budget 5 --soft-limit-reply-budget 50 "
                     "--soft-limit-think-close-rank 128 --trace " +
                     dir + "/soft.jsonl");
    ASSERT_EQ(r.rc, 0) << r.err;
    t = read_jsonl(dir + "/soft.jsonl");
    ASSERT_EQ(t.size(), 4u);
    int soft = 0;
    for (const auto& q : t) soft += q["thinking_closed"] == "soft" ? 1 : 0;
    EXPECT_GE(soft, 3) << r.out;
}

TEST(Eval, TerminalUiShowsTheListAndQuitsWithTheReport) {
    REQUIRE_TRAINED();
    pty_process p({magnetar_bin(), "eval", "-m", trained_model(), "-t", "2", "-n", "40",
                   "--hard-limit-reply-budget", "8", "--soft-limit-reply-budget", "8", "--pause-ms",
                   "0", "--nothink", "--system", "", shipped_set()});
    ASSERT_NE(p.expect("magnetar eval: magnetar-tiny, 34 questions", 0), std::string::npos)
        << p.output();
    ASSERT_NE(p.expect("moons-1", 0), std::string::npos) << p.output();  // the list
    ASSERT_NE(p.expect("PASS", 0), std::string::npos) << p.output();     // a first result
    p.send("q");
    const size_t at = p.expect("score: ", 0);
    ASSERT_NE(at, std::string::npos) << p.output();
    EXPECT_EQ(p.wait_exit(), 0);
    // The alternate screen was left before the report.
    EXPECT_NE(p.output().find("\x1b[?1049l"), std::string::npos);
    EXPECT_LT(p.output().rfind("\x1b[?1049l"), at);
}

TEST(Eval, BadFilesAndBudgetsGetOneClearLine) {
    REQUIRE_TRAINED();
    const std::string dir = temp_dir();
    {
        std::ofstream f(dir + "/bad.jsonl");
        f << R"({"id": "a", "kind": "integer", "question": "q", "answer": 3})"
          << "\n"
          << R"({"id": "b", "kind": "essay", "question": "q", "answer": "x"})"
          << "\n";
    }
    const std::string m = "eval --plain -m " + shell_quote(trained_model()) + " ";
    cmd_result r = run_magnetar(m + dir + "/bad.jsonl");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find(dir + "/bad.jsonl:2: unknown kind \"essay\""), std::string::npos) << r.err;
    r = run_magnetar(m + "-n 100 " + shell_quote(shipped_set()));
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("--tokens 100 must be above --hard-limit-reply-budget 512"),
              std::string::npos)
        << r.err;
    r = run_magnetar(m + "-n 100 --hard-limit-reply-budget 10 --soft-limit-reply-budget 5 " +
                     shell_quote(shipped_set()));
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("must be at least --hard-limit-reply-budget"), std::string::npos) << r.err;
    // A context too small for a question plus its budget: SKIPPED, not a failure.
    r = run_magnetar(m +
                     "-c 64 -n 40 --hard-limit-reply-budget 8 --soft-limit-reply-budget 8 "
                     "--questions 1 " +
                     shell_quote(shipped_set()));
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("SKIPPED"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("0 failed, 1 skipped"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace magnetar::test
