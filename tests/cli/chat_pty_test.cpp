// `magnetar chat` driven through a pseudo-terminal, as a user would: multi-turn with prefix
// reuse, /nothink, dimmed thinking, Ctrl+C during a reply, /save then /load continuing
// identically, and the plain-line mode when standard input is not a terminal.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_support.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

using test::cli_tiny_model;
using test::pty_process;

const std::string kPrompt = "magnetar> ";

std::vector<std::string> chat_argv(const std::vector<std::string>& extra) {
    std::vector<std::string> a = {test::magnetar_bin(), "chat", "-m", cli_tiny_model(), "-t", "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

std::vector<std::string> chat_env() {
    return {"HOME=" + test::temp_dir(), "TERM=xterm"};
}

// Sends a line and waits for the next prompt; returns the output between the two.
std::string say(pty_process& p, const std::string& line, double timeout_s = 60) {
    const size_t from = p.output().size();
    p.send(line + "\r");
    const size_t end = p.expect(kPrompt, from, timeout_s);
    EXPECT_NE(end, std::string::npos) << "no prompt after \"" << line << "\":\n"
                                      << p.output().substr(from);
    return end == std::string::npos ? p.output().substr(from) : p.output().substr(from, end - from);
}

// The numbers of "prefill: X t/s, generation: Y t/s (P prefilled, G generated)".
bool timing(const std::string& turn, long* prefilled, long* generated) {
    const size_t at = turn.find("prefill: ");
    if (at == std::string::npos) return false;
    const size_t paren = turn.find('(', at);
    return paren != std::string::npos &&
           std::sscanf(turn.c_str() + paren, "(%ld prefilled, %ld generated)", prefilled,
                       generated) == 2;
}

// The reply text of a turn: after the echoed input line, before the timing line. The line
// editor may redraw the input before its echo is complete, so the reply starts after the
// line that ends the last copy of `input` when one is given.
std::string reply(const std::string& turn, const std::string& input = "") {
    const size_t end = turn.find("prefill: ");
    size_t from = 0;
    if (!input.empty() && end != std::string::npos) {
        const size_t at = turn.rfind(input, end);
        if (at != std::string::npos) from = at + input.size();
    }
    const size_t start = turn.find('\n', from);
    if (start == std::string::npos || end == std::string::npos || end < start) return turn;
    return turn.substr(start + 1, end - start - 1);
}

TEST(ChatPty, MultiTurnReusesPrefixAndNothink) {
    std::string system;
    for (int i = 0; i < 40; ++i) system += "Answer briefly and politely. ";
    pty_process p(chat_argv({"-c", "1024", "-n", "6", "--seed", "3", "--system", system}),
                  chat_env());
    ASSERT_NE(p.expect(kPrompt, 0), std::string::npos) << p.output();

    const std::string t1 = say(p, "Hello there");
    long pre1 = 0, gen1 = 0;
    ASSERT_TRUE(timing(t1, &pre1, &gen1)) << t1;
    EXPECT_GT(pre1, 200);  // BOS, the long system prompt and the turn
    EXPECT_NE(t1.find("\033[90m"), std::string::npos) << "thinking is dimmed on a terminal";

    const std::string t2 = say(p, "And again");
    long pre2 = 0, gen2 = 0;
    ASSERT_TRUE(timing(t2, &pre2, &gen2)) << t2;
    EXPECT_LT(pre2, 20) << "the second turn prefills only its new suffix";

    EXPECT_NE(say(p, "/nothink").find("thinking: off"), std::string::npos);
    const std::string t3 = say(p, "No thinking now");
    long pre3 = 0, gen3 = 0;
    ASSERT_TRUE(timing(t3, &pre3, &gen3)) << t3;
    EXPECT_LT(pre3, 20);
    EXPECT_EQ(reply(t3).find("\033[90m"), std::string::npos) << t3;

    EXPECT_NE(say(p, "/help").find("/save FILE"), std::string::npos);
    EXPECT_NE(say(p, "/bogus").find("unknown command"), std::string::npos);
    p.send("/quit\r");
    EXPECT_EQ(p.wait_exit(), 0);
}

TEST(ChatPty, CtrlCStopsGenerationAndSessionStaysUsable) {
    pty_process p(chat_argv({"-c", "4096", "--nothink", "--seed", "9"}), chat_env());
    ASSERT_NE(p.expect(kPrompt, 0), std::string::npos) << p.output();
    for (int round = 0; round < 2; ++round) {
        const size_t from = p.output().size();
        p.send(round == 0 ? "Write a very long essay\r" : "Continue\r");
        // Let the reply start, then interrupt it.
        ASSERT_TRUE(p.wait_size(from + 60, 60)) << p.output().substr(from);
        p.send("\x03");
        const size_t end = p.expect(kPrompt, from, 30);
        ASSERT_NE(end, std::string::npos) << p.output().substr(from);
        const std::string turn = p.output().substr(from, end - from);
        EXPECT_NE(turn.find("(interrupted)"), std::string::npos) << turn;
        long pre = 0, gen = 0;
        ASSERT_TRUE(timing(turn, &pre, &gen)) << turn;
        EXPECT_GT(gen, 0);
        EXPECT_LT(gen, 4000);
    }
    p.send("/quit\r");
    EXPECT_EQ(p.wait_exit(), 0);
}

TEST(ChatPty, SaveThenLoadContinuesIdentically) {
    const std::string file = test::temp_dir() + "/conversation.chat";
    const std::vector<std::string> args = {"-c", "1024", "-n", "8", "--seed", "21"};
    std::string first;
    {
        pty_process p(chat_argv(args), chat_env());
        ASSERT_NE(p.expect(kPrompt, 0), std::string::npos) << p.output();
        say(p, "What is a magnetar?");
        EXPECT_NE(say(p, "/save " + file).find("saved 2 turns"), std::string::npos);
        first = reply(say(p, "Tell me more"), "Tell me more");
        p.send("/exit\r");
        EXPECT_EQ(p.wait_exit(), 0);
    }
    {
        pty_process p(chat_argv(args), chat_env());
        ASSERT_NE(p.expect(kPrompt, 0), std::string::npos) << p.output();
        EXPECT_NE(say(p, "/load " + file).find("loaded 2 turns"), std::string::npos);
        const std::string t = say(p, "Tell me more");
        long pre = 0, gen = 0;
        ASSERT_TRUE(timing(t, &pre, &gen)) << t;
        EXPECT_LT(pre, 20) << "the loaded session state is reused";
        EXPECT_EQ(reply(t, "Tell me more"), first);
        p.send("/quit\r");
        EXPECT_EQ(p.wait_exit(), 0);
    }
}

TEST(ChatPlain, PipedInputAndErrors) {
    const std::string dir = test::temp_dir();
    std::string out;
    const std::string cmd =
        "printf 'hello\\n/ctx 512\\nagain\\n/read /nonexistent.txt\\n"
        "/load /nonexistent.chat\\n' | " +
        test::magnetar_bin() + " chat -m " + cli_tiny_model() + " -t 2 -c 1024 -n 4 --seed 5";
    ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
    EXPECT_NE(out.find("context: 512 tokens"), std::string::npos) << out;
    EXPECT_NE(out.find("/nonexistent.txt: cannot open"), std::string::npos) << out;
    EXPECT_NE(out.find("/nonexistent.chat: cannot open"), std::string::npos) << out;
    EXPECT_EQ(out.find("\033["), std::string::npos) << "no colours off a terminal";
    size_t n = 0;
    for (size_t at = out.find("generation: "); at != std::string::npos;
         at = out.find("generation: ", at + 1)) {
        ++n;
    }
    EXPECT_EQ(n, 2u) << out;
}

// -b / --batch-size (the prefill chunk) on chat as on run: a different chunk, the same replies.
TEST(ChatPlain, BatchSizeKeepsTheReplies) {
    auto replies = [](const std::string& flags) {
        std::string out;
        const std::string cmd = "printf 'hello there\\nand again\\n' | " + test::magnetar_bin() +
                                " chat -m " + cli_tiny_model() + " -t 2 -c 1024 -n 6 --temp 0 " +
                                flags + " 2>/dev/null";
        EXPECT_EQ(test::run_command(cmd, &out), 0) << out;
        // Without the timing lines (their rates differ run to run).
        std::istringstream in(out);
        std::string kept;
        for (std::string line; std::getline(in, line);)
            if (line.rfind("prefill: ", 0) != 0) kept += line + "\n";
        return kept;
    };
    const std::string plain = replies("");
    EXPECT_FALSE(plain.empty());
    EXPECT_EQ(replies("-b 3"), plain);
    EXPECT_EQ(replies("--batch-size 5"), plain);
    std::string out;
    EXPECT_NE(test::run_command(test::magnetar_bin() + " chat -b 0 2>&1", &out), 0);
    EXPECT_NE(out.find("magnetar chat: --chunk: 0 is out of range"), std::string::npos) << out;
}

TEST(ChatPlain, ClearSystemContinuationAndTheOverflowHint) {
    std::string out;
    const std::string cmd =
        "printf 'first \\\\\\nline\\n/system\\n/system Be brief.\\n/system\\n/clear\\n"
        "/system \"\"\\n/system\\n' | " +
        test::magnetar_bin() + " chat -m " + cli_tiny_model() + " -t 2 -n 4 --seed 5";
    ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
    // "first \" + "line": one message of two lines (the continuation prompt, one reply).
    EXPECT_NE(out.find("....... "), std::string::npos) << out;
    size_t replies = 0;
    for (size_t at = out.find("generation: "); at != std::string::npos;
         at = out.find("generation: ", at + 1)) {
        ++replies;
    }
    EXPECT_EQ(replies, 1u) << out;
    EXPECT_NE(out.find("system prompt: \"You are a helpful assistant\""), std::string::npos) << out;
    EXPECT_NE(out.find("system prompt set"), std::string::npos) << out;
    EXPECT_NE(out.find("system prompt: \"Be brief.\""), std::string::npos) << out;
    EXPECT_NE(out.find("conversation cleared"), std::string::npos) << out;
    EXPECT_NE(out.find("system prompt removed"), std::string::npos) << out;
    EXPECT_NE(out.find("system prompt: (none)"), std::string::npos) << out;

    // A message that does not fit names the way out.
    std::string words;
    for (int i = 0; i < 40; ++i) words += "magnetar ";
    const std::string small = "printf '" + words + "\\n' | " + test::magnetar_bin() + " chat -m " +
                              cli_tiny_model() + " -t 2 -c 32 -n 4";
    ASSERT_EQ(test::run_command(small, &out), 0) << out;
    EXPECT_NE(out.find("(the message was not added); /ctx N gives a larger context, /clear "
                       "starts over"),
              std::string::npos)
        << out;
}

TEST(ChatPty, CtrlDEndsThePromptLine) {
    pty_process p(chat_argv({"-n", "4"}), chat_env());
    ASSERT_NE(p.expect(kPrompt, 0), std::string::npos) << p.output();
    ASSERT_TRUE(p.wait_line_editor()) << p.output();
    const size_t from = p.output().size();
    p.send("\x04");
    EXPECT_EQ(p.wait_exit(), 0);
    const std::string tail = p.output().substr(from);
    EXPECT_NE(tail.find('\n'), std::string::npos) << "no newline after Ctrl+D: " << tail;
}

}  // namespace
}  // namespace magnetar
