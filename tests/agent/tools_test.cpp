// The agent's tool layer on real temporary directories: paths stay inside the working directory
// (.., absolute paths, symbolic links), read windows / more / whole-file refusal / size cap /
// binary files, write, edit by exact text (zero, one, several occurrences) and by line ranges
// checked against the lines last shown (never shown, changed since, numbers moved by an edit),
// search (literal, regular expression, glob, .git skipped, the cap), list, and shell jobs
// (output, exit status, the timeout and stop killing the whole process group, head-and-tail
// reports), plus the dispatcher's argument checks.
#include "agent/tools.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace fs = std::filesystem;

namespace magnetar::agent {
namespace {

using json = nlohmann::ordered_json;

struct temp_root {
    fs::path path;
    temp_root() {
        path = fs::temp_directory_path() /
               ("magnetar-agent-test-" + std::to_string(::getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~temp_root() { fs::remove_all(path); }
    void put(const std::string& rel, const std::string& text) const {
        fs::create_directories((path / rel).parent_path());
        std::ofstream(path / rel, std::ios::binary) << text;
    }
    std::string get(const std::string& rel) const {
        std::ifstream in(path / rel, std::ios::binary);
        return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    }
};

std::string numbered(int n) {
    std::string s;
    for (int i = 1; i <= n; ++i) s += "line " + std::to_string(i) + "\n";
    return s;
}

// Whether `pid` still runs: a zombie (ended, not yet reaped by whoever inherited it) does not.
bool alive(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) return false;
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

bool has(const tool_result& r, const std::string& what) {
    return r.text.find(what) != std::string::npos;
}

TEST(AgentWorkspace, PathsStayInsideTheRoot) {
    temp_root t;
    t.put("a/b.txt", "x\n");
    const fs::path outside = t.path.parent_path() / ("outside-" + std::to_string(::getpid()));
    fs::create_directories(outside);
    std::ofstream(outside / "secret.txt") << "s\n";
    fs::create_symlink(outside, t.path / "escape");
    workspace ws(t.path);
    std::string why;
    EXPECT_FALSE(ws.resolve("a/b.txt", &why).empty());
    EXPECT_FALSE(ws.resolve("a/../a/b.txt", &why).empty());
    EXPECT_FALSE(ws.resolve("new/file.txt", &why).empty());  // not there yet: fine
    for (const std::string& p :
         {std::string("../x"), std::string("a/../../x"), (outside / "secret.txt").string(),
          std::string("escape/secret.txt"), std::string("/etc/passwd")}) {
        why.clear();
        EXPECT_TRUE(ws.resolve(p, &why).empty()) << p;
        EXPECT_NE(why.find("outside the working directory"), std::string::npos) << why;
    }
    EXPECT_TRUE(ws.resolve("", &why).empty());
    workspace wider(t.path, {outside});
    EXPECT_FALSE(wider.resolve((outside / "secret.txt").string(), &why).empty());
    EXPECT_EQ(ws.display(t.path / "a/b.txt"), "a/b.txt");
    fs::remove_all(outside);
}

TEST(AgentTools, ReadShowsNumberedWindowsAndMoreContinues) {
    temp_root t;
    t.put("f.txt", numbered(600));
    agent_tools tools(t.path);
    tool_result r = tools.call("read", {{"path", "f.txt"}});
    ASSERT_TRUE(r.ok) << r.text;
    EXPECT_TRUE(has(r, "     1\tline 1\n"));
    EXPECT_TRUE(has(r, "   250\tline 250\n"));
    EXPECT_FALSE(has(r, "line 251\n"));
    EXPECT_TRUE(has(r, "[f.txt: lines 1-250 of 600; `more` continues at line 251]"));
    r = tools.call("more", json::object());
    EXPECT_TRUE(has(r, "   251\tline 251\n")) << r.text;
    EXPECT_TRUE(has(r, "lines 251-500 of 600"));
    r = tools.call("read", {{"path", "f.txt"}, {"offset", "590"}, {"limit", 5}});
    EXPECT_TRUE(has(r, "lines 590-594 of 600")) << r.text;
    r = tools.call("read", {{"path", "f.txt"}, {"offset", 601}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "offset 601 is outside 1..600")) << r.text;
    // Whole-file mode only when it fits the result budget.
    tools.files().limits().max_result_bytes = 1000;
    r = tools.call("read", {{"path", "f.txt"}, {"whole", true}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "does not fit in one result")) << r.text;
    r = tools.call("read", {{"path", "f.txt"}});  // a window is cut at the budget instead
    EXPECT_TRUE(r.ok);
    EXPECT_LE(r.text.size(), 1200u);
    EXPECT_TRUE(has(r, "`more` continues at line"));
}

TEST(AgentTools, ReadRefusesLargeMissingAndBinaryFiles) {
    temp_root t;
    t.put("big.txt", std::string(3000, 'x'));
    t.put("bin.dat", std::string("ab\0cd", 5));
    fs::create_directories(t.path / "dir");
    file_limits lim;
    lim.max_file_bytes = 2048;
    agent_tools tools(t.path, {}, lim);
    tool_result r = tools.call("read", {{"path", "big.txt"}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "more than the 2.00 KiB a file tool reads")) << r.text;
    r = tools.call("read", {{"path", "bin.dat"}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "looks binary")) << r.text;
    EXPECT_TRUE(has(tools.call("read", {{"path", "nope.txt"}}), "does not exist"));
    EXPECT_TRUE(has(tools.call("read", {{"path", "dir"}}), "is not a regular file"));
    EXPECT_TRUE(has(tools.call("read", {{"path", "../etc"}}), "outside the working directory"));
}

TEST(AgentTools, WriteCreatesAndReplaces) {
    temp_root t;
    agent_tools tools(t.path);
    tool_result r = tools.call("write", {{"path", "sub/dir/new.txt"}, {"content", "a\nb\n"}});
    ASSERT_TRUE(r.ok) << r.text;
    EXPECT_TRUE(has(r, "created sub/dir/new.txt: 4 bytes, 2 lines"));
    EXPECT_EQ(t.get("sub/dir/new.txt"), "a\nb\n");
    r = tools.call("write", {{"path", "sub/dir/new.txt"}, {"content", "c\n"}});
    EXPECT_TRUE(has(r, "replaced")) << r.text;
    EXPECT_EQ(t.get("sub/dir/new.txt"), "c\n");
    EXPECT_FALSE(tools.call("write", {{"path", "../x.txt"}, {"content", "no"}}).ok);
    EXPECT_FALSE(fs::exists(t.path.parent_path() / "x.txt"));
    EXPECT_FALSE(tools.call("write", {{"path", "sub"}, {"content", "no"}}).ok);
    // Lines the model wrote may be edited by number at once.
    r = tools.call("edit",
                   {{"path", "sub/dir/new.txt"}, {"first", 1}, {"last", 1}, {"new", "d\n"}});
    EXPECT_TRUE(r.ok) << r.text;
    EXPECT_EQ(t.get("sub/dir/new.txt"), "d\n");
}

TEST(AgentTools, EditByExactUniqueText) {
    temp_root t;
    t.put("c.cpp", "int a = 1;\nint b = 1;\nint a2 = 1;\n");
    agent_tools tools(t.path);
    tool_result r = tools.call("edit", {{"path", "c.cpp"}, {"old", "= 1;"}, {"new", "= 2;"}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "occurs 3 times")) << r.text;
    r = tools.call("edit", {{"path", "c.cpp"}, {"old", "int q"}, {"new", "x"}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "does not occur")) << r.text;
    r = tools.call("edit", {{"path", "c.cpp"}, {"old", "int b = 1;"}, {"new", "int b = 2;\n// b"}});
    ASSERT_TRUE(r.ok) << r.text;
    EXPECT_TRUE(has(r, "at line 2 replaced (2 lines now)")) << r.text;
    EXPECT_EQ(t.get("c.cpp"), "int a = 1;\nint b = 2;\n// b\nint a2 = 1;\n");
    EXPECT_FALSE(tools.call("edit", {{"path", "c.cpp"}, {"old", ""}, {"new", "x"}}).ok);
}

TEST(AgentTools, EditByLinesNeedsTheLinesAsShown) {
    temp_root t;
    t.put("f.txt", numbered(10));
    agent_tools tools(t.path);
    tool_result r =
        tools.call("edit", {{"path", "f.txt"}, {"first", 3}, {"last", 4}, {"new", "three\n"}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "line 3 of f.txt was never shown")) << r.text;
    ASSERT_TRUE(tools.call("read", {{"path", "f.txt"}, {"offset", 1}, {"limit", 6}}).ok);
    // Someone else changes line 4 after it was shown.
    t.put("f.txt",
          "line 1\nline 2\nline 3\nLINE 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\n");
    r = tools.call("edit", {{"path", "f.txt"}, {"first", 3}, {"last", 4}, {"new", "three\n"}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "line 4 of f.txt changed since it was shown")) << r.text;
    ASSERT_TRUE(tools.call("read", {{"path", "f.txt"}, {"limit", 6}}).ok);
    r = tools.call("edit", {{"path", "f.txt"}, {"first", 3}, {"last", 4}, {"new", "three\n"}});
    ASSERT_TRUE(r.ok) << r.text;
    EXPECT_TRUE(has(r, "lines 3-4 replaced by 1 line (9 lines now)")) << r.text;
    // Line 6 was shown as line 6 and is now line 5: editable by its new number.
    r = tools.call("edit", {{"path", "f.txt"}, {"first", 5}, {"last", 5}, {"new", "six\n"}});
    ASSERT_TRUE(r.ok) << r.text;
    EXPECT_EQ(t.get("f.txt"),
              "line 1\nline 2\nthree\nline 5\nsix\nline 7\nline 8\nline 9\nline 10\n");
    // Line 7 (now 6) was never shown.
    EXPECT_FALSE(
        tools.call("edit", {{"path", "f.txt"}, {"first", 6}, {"last", 6}, {"new", "x\n"}}).ok);
    // An insertion (last = first - 1) checks the line before it.
    r = tools.call("edit",
                   {{"path", "f.txt"}, {"first", 2}, {"last", 1}, {"new", "one and a half\n"}});
    ASSERT_TRUE(r.ok) << r.text;
    EXPECT_EQ(t.get("f.txt").substr(0, 30), "line 1\none and a half\nline 2\nt");
    EXPECT_FALSE(
        tools.call("edit", {{"path", "f.txt"}, {"first", 50}, {"last", 51}, {"new", ""}}).ok);
    EXPECT_FALSE(tools.call("edit", {{"path", "f.txt"}, {"first", 2}, {"new", ""}}).ok);
    EXPECT_FALSE(
        tools
            .call("edit", {{"path", "f.txt"}, {"old", "a"}, {"first", 2}, {"last", 2}, {"new", ""}})
            .ok);
}

TEST(AgentTools, SearchFindsLinesAndSkipsGit) {
    temp_root t;
    t.put("src/a.cpp", "int main() {}\n// TODO fix\n");
    t.put("src/b.h", "// TODO header\n");
    t.put(".git/config", "TODO in git\n");
    t.put("data.bin", std::string("TODO\0bin", 8));
    agent_tools tools(t.path);
    tool_result r = tools.call("search", {{"pattern", "TODO"}});
    ASSERT_TRUE(r.ok) << r.text;
    EXPECT_TRUE(has(r, "src/a.cpp:2: // TODO fix\n")) << r.text;
    EXPECT_TRUE(has(r, "src/b.h:1: // TODO header\n"));
    EXPECT_FALSE(has(r, "git"));
    EXPECT_FALSE(has(r, "data.bin"));
    EXPECT_TRUE(has(r, "[2 matches in 2 files]"));
    r = tools.call("search", {{"pattern", "TODO"}, {"glob", "*.h"}});
    EXPECT_TRUE(has(r, "[1 match in 1 file]")) << r.text;
    r = tools.call("search", {{"pattern", "^int\\s+main"}, {"regex", true}});
    EXPECT_TRUE(has(r, "src/a.cpp:1: int main() {}")) << r.text;
    r = tools.call("search", {{"pattern", "(unclosed"}, {"regex", true}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "bad regular expression")) << r.text;
    r = tools.call("search", {{"pattern", "TODO"}, {"max", 1}});
    EXPECT_TRUE(has(r, "1 matches shown: the cap")) << r.text;
    EXPECT_TRUE(has(tools.call("search", {{"pattern", "zzz"}}), "[no match"));
    EXPECT_FALSE(tools.call("search", {{"pattern", "x"}, {"path", "../"}}).ok);
}

TEST(AgentTools, ListShowsFoldersFilesAndTheCap) {
    temp_root t;
    t.put("b.txt", "12345");
    t.put("a/x", "");
    fs::create_symlink("b.txt", t.path / "link");
    agent_tools tools(t.path);
    tool_result r = tools.call("list", json::object());
    ASSERT_TRUE(r.ok) << r.text;
    EXPECT_EQ(r.text, "a/\nb.txt  (5 B)\nlink -> b.txt\n[.: 3 entries]");
    file_limits lim;
    lim.list_entries = 1;
    agent_tools few(t.path, {}, lim);
    EXPECT_TRUE(has(few.call("list", {{"path", "."}}), "[.: 1 of 3 entries shown]"));
    EXPECT_FALSE(tools.call("list", {{"path", "b.txt"}}).ok);
}

TEST(AgentJobs, OutputStatusAndExitCode) {
    temp_root t;
    agent_tools tools(t.path);
    tool_result r = tools.call("bash", {{"command", "echo hello; pwd; exit 3"}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "hello\n")) << r.text;
    EXPECT_TRUE(has(r, t.path.string())) << r.text;  // runs in the working directory
    EXPECT_TRUE(has(r, "job 1 exited with status 3")) << r.text;
    r = tools.call("bash", {{"command", "echo err >&2; true"}});
    EXPECT_TRUE(r.ok);
    EXPECT_TRUE(has(r, "err\n"));
    EXPECT_FALSE(tools.call("bash_status", {{"job", 99}}).ok);
}

TEST(AgentJobs, TheTimeoutKillsTheWholeGroup) {
    temp_root t;
    agent_tools tools(t.path);
    const auto t0 = std::chrono::steady_clock::now();
    // A child of the shell writes its pid; the timeout must end it too.
    tool_result r = tools.call(
        "bash",
        {{"command", "sleep 30 & echo $! > child.pid; wait"}, {"timeout", 0.5}, {"wait", 10}});
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "killed after its timeout")) << r.text;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
    const pid_t child = std::stoi(t.get("child.pid"));
    for (int i = 0; i < 100 && alive(child); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(alive(child)) << "the job's child survived its timeout";
    EXPECT_FALSE(tools.call("bash", {{"command", "true"}, {"timeout", 1e9}}).ok);
}

TEST(AgentJobs, BackgroundJobStatusAndStop) {
    temp_root t;
    agent_tools tools(t.path);
    tool_result r = tools.call("bash", {{"command", "echo started; sleep 30"}, {"wait", 0.3}});
    EXPECT_TRUE(has(r, "job 1 running")) << r.text;
    EXPECT_TRUE(has(r, "started"));
    EXPECT_EQ(tools.jobs().running(), std::vector<int>{1});
    r = tools.call("bash_status", {{"job", "1"}});
    EXPECT_TRUE(has(r, "running")) << r.text;
    r = tools.call("bash_stop", {{"job", 1}});
    EXPECT_TRUE(has(r, "job 1 stopped")) << r.text;
    EXPECT_TRUE(tools.jobs().running().empty());
    r = tools.call("bash", {{"command", "sleep 0.2; echo late"}, {"wait", 0}});
    EXPECT_TRUE(has(r, "running")) << r.text;
    r = tools.call("bash_status", {{"job", 2}, {"wait", 5}});
    EXPECT_TRUE(has(r, "late")) << r.text;
    EXPECT_TRUE(has(r, "exited with status 0"));
}

TEST(AgentJobs, LongOutputIsReportedHeadThenTail) {
    temp_root t;
    job_limits jl;
    jl.report_bytes = 200;
    agent_tools tools(t.path, {}, {}, jl);
    tool_result r = tools.call("bash", {{"command", "seq 1 1000"}});
    ASSERT_TRUE(r.ok) << r.text;
    EXPECT_EQ(r.text.rfind("1\n2\n3\n", 0), 0u) << r.text;
    EXPECT_TRUE(has(r, "bytes left out")) << r.text;
    EXPECT_TRUE(has(r, "999\n1000\n")) << r.text;
}

TEST(AgentTools, TheDispatcherChecksNamesAndArguments) {
    temp_root t;
    agent_tools tools(t.path);
    tool_result r = tools.call("rm", json::object());
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(has(r, "no tool named rm (tools: bash, bash_status")) << r.text;
    EXPECT_TRUE(has(tools.call("read", json::object()), "missing parameter path"));
    EXPECT_TRUE(
        has(tools.call("read", {{"path", "x"}, {"colour", "red"}}), "unknown parameter colour"));
    EXPECT_TRUE(
        has(tools.call("read", {{"path", "x"}, {"offset", "ten"}}), "offset must be a integer"));
    EXPECT_TRUE(has(tools.call("read", json::array()), "must be an object"));
    EXPECT_EQ(tool_specs().size(), 9u);
}

}  // namespace
}  // namespace magnetar::agent
