// `magnetar agent` on the trained default model, driven through a pseudo-terminal as a user
// would: a request the model answers by listing a folder and reading the file it found there (the
// calls run, their results come back, the turn ends), /save, a restart that loads the system
// prompt's state from disk, /list, /switch continuing with only the new tokens evaluated, /quit
// asking to save, Ctrl+C, Ctrl+D; and -p with its errors off a terminal.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_support.h"
#include "core/paths.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

namespace fs = std::filesystem;
using test::pty_process;

const std::string kPrompt = "agent> ";

std::string trained_model() {
    return find_in_ancestors("models/magnetar-tiny.gguf");
}

struct agent_setup {
    std::string home = test::temp_dir();
    std::string work = home + "/work";
    std::string sessions = home + "/sessions";
    // The notes folder of the training corpus' world (scripts/train/world.py), with texts of
    // its own: the model was taught to find a file among those names.
    agent_setup() {
        fs::create_directories(work + "/notes");
        std::ofstream(work + "/notes/todo.txt") << "- Check the spin of Vel X-3.\n";
        std::ofstream(work + "/notes/observing_plan.txt") << "Observe Orion on Friday.\n";
        std::ofstream(work + "/notes/meeting.txt") << "The meeting is on Tuesday.\n";
        std::ofstream(work + "/notes/ideas.md") << "# Ideas\n\nA new catalogue.\n";
    }
    // Greedy unless `extra` gives sampling flags.
    std::vector<std::string> argv(const std::vector<std::string>& extra = {"--temp", "0"}) const {
        std::vector<std::string> a = {test::magnetar_bin(),
                                      "agent",
                                      "-m",
                                      trained_model(),
                                      "-t",
                                      "2",
                                      "-c",
                                      "4096",
                                      "--max-steps",
                                      "3",
                                      "--sessions",
                                      sessions,
                                      "--dir",
                                      work};
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    }
    std::vector<std::string> env() const { return {"HOME=" + home, "TERM=xterm"}; }
};

std::string say(pty_process& p, const std::string& line, double timeout_s = 90) {
    const size_t from = p.output().size();
    p.send(line + "\r");
    const size_t end = p.expect(kPrompt, from + line.size(), timeout_s);
    EXPECT_NE(end, std::string::npos) << "no prompt after \"" << line << "\":\n"
                                      << p.output().substr(from);
    return end == std::string::npos ? p.output().substr(from) : p.output().substr(from, end - from);
}

// The N of the status line's "prefill N tokens"; -1 without one.
long prefilled(const std::string& turn) {
    const size_t at = turn.find("| prefill ");
    long n = -1;
    if (at == std::string::npos || std::sscanf(turn.c_str() + at, "| prefill %ld", &n) != 1) {
        return -1;
    }
    return n;
}

// The 16-digit id after "saved session ".
std::string saved_id(const std::string& out) {
    const size_t at = out.find("saved session ");
    return at == std::string::npos ? "" : out.substr(at + 14, 16);
}

