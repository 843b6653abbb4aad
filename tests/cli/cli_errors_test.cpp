// Command-line habits and errors through the real binary: CLI11's messages rewritten into one
// line a person understands (no 309-digit ranges, "not a number", the nearest command or
// option, extra words in order), sampling values checked with their limits in words, -n -1,
// --seed -1 printed and repeatable, -ngl on a machine without a GPU, outputs that exist (or are
// the input) refused without --overwrite, a warning for a context above the trained one,
// constrained output declined with a reason, --log-disable / --verbose, and --no-mmap / --mlock
// (a refused lock included).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cli/cli_support.h"
#include "core/paths.h"
#include "support/test_support.h"

namespace magnetar::test {
namespace {

std::string trained_model() {
    return find_in_ancestors("models/magnetar-tiny.gguf");
}

#define REQUIRE_TRAINED()                                                                 \
    do {                                                                                  \
        if (trained_model().empty()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing"; \
    } while (0)

// The error output is one line (plus nothing else) and the status is `rc`.
void expect_line(const cmd_result& r, int rc, const std::string& text) {
    EXPECT_EQ(r.rc, rc) << r.err;
    EXPECT_EQ(r.err, text + "\n");
    EXPECT_LT(r.err.size(), 260u) << "a long message: " << r.err;
}

TEST(CliErrors, ParseErrorsAreOneReadableLine) {
    const std::string help = " (magnetar run --help lists the options)";
    expect_line(run_magnetar("run -n abc -p hi"), 2,
                "magnetar run: --n-predict: \"abc\" is not a number" + help);
    expect_line(run_magnetar("run --ctx 10 -p hi"), 2,
                "magnetar run: --ctx: 10 is out of range; it must be between 16 and "
                "1,073,741,824" +
                    help);
    expect_line(run_magnetar("run --seed abc -p hi"), 2,
                "magnetar run: --seed: \"abc\" is not a seed: -1, or a number from 0 to "
                "18446744073709551615" +
                    help);
    expect_line(run_magnetar("run --backend gpu -p hi"), 2,
                "magnetar run: --backend: \"gpu\" is not one of: cpu cuda" + help);
    expect_line(run_magnetar("run -p"), 2, "magnetar run: --prompt needs a value" + help);
    expect_line(run_magnetar("run -p hi extra words"), 2,
                "magnetar run: unexpected arguments: extra words; a prompt with spaces needs "
                "quotes" +
                    help);
    expect_line(
        run_magnetar("run --temperatur 0.5 -p hi"), 2,
        "magnetar run: unexpected arguments: --temperatur 0.5; did you mean --temp?" + help);
    expect_line(run_magnetar("runn -p hi"), 2,
                "magnetar: unknown command \"runn\"; did you mean \"run\"? (magnetar --help lists "
                "the commands)");
    expect_line(run_magnetar("qantize a b"), 2,
                "magnetar: unknown command \"qantize\"; did you mean \"quantize\"? (magnetar "
                "--help lists the commands)");
    expect_line(run_magnetar("steer build"), 2,
                "magnetar steer build: --good is required (magnetar steer build --help lists the "
                "options)");
    // No command at all: the list of commands.
    const cmd_result none = run_magnetar("");
    EXPECT_EQ(none.rc, 2);
    EXPECT_NE(none.out.find("quantize"), std::string::npos) << none.out;
}

TEST(CliErrors, SamplingValuesAreCheckedWithTheirLimits) {
    const std::string help = " (magnetar run --help lists the options)";
    expect_line(
        run_magnetar("run --top-p 0 -p hi"), 2,
        "magnetar run: --top-p: 0 is out of range; --top-p must be above 0 and at most 1" + help);
    expect_line(run_magnetar("run --top-p 1.5 -p hi"), 2,
                "magnetar run: --top-p: 1.5 is out of range; --top-p must be above 0 and at most "
                "1" +
                    help);
    expect_line(
        run_magnetar("run --min-p 1 -p hi"), 2,
        "magnetar run: --min-p: 1 is out of range; --min-p must be at least 0 and below 1" + help);
    expect_line(
        run_magnetar("run --top-k 5000 -p hi"), 2,
        "magnetar run: --top-k: 5000 is out of range; it must be between 0 and 1,024" + help);
    expect_line(run_magnetar("run -t 0 -p hi"), 2,
                "magnetar run: --threads: 0 is out of range; it must be above 0" + help);
    expect_line(run_magnetar("run --seed -2 -p hi"), 2,
                "magnetar run: --seed: \"-2\" is not a seed: -1, or a number from 0 to "
                "18446744073709551615" +
                    help);
    expect_line(run_magnetar("run --seed 18446744073709551616 -p hi"), 2,
                "magnetar run: --seed: \"18446744073709551616\" is not a seed: -1, or a number "
                "from 0 to 18446744073709551615" +
                    help);
}

TEST(CliErrors, UntilTheEndAndRepeatableSeeds) {
    REQUIRE_TRAINED();
    const std::string m = "run -m " + shell_quote(trained_model()) + " -t 2 --nothink ";
    // -n -1: until EOS (or the context).
    cmd_result r = run_magnetar(m + "-n -1 --temp 0 -p 'What is a magnetar?'");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_FALSE(r.out.empty());
    // A fresh seed is printed, and giving it back repeats the reply.
    r = run_magnetar(m + "-n 24 --seed -1 -p 'Tell me about magnetars.'");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::smatch sm;
    ASSERT_TRUE(std::regex_search(r.err, sm, std::regex(R"(seed: (\d+) \(--seed \1 repeats)")))
        << r.err;
    // Seeds above 2^63 (half of the fresh ones) repeat too.
    const std::string high = m + "-n 24 --seed 17000000000000000001 -p 'Tell me about magnetars.'";
    EXPECT_EQ(run_magnetar(high).out, run_magnetar(high).out);
    const cmd_result again =
        run_magnetar(m + "-n 24 --seed " + sm[1].str() + " -p 'Tell me about magnetars.'");
    ASSERT_EQ(again.rc, 0) << again.err;
    EXPECT_EQ(again.out, r.out);
    // --ignore-eos runs to -n.
    r = run_magnetar(m + "-n 300 --temp 0 --ignore-eos -p 'What is a magnetar?'");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("300 generated"), std::string::npos) << r.err;
    // A context above the trained one (4096 for the default model) warns.
    r = run_magnetar(m + "-c 8192 -n 2 -p hi");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("warning: --ctx 8192 is above the 4096 tokens the model was trained for"),
              std::string::npos)
        << r.err;
}

TEST(CliErrors, GpuLayersWithoutAGpuIsOneLine) {
    REQUIRE_TRAINED();
    const std::string m = "run -m " + shell_quote(trained_model()) + " -t 2 -n 2 -p hi ";
    const cmd_result probe = run_magnetar(m + "--backend cuda");
    if (probe.rc == 0) GTEST_SKIP() << "a GPU is present here";
    const cmd_result r = run_magnetar(m + "-ngl 99");
    EXPECT_EQ(r.rc, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("magnetar: error: -ngl 99 asks for the GPU, but ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("-ngl 0 (or no -ngl) runs on the CPU"), std::string::npos) << r.err;
    EXPECT_EQ(run_magnetar(m + "-ngl 0 --nothink").rc, 0);
    const cmd_result both = run_magnetar(m + "-ngl 0 --backend cuda");
    EXPECT_EQ(both.rc, 1);
    EXPECT_NE(both.err.find("-ngl 0 asks for the CPU but --backend is cuda"), std::string::npos)
        << both.err;
}

TEST(CliErrors, ColorFollowsTheTerminalNoColorAndTheFlag) {
    REQUIRE_TRAINED();
    const std::vector<std::string> argv = {magnetar_bin(), "run", "-m", trained_model(),
                                           "-t",           "2",   "-n", "12",
                                           "--temp",       "0",   "-p", "hi"};
    const std::string dim = "\x1b[90m";
    {
        pty_process p(argv, {"TERM=xterm", "NO_COLOR="});
        EXPECT_EQ(p.wait_exit(60), 0);
        EXPECT_NE(p.output().find(dim), std::string::npos) << p.output();
    }
    {
        pty_process p(argv, {"TERM=xterm", "NO_COLOR=1"});
        EXPECT_EQ(p.wait_exit(60), 0);
        EXPECT_EQ(p.output().find(dim), std::string::npos) << p.output();
    }
    // Piped: plain unless --color always.
    const std::string m = "run -m " + shell_quote(trained_model()) + " -t 2 -n 12 --temp 0 -p hi";
    EXPECT_EQ(run_magnetar(m).out.find(dim), std::string::npos);
    EXPECT_NE(run_magnetar(m + " --color always").out.find(dim), std::string::npos);
    expect_line(run_magnetar(m + " --color blue"), 2,
                "magnetar run: --color: \"blue\" is not one of: auto always never (magnetar run "
                "--help lists the options)");
}

TEST(CliErrors, OutputsThatExistAreRefusedWithoutOverwrite) {
    namespace fs = std::filesystem;
    const std::string dir = temp_dir();
    const std::string in = dir + "/in.gguf", out = dir + "/out.gguf";
    {
        std::ofstream(in) << "not a model";
        std::ofstream(out) << "keep me";
    }
    expect_line(run_magnetar("quantize " + in + " " + in), 1,
                "magnetar: error: " + in +
                    " is also the input; give another output path, or --overwrite to replace "
                    "the input");
    expect_line(run_magnetar("quantize " + in + " " + out), 1,
                "magnetar: error: " + out + " exists; --overwrite replaces it");
    std::ifstream kept(out);
    std::string text;
    std::getline(kept, text);
    EXPECT_EQ(text, "keep me");
    // With --overwrite the command goes on (and here fails on the input, which is no model).
    const cmd_result r = run_magnetar("quantize --overwrite " + in + " " + out);
    EXPECT_EQ(r.rc, 1);
    EXPECT_EQ(r.err.find("exists"), std::string::npos) << r.err;

    const std::string model = dir + "/v41.gguf";
    ASSERT_EQ(run_magnetar("gen-model --preset v41-tiny -q -o " + model).rc, 0);
    expect_line(run_magnetar("gen-model --preset v41-tiny -q -o " + model), 1,
                "magnetar: error: " + model + " exists; --overwrite replaces it");
    EXPECT_EQ(run_magnetar("gen-model --preset v41-tiny -q --overwrite -o " + model).rc, 0);
    expect_line(run_magnetar("imatrix -m " + model + " -f " + in + " -o " + out), 1,
                "magnetar: error: " + out + " exists; --overwrite replaces it");
    EXPECT_TRUE(fs::exists(model));
}

TEST(CliErrors, ConstrainedOutputIsDeclinedWithAReason) {
    for (const std::string flag :
         {"--grammar 'root ::= \"a\"'", "--json-schema={}", "--grammar-file g.gbnf"}) {
        const cmd_result r = run_magnetar("run -p hi " + flag);
        EXPECT_EQ(r.rc, 2) << flag;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        const std::string name = flag.substr(0, flag.find_first_of(" ="));
        EXPECT_EQ(r.err.rfind("magnetar run: " + name +
                                  ": constrained output (grammars, JSON schemas) is not offered",
                              0),
                  0u)
            << r.err;
        EXPECT_NE(r.err.find("response_format"), std::string::npos) << r.err;
    }
}

std::string tiny_run(const std::string& extra = "") {
    return "run -m " + shell_quote(trained_model()) + " -t 2 -n 8 --temp 0.7 --seed 5 -p hi" +
           extra;
}

TEST(CliLog, LogDisableLeavesOnlyErrors) {
    REQUIRE_TRAINED();
    const cmd_result plain = run_magnetar(tiny_run());
    ASSERT_EQ(plain.rc, 0) << plain.err;
    EXPECT_NE(plain.err.find("prefill: "), std::string::npos) << plain.err;
    const cmd_result quiet = run_magnetar(tiny_run(" --log-disable"));
    EXPECT_EQ(quiet.rc, 0);
    EXPECT_EQ(quiet.err, "");
    EXPECT_EQ(quiet.out, plain.out);
    // Warnings are notes too; errors stay.
    const cmd_result warned = run_magnetar(tiny_run(" --think-max --log-disable"));
    EXPECT_EQ(warned.rc, 0);
    EXPECT_EQ(warned.err, "");
    EXPECT_NE(run_magnetar(tiny_run(" --think-max")).err.find("warning: Think Max"),
              std::string::npos);
    const cmd_result failed = run_magnetar("run -m /nonexistent.gguf -p hi --log-disable");
    EXPECT_EQ(failed.rc, 1);
    EXPECT_EQ(failed.err.rfind("magnetar: error: /nonexistent.gguf: cannot open", 0), 0u)
        << failed.err;
    const cmd_result both = run_magnetar("run -p hi --verbose --log-disable");
    EXPECT_EQ(both.rc, 2);
    EXPECT_NE(both.err.find("--verbose excludes --log-disable"), std::string::npos) << both.err;
}

TEST(CliLog, VerboseNamesTheModelAndTheSettings) {
    REQUIRE_TRAINED();
    const std::string extra = " --repeat-penalty 1.1 --stop xyz";
    const cmd_result plain = run_magnetar(tiny_run(extra));
    const cmd_result r = run_magnetar(tiny_run(extra + " --verbose"));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, plain.out);
    for (const std::string& line :
         {"magnetar: model " + trained_model() + ": ", std::string(" layers, width "),
          std::string("magnetar: weights mapped from the file; MTP block, tokenizer\n"),
          std::string("magnetar: backend cpu (2 threads"),
          std::string("magnetar: session: context 32768 tokens, prompt "),
          std::string("magnetar: sampling: temperature 0.7, top-k 0, top-p 1, min-p 0.05, seed "
                      "5; penalties: repeat 1.1, presence 0, frequency 0 over the last 64 "
                      "tokens; stop \"xyz\"\n")}) {
        EXPECT_NE(r.err.find(line), std::string::npos) << line << "\n" << r.err;
        EXPECT_EQ(plain.err.find(line), std::string::npos) << line;
    }
}

TEST(CliLog, NoMmapAndMlockKeepTheReply) {
    REQUIRE_TRAINED();
    const cmd_result base = run_magnetar(tiny_run(" --verbose"));
    ASSERT_EQ(base.rc, 0) << base.err;
    const cmd_result copied = run_magnetar(tiny_run(" --verbose --no-mmap"));
    EXPECT_EQ(copied.rc, 0) << copied.err;
    EXPECT_EQ(copied.out, base.out);
    EXPECT_NE(copied.err.find("magnetar: weights read into memory;"), std::string::npos)
        << copied.err;
    const cmd_result locked = run_magnetar(tiny_run(" --verbose --mlock --no-mmap"));
    EXPECT_EQ(locked.rc, 0) << locked.err;
    EXPECT_EQ(locked.out, base.out);
    // Granted (root, or a limit above the file) or refused with the reason, never both.
    const bool granted =
        locked.err.find("magnetar: weights read into memory, locked in RAM;") != std::string::npos;
    const bool refused = locked.err.find("magnetar: warning: --mlock: ") != std::string::npos;
    EXPECT_NE(granted, refused) << locked.err;

    // Without CAP_IPC_LOCK and with a locked-memory limit of zero the lock is refused: one
    // warning with the limit, and the same reply.
    if (std::system("command -v prlimit >/dev/null && command -v setpriv >/dev/null") != 0)
        GTEST_SKIP() << "prlimit or setpriv missing";
    const cmd_result limited = run_magnetar(
        tiny_run(" --mlock"), "", "prlimit --memlock=0:0 setpriv --bounding-set=-ipc_lock");
    EXPECT_EQ(limited.rc, 0) << limited.err;
    EXPECT_EQ(limited.out, base.out);
    EXPECT_NE(limited.err.find("magnetar: warning: --mlock: " + trained_model() + ": cannot lock "),
              std::string::npos)
        << limited.err;
    EXPECT_NE(limited.err.find("in RAM: the locked-memory limit is 0 B (raise it with `ulimit "
                               "-l`"),
              std::string::npos)
        << limited.err;
}

}  // namespace
}  // namespace magnetar::test