TEST(AgentPty, ToolRoundSaveRestartAndSwitch) {
    if (trained_model().empty()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    const agent_setup s;
    std::string id;
    {
        pty_process p(s.argv(), s.env());
        ASSERT_NE(p.expect(kPrompt, 0, 120), std::string::npos) << p.output();
        EXPECT_NE(p.output().find("tokens evaluated"), std::string::npos) << p.output();
        const std::string t =
            say(p, "There is a file about meeting somewhere in notes. What does it say?");
        // The folder listed, then the file read, each call shown, run and answered; the turn
        // ended with a reply after them.
        const size_t list = t.find("-> list path=notes");
        ASSERT_NE(list, std::string::npos) << t;
        const size_t read = t.find("-> read path=notes/meeting.txt", list);
        ASSERT_NE(read, std::string::npos) << t;
        EXPECT_NE(t.find("   ok: ", read), std::string::npos) << "the read's result came back\n"
                                                              << t;
        EXPECT_NE(t.find("[context "), std::string::npos) << t;
        EXPECT_EQ(t.find("0 tool calls"), std::string::npos) << t;
        EXPECT_NE(t.find("\033[90m"), std::string::npos) << "thinking is dimmed on a terminal";
        const std::string saved = say(p, "/save");
        id = saved_id(saved);
        ASSERT_EQ(id.size(), 16u) << saved;
        p.send("/quit\r");  // saved: no question
        EXPECT_EQ(p.wait_exit(), 0) << p.output();
    }
    {
        pty_process p(s.argv(), s.env());
        ASSERT_NE(p.expect(kPrompt, 0, 120), std::string::npos) << p.output();
        EXPECT_NE(p.output().find("state loaded from the disk cache"), std::string::npos)
            << p.output();
        EXPECT_NE(say(p, "/list").find(id), std::string::npos);
        const std::string sw = say(p, "/switch " + id.substr(0, 6));
        EXPECT_NE(sw.find("switched to " + id), std::string::npos) << sw;
        const std::string t = say(p, "Thanks.");
        const long n = prefilled(t);
        EXPECT_GT(n, 0) << t;
        EXPECT_LT(n, 20) << "only the new tokens are evaluated after /switch\n" << t;
        const std::string h = say(p, "/history 2");
        EXPECT_NE(h.find("user]"), std::string::npos) << h;
        EXPECT_NE(h.find("Thanks."), std::string::npos) << h;
        EXPECT_NE(say(p, "/help").find("/switch PREFIX"), std::string::npos);
        EXPECT_NE(say(p, "/bogus").find("unknown command"), std::string::npos);
        EXPECT_NE(say(p, "/switch ffffffffffffffff").find("no saved session starts with"),
                  std::string::npos);
        // Unsaved work: /quit asks, and "y" saves it under the same id.
        const size_t from = p.output().size();
        p.send("/quit\r");
        ASSERT_NE(p.expect("Save this session before leaving? [y/N]", from, 30), std::string::npos)
            << p.output().substr(from);
        p.send("y\r");
        EXPECT_EQ(p.wait_exit(), 0) << p.output().substr(from);
        EXPECT_NE(p.output().find("saved session " + id, from), std::string::npos)
            << p.output().substr(from);
    }
    {
        pty_process p(s.argv(), s.env());
        ASSERT_NE(p.expect(kPrompt, 0, 120), std::string::npos) << p.output();
        const std::string l = say(p, "/list");
        EXPECT_NE(l.find(id + " "), std::string::npos) << l;
        EXPECT_EQ(l.find(id, l.find(id) + 16), std::string::npos) << "saved once, under one id";
        // A new conversation starts from the system prompt again.
        EXPECT_NE(say(p, "/new").find("new session"), std::string::npos);
        ASSERT_TRUE(p.wait_line_editor()) << p.output();
        p.send("\x04");  // Ctrl+D on an empty line
        EXPECT_EQ(p.wait_exit(), 0);
    }
}

TEST(AgentPty, CtrlCInterruptsAndCtrlDLeaves) {
    if (trained_model().empty()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    const agent_setup s;
    pty_process p(s.argv({"--temp", "1", "--seed", "3", "-n", "300"}), s.env());
    ASSERT_NE(p.expect(kPrompt, 0, 120), std::string::npos) << p.output();
    const size_t from = p.output().size();
    p.send("Write a very long essay about magnetars.\r");
    ASSERT_TRUE(p.wait_size(from + 120, 60)) << p.output().substr(from);
    p.send("\x03");
    const size_t end = p.expect(kPrompt, from + 40, 30);
    ASSERT_NE(end, std::string::npos) << p.output().substr(from);
    const std::string turn = p.output().substr(from, end - from);
    EXPECT_NE(turn.find(", interrupted]"), std::string::npos) << turn;
    // The session goes on after the interrupt.
    const size_t next = p.output().size();
    p.send("Hello\r");
    const size_t status = p.expect("[context ", next, 90);
    EXPECT_NE(status, std::string::npos) << turn << "\n----\n" << p.output().substr(next);
    const size_t prompt = p.expect(kPrompt, status, 30);
    ASSERT_NE(prompt, std::string::npos);
    p.send("/quit\r");
    ASSERT_NE(p.expect("Save this session before leaving? [y/N]", prompt, 30), std::string::npos)
        << p.output().substr(prompt);
    p.send("n\r");
    EXPECT_EQ(p.wait_exit(), 0);
}

// Typed while the agent works: the footer shows the state, the draft and the queue; Tab sends
// the queued message now (the reply is interrupted), and it runs as the next turn.
TEST(AgentPty, TypeAheadQueuesAndTabSendsNow) {
    if (trained_model().empty()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    const agent_setup s;
    pty_process p(s.argv({"--temp", "1", "--seed", "3", "-n", "400"}), s.env());
    ASSERT_NE(p.expect(kPrompt, 0, 120), std::string::npos) << p.output();
    const size_t from = p.output().size();
    p.send("Write a very long essay about magnetars.\r");
    ASSERT_NE(p.expect("generating, ", from, 60), std::string::npos) << p.output().substr(from);
    p.send("Hello\r");
    ASSERT_NE(p.expect("| 1 queued] ", from, 30), std::string::npos) << p.output().substr(from);
    p.send("draft");
    ASSERT_NE(p.expect("| 1 queued] draft", from, 30), std::string::npos);
    p.send("\x15\t");  // clear the draft, then send the queued message now
    const size_t first = p.expect(", interrupted]", from, 60);
    ASSERT_NE(first, std::string::npos) << p.output().substr(from);
    // The queued message runs as the next turn, shown at a prompt.
    ASSERT_NE(p.expect(kPrompt + "Hello", first, 30), std::string::npos)
        << p.output().substr(first);
    const size_t second = p.expect("[context ", first, 90);
    ASSERT_NE(second, std::string::npos) << p.output().substr(first);
    // Nothing typed ahead: the prompt is empty; the footer row was cleared.
    ASSERT_NE(p.expect(kPrompt, second, 30), std::string::npos);
    EXPECT_NE(p.output().find("\x1b[r", from), std::string::npos) << "the scroll region is reset";
    ASSERT_TRUE(p.wait_line_editor());
    p.send("\x04");
    ASSERT_NE(p.expect("Save this session before leaving? [y/N]", second, 30), std::string::npos)
        << p.output().substr(second);
    p.send("n\r");
    EXPECT_EQ(p.wait_exit(), 0);
}

TEST(AgentPlain, OneShotAndErrors) {
    if (trained_model().empty()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    const agent_setup s;
    const std::string base = test::magnetar_bin() + " agent -m " + trained_model() +
                             " -t 2 --temp 0 --sessions " + s.sessions + " --dir " + s.work;
    std::string out;
    ASSERT_EQ(test::run_command(base + " -c 4096 -n 40 -p 'Tell me about magnetars.'", &out), 0)
        << out;
    EXPECT_NE(out.find("[context "), std::string::npos) << out;
    EXPECT_EQ(out.find("\033["), std::string::npos) << "no colours off a terminal";
    // A context too small for the tool contract, a missing folder: one line each, exit 1.
    EXPECT_NE(test::run_command(base + " -c 1024 -p hi", &out), 0);
    EXPECT_NE(out.find("leaves too little room (raise -c)"), std::string::npos) << out;
    EXPECT_NE(test::run_command(test::magnetar_bin() + " agent --dir /nonexistent/x -p hi", &out),
              0);
    EXPECT_NE(out.find("/nonexistent/x"), std::string::npos) << out;
}

}  // namespace
}  // namespace magnetar
