// `magnetar kv` and `magnetar serve` against a hostile disk KV cache directory and process
// limits: a FIFO named like an entry (never a hang), another model's entries (marked, not
// invalid), a file-size limit hit by a save (the request is still answered; no SIGXFSZ death,
// no temp file left), SIGTERM while the server is still starting; and the binary's own flags that
// reach every request: --log-disable, and the sampling defaults (--temp, the penalties); a port
// already in use refused; the request log; a named tool_choice on the trained model.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_support.h"
#include "core/paths.h"
#include "kvstore/kv_file.h"
#include "kvstore/kv_store.h"
#include "support/test_support.h"

namespace fs = std::filesystem;

namespace magnetar::test {
namespace {

using clock_type = std::chrono::steady_clock;

struct scratch_dir {
    std::string path;
    explicit scratch_dir(const std::string& tag) {
        path = (fs::temp_directory_path() /
                ("magnetar-kv-hostile-" + std::to_string(::getpid()) + "-" + tag))
                   .string();
        fs::remove_all(path);
    }
    ~scratch_dir() { fs::remove_all(path); }
};

// `magnetar ARGS` as a child: stdout on a pipe, stderr into a file, optional RLIMIT_FSIZE,
// SIGXFSZ and the signal mask at their defaults (what a shell would give it).
struct child {
    pid_t pid = -1;
    int out = -1;
    std::string err_path;
    std::string out_text;
    int rc = -2;  // exit status; -1: killed by a signal; -2: still running / timed out

    child(const std::vector<std::string>& args, const std::string& err,
          rlim_t fsize = RLIM_INFINITY)
        : err_path(err) {
        std::vector<std::string> full = {magnetar_bin()};
        full.insert(full.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (std::string& a : full) argv.push_back(a.data());
        argv.push_back(nullptr);
        int fds[2];
        if (::pipe(fds) != 0) return;
        pid = ::fork();
        if (pid == 0) {
            ::dup2(fds[1], 1);
            const int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (e >= 0) ::dup2(e, 2);
            const int in = ::open("/dev/null", O_RDONLY);
            if (in >= 0) ::dup2(in, 0);
            ::close(fds[0]);
            ::signal(SIGXFSZ, SIG_DFL);
            sigset_t none;
            sigemptyset(&none);
            ::sigprocmask(SIG_SETMASK, &none, nullptr);
            if (fsize != RLIM_INFINITY) {
                rlimit rl{fsize, fsize};
                ::setrlimit(RLIMIT_FSIZE, &rl);
            }
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        ::close(fds[1]);
        out = fds[0];
    }
    ~child() {
        if (rc == -2 && pid > 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
        if (out >= 0) ::close(out);
    }

    // Reads stdout until `needle` appears or the deadline passes.
    bool read_until(const std::string& needle, double timeout_s) {
        const auto end = clock_type::now() + std::chrono::duration<double>(timeout_s);
        while (out_text.find(needle) == std::string::npos) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(end - clock_type::now());
            if (left.count() <= 0) return false;
            pollfd p{out, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
            char buf[4096];
            const ssize_t n = ::read(out, buf, sizeof buf);
            if (n <= 0) return false;
            out_text.append(buf, static_cast<size_t>(n));
        }
        return true;
    }
    // Waits for the exit (SIGKILL after the deadline); returns rc.
    int wait(double timeout_s) {
        const auto end = clock_type::now() + std::chrono::duration<double>(timeout_s);
        int st = 0;
        while (::waitpid(pid, &st, WNOHANG) == 0) {
            if (clock_type::now() > end) return rc;  // the destructor kills it
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        read_until("\x01", 1);  // drain what is left
        return rc;
    }
    std::string err() const {
        std::ifstream f(err_path);
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str();
    }
};

// One saved entry of the tiny model for `key` (the tokens of a chat turn).
std::string save_entry(const std::string& dir, const kvstore::model_identity& id,
                       const std::string& user) {
    const Engine& e = cli_engine();
    std::vector<int32_t> toks;
    EXPECT_TRUE(e.tokenize_chat({{"user", user, ""}}, think_mode::off, 0, &toks).ok());
    session_options so;
    so.n_ctx = 1024;
    std::unique_ptr<Session> s;
    EXPECT_TRUE(e.create_session(so, &s).ok());
    EXPECT_TRUE(s->eval(toks).ok());
    fs::create_directories(dir);
    kvstore::write_request req;
    const std::string key = e.detokenize(toks);
    req.key_text = key;
    std::string path;
    const status st = kvstore::write_file(dir, *s, id, req, &path);
    EXPECT_TRUE(st.ok()) << st.message();
    return path;
}

TEST(KvCommand, FifoNamedLikeAnEntryNeverHangs) {
    scratch_dir dir("fifo");
    const std::string good =
        save_entry(dir.path, kvstore::identity_of_model(cli_tiny_model()), "hello there");
    const std::string fifo = dir.path + "/" + kvstore::file_name_for("a fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::string name = kvstore::sha1_hex("a fifo");
    const std::vector<std::vector<std::string>> runs = {
        {"kv", "ls", dir.path},
        {"kv", "verify", dir.path},
        {"kv", "verify", dir.path, "-m", cli_tiny_model()},
        {"kv", "show", dir.path, name.substr(0, 10)},
        {"kv", "verify", fifo},
    };
    for (const auto& args : runs) {
        child c(args, dir.path + "-stderr");
        ASSERT_GT(c.pid, 0);
        EXPECT_EQ(c.wait(30), 1) << args[1] << " hung or crashed: " << c.err();
        const std::string all = c.out_text + c.err();
        EXPECT_NE(all.find("not a regular file (FIFO)"), std::string::npos) << args[1] << all;
        if (args[1] == "verify" && args.size() > 3 && args[3] == "-m") {
            EXPECT_NE(c.out_text.find("1 ok, 1 bad"), std::string::npos) << c.out_text;
        }
    }
    EXPECT_TRUE(fs::is_fifo(fifo));
    EXPECT_TRUE(fs::exists(good));
    fs::remove(dir.path + "-stderr");
}

TEST(KvCommand, EntriesOfAnotherModelAreMarkedNotInvalid) {
    scratch_dir dir("foreign");
    kvstore::model_identity other = kvstore::identity_of_model(cli_tiny_model());
    other.fingerprint ^= 0x5a5a;
    save_entry(dir.path, other, "written by some other model");
    save_entry(dir.path, kvstore::identity_of_model(cli_tiny_model()), "and one of ours");
    cmd_result r =
        run_magnetar("kv ls " + shell_quote(dir.path) + " -m " + shell_quote(cli_tiny_model()));
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("other "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("1 entries written for another model"), std::string::npos) << r.out;
    r = run_magnetar("kv verify " + shell_quote(dir.path) + " -m " + shell_quote(cli_tiny_model()));
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("1 ok, 0 bad"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("1 of another model"), std::string::npos) << r.out;
}

// A plain HTTP/1.1 POST on loopback; returns the status code (0: no answer) and the body.
int http_post(int port, const std::string& target, const std::string& body, std::string* out) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    timeval tv{120, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string resp;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        const std::string req = "POST " + target +
                                " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                "Content-Type: application/json\r\nConnection: close\r\n"
                                "Content-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
        if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
            char buf[4096];
            ssize_t n;
            while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0)
                resp.append(buf, static_cast<size_t>(n));
        }
    }
    ::close(fd);
    if (resp.compare(0, 9, "HTTP/1.1 ") != 0) return 0;
    const size_t at = resp.find("\r\n\r\n");
    if (out) *out = at == std::string::npos ? "" : resp.substr(at + 4);
    return std::atoi(resp.c_str() + 9);
}

int port_of(const std::string& out) {
    const size_t at = out.find("listening on port ");
    return at == std::string::npos ? 0 : std::atoi(out.c_str() + at + 18);
}

// A greedy 4-token chat request whose prompt (60 short records) passes the disk cache's minimum.
nlohmann::json long_prompt_request() {
    std::string text;
    for (int i = 0; i < 60; ++i) text += "Record " + std::to_string(i) + ": the quick brown fox. ";
    return {{"model", "deepseek-v4-flash"},
            {"messages", {{{"role", "user"}, {"content", text}}}},
            {"max_tokens", 4},
            {"thinking", false},
            {"temperature", 0}};
}

// Under a file-size limit below one cache file, the cold save of a long prompt fails: the
// server logs it and answers the request (without the fix SIGXFSZ killed it mid-request), no
// temp file is left, and SIGTERM still stops it cleanly (its shutdown save fails the same way).
TEST(ServeDiskCache, FileSizeLimitFailsTheSaveNotTheRequest) {
    scratch_dir dir("fsize");
    child c({"serve", "-m", cli_tiny_model(), "-t", "1", "--port", "0", "-c", "2048", "-n", "4",
             "--kv-disk-dir", dir.path, "--kv-cache-min-tokens", "64", "--kv-cache-cold-max-tokens",
             "4096", "--kv-cache-boundary-align-tokens", "0"},
            dir.path + "-stderr", 64 << 10);
    ASSERT_GT(c.pid, 0);
    ASSERT_TRUE(c.read_until("listening on port", 60)) << c.err();
    const nlohmann::json body = long_prompt_request();
    std::string answer;
    const int code = http_post(port_of(c.out_text), "/v1/chat/completions", body.dump(), &answer);
    EXPECT_EQ(code, 200) << "the server died? " << c.err();
    if (code == 200) {
        const nlohmann::json j = nlohmann::json::parse(answer);
        EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 64);
    }
    ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
    EXPECT_EQ(c.wait(60), 0) << c.err();
    const std::string err = c.err();
    EXPECT_NE(err.find("kv store: save failed"), std::string::npos) << err;
    EXPECT_NE(err.find("File too large"), std::string::npos) << err;
    for (const auto& f : fs::directory_iterator(dir.path))
        EXPECT_EQ(f.path().string().find(".tmp."), std::string::npos) << f.path();
    fs::remove(dir.path + "-stderr");
}

// --log-disable leaves serve's stderr to errors: no start-up note, no disk-cache notes (the cold
// save of a long prompt and the save at shutdown), while the same run without it prints both.
TEST(ServeDiskCache, LogDisableSilencesTheNotes) {
    const nlohmann::json body = long_prompt_request();
    for (const bool quiet : {false, true}) {
        scratch_dir dir(quiet ? "logs-off" : "logs-on");
        std::vector<std::string> args = {"serve",
                                         "-m",
                                         cli_tiny_model(),
                                         "-t",
                                         "1",
                                         "--port",
                                         "0",
                                         "-c",
                                         "2048",
                                         "-n",
                                         "4",
                                         "--kv-disk-dir",
                                         dir.path,
                                         "--kv-cache-min-tokens",
                                         "64",
                                         "--kv-cache-boundary-align-tokens",
                                         "0"};
        if (quiet) args.push_back("--log-disable");
        child c(args, dir.path + "-stderr");
        ASSERT_GT(c.pid, 0);
        ASSERT_TRUE(c.read_until("listening on port", 60)) << c.err();
        EXPECT_EQ(http_post(port_of(c.out_text), "/v1/chat/completions", body.dump(), nullptr), 200)
            << c.err();
        ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
        EXPECT_EQ(c.wait(60), 0) << c.err();
        const std::string err = c.err();
        if (quiet) {
            EXPECT_EQ(err, "");
        } else {
            EXPECT_NE(err.find("magnetar serve: "), std::string::npos) << err;
            EXPECT_NE(err.find("kv store: "), std::string::npos) << err;
        }
        fs::remove(dir.path + "-stderr");
    }
}

// serve's sampling flags are every request's defaults: a completion without sampling fields
// from a server started with --temp 0 and penalties is the reply of `magnetar run` with the
// same flags (the CLI's penalised decoding is checked against a reference in run_test.cpp; the
// two render the same prompt), a request's OpenAI penalties add to the operator's, and the
// penalties change the reply (on the trained model, whose greedy text repeats itself).
TEST(ServeFlagsBinary, SamplingFlagsAreTheRequestDefaults) {
    const std::string model = find_in_ancestors("models/magnetar-tiny.gguf");
    if (model.empty()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    const std::string text = "What are magnetars?";
    auto answer = [&](const std::vector<std::string>& flags, const nlohmann::json& fields) {
        scratch_dir dir("sampling");
        std::vector<std::string> args = {"serve",  "-m", model, "-t",   "2",
                                         "--port", "0",  "-c",  "1024", "--log-disable"};
        args.insert(args.end(), flags.begin(), flags.end());
        child c(args, dir.path + "-stderr");
        std::string text_out;
        if (c.pid > 0 && c.read_until("listening on port", 60)) {
            nlohmann::json body = {{"prompt", text}, {"think", false}, {"max_tokens", 24}};
            if (fields.is_object()) body.update(fields);
            std::string raw;
            EXPECT_EQ(http_post(port_of(c.out_text), "/v1/completions", body.dump(), &raw), 200)
                << raw;
            const nlohmann::json j = nlohmann::json::parse(raw, nullptr, false);
            if (j.is_object()) text_out = j["choices"][0]["text"].get<std::string>();
        }
        ::kill(c.pid, SIGTERM);
        EXPECT_EQ(c.wait(60), 0) << c.err();
        fs::remove(dir.path + "-stderr");
        return text_out;
    };
    auto run = [&](const std::string& flags) {
        const cmd_result r =
            run_magnetar("run -m " + shell_quote(model) + " -t 2 -c 1024 -n 24 " +
                         "--nothink --temp 0 -p " + shell_quote(text) + " " + flags);
        EXPECT_EQ(r.rc, 0) << r.err;
        return r.out.ends_with("\n") ? r.out.substr(0, r.out.size() - 1) : r.out;
    };
    const std::string greedy = run("");
    const std::string penalised =
        run("--repeat-penalty 1.6 --repeat-last-n -1 --frequency-penalty 0.5");
    ASSERT_FALSE(greedy.empty());
    ASSERT_NE(penalised, greedy) << "the penalties changed nothing: the test proves nothing";
    EXPECT_EQ(answer({}, {{"temperature", 0}}), greedy);
    EXPECT_EQ(answer({"--temp", "0", "--repeat-penalty", "1.6", "--repeat-last-n", "-1",
                      "--frequency-penalty", "0.5"},
                     {}),
              penalised);
    EXPECT_EQ(answer({"--repeat-penalty", "1.6", "--repeat-last-n", "-1"},
                     {{"temperature", 0}, {"frequency_penalty", 0.5}}),
              penalised);
    // --temp 0 is greedy whatever seed a request names.
    EXPECT_EQ(answer({"--temp", "0"}, {{"seed", 7}}), greedy);
}

// A second server on a port in use fails at once with the reason (it used to start and take part
// of the first one's connections through SO_REUSEPORT); the first one keeps serving.
TEST(ServeFlagsBinary, PortInUseIsRefused) {
    scratch_dir dir("port");
    child first({"serve", "-m", cli_tiny_model(), "-t", "1", "--port", "0", "-c", "256"},
                dir.path + "-first");
    ASSERT_GT(first.pid, 0);
    ASSERT_TRUE(first.read_until("listening on port", 60)) << first.err();
    const int port = port_of(first.out_text);
    child second(
        {"serve", "-m", cli_tiny_model(), "-t", "1", "--port", std::to_string(port), "-c", "256"},
        dir.path + "-second");
    ASSERT_GT(second.pid, 0);
    EXPECT_EQ(second.wait(60), 1) << second.err();
    EXPECT_EQ(second.out_text.find("listening"), std::string::npos) << second.out_text;
    EXPECT_NE(
        second.err().find("magnetar: error: cannot listen on 127.0.0.1:" + std::to_string(port) +
                          ": Address already in use (another server listens on that "
                          "port?)\n"),
        std::string::npos)
        << second.err();
    const nlohmann::json body = {{"prompt", "hi"}, {"max_tokens", 2}, {"temperature", 0}};
    EXPECT_EQ(http_post(port, "/v1/completions", body.dump(), nullptr), 200);
    ASSERT_EQ(::kill(first.pid, SIGTERM), 0);
    EXPECT_EQ(first.wait(60), 0) << first.err();
    fs::remove(dir.path + "-first");
    fs::remove(dir.path + "-second");
}

// serve's request log: one line per request on stderr with the method, path, status, client,
// the generation's tokens, time to first token, total time and finish reason; JSON objects with
// --log-format json; /health left out unless --verbose.
TEST(ServeFlagsBinary, RequestLogLines) {
    const nlohmann::json good = {{"prompt", "hi"}, {"max_tokens", 3}, {"temperature", 0}};
    const nlohmann::json bad = {{"prompt", 3}};
    auto serve_and_log = [&](const std::vector<std::string>& flags) {
        scratch_dir dir("reqlog");
        std::vector<std::string> args = {"serve", "-m", cli_tiny_model(), "-t", "1", "--port", "0",
                                         "-c",    "256"};
        args.insert(args.end(), flags.begin(), flags.end());
        child c(args, dir.path + "-stderr");
        std::vector<std::string> lines;
        if (c.pid <= 0 || !c.read_until("listening on port", 60)) return lines;
        const int port = port_of(c.out_text);
        EXPECT_EQ(http_post(port, "/v1/completions", good.dump(), nullptr), 200);
        EXPECT_EQ(http_post(port, "/v1/completions", bad.dump(), nullptr), 400);
        http_post(port, "/health", "{}", nullptr);
        ::kill(c.pid, SIGTERM);
        EXPECT_EQ(c.wait(60), 0) << c.err();
        std::istringstream in(c.err());
        for (std::string line; std::getline(in, line);) {
            // The request log's lines (the other notes start with "magnetar").
            if (line.rfind("serve: ", 0) == 0 || line.rfind('{', 0) == 0) lines.push_back(line);
        }
        fs::remove(dir.path + "-stderr");
        return lines;
    };
    const std::vector<std::string> js = serve_and_log({"--log-format", "json"});
    ASSERT_EQ(js.size(), 2u) << ::testing::PrintToString(js);
    const nlohmann::json a = nlohmann::json::parse(js[0]), b = nlohmann::json::parse(js[1]);
    EXPECT_EQ(a["method"], "POST");
    EXPECT_EQ(a["path"], "/v1/completions");
    EXPECT_EQ(a["status"], 200);
    EXPECT_EQ(a["client"].get<std::string>().rfind("127.0.0.1:", 0), 0u) << a;
    EXPECT_GT(a["prompt_tokens"].get<int>(), 0);
    EXPECT_EQ(a["cached_tokens"], 0);
    EXPECT_EQ(a["generated_tokens"], 3);
    EXPECT_EQ(a["finish"], "length");
    EXPECT_GT(a["ttft_s"].get<double>(), 0.0);
    EXPECT_LE(a["ttft_s"].get<double>(), a["total_s"].get<double>());
    EXPECT_EQ(b["status"], 400);
    EXPECT_FALSE(b.contains("prompt_tokens")) << b;

    const std::vector<std::string> text = serve_and_log({"--verbose"});
    ASSERT_EQ(text.size(), 3u) << ::testing::PrintToString(text);
    EXPECT_TRUE(std::regex_match(text[0], std::regex(R"(serve: POST /v1/completions 200 )"
                                                     R"(127\.0\.0\.1:\d+ prompt \d+ cached 0 )"
                                                     R"(generated 3 ttft [0-9.]+ s total )"
                                                     R"([0-9.]+ s length)")))
        << text[0];
    EXPECT_EQ(text[1].rfind("serve: POST /v1/completions 400 ", 0), 0u) << text[1];
    EXPECT_EQ(text[2].rfind("serve: POST /health ", 0), 0u) << text[2];
    EXPECT_TRUE(serve_and_log({"--log-disable"}).empty());
}

// On the trained model a named tool_choice is obeyed with arguments the model writes itself:
// asked about magnetars it calls another tool by itself, and the named one when told to.
TEST(ServeTrainedModel, NamedToolChoiceIsCalled) {
    const std::string model = find_in_ancestors("models/magnetar-tiny.gguf");
    if (model.empty()) GTEST_SKIP() << "models/magnetar-tiny.gguf missing";
    scratch_dir dir("toolchoice");
    child c({"serve", "-m", model, "-t", "2", "--port", "0", "-c", "2048", "--log-disable"},
            dir.path + "-stderr");
    ASSERT_GT(c.pid, 0);
    ASSERT_TRUE(c.read_until("listening on port", 60)) << c.err();
    const nlohmann::json schema = {{"type", "object"},
                                   {"properties", {{"x", {{"type", "string"}}}}},
                                   {"required", nlohmann::json::array({"x"})}};
    nlohmann::json tools = nlohmann::json::array();
    for (const char* name : {"get_weather", "list_files", "calculate"}) {
        tools.push_back(
            {{"type", "function"}, {"function", {{"name", name}, {"parameters", schema}}}});
    }
    auto called = [&](const nlohmann::json& choice) {
        const nlohmann::json body = {
            {"messages", {{{"role", "user"}, {"content", "Tell me about magnetars."}}}},
            {"max_tokens", 120},
            {"temperature", 0},
            {"thinking", false},
            {"tools", tools},
            {"tool_choice", choice}};
        std::string raw;
        EXPECT_EQ(http_post(port_of(c.out_text), "/v1/chat/completions", body.dump(), &raw), 200)
            << raw;
        const nlohmann::json j = nlohmann::json::parse(raw, nullptr, false);
        if (!j.is_object() || !j["choices"][0]["message"].contains("tool_calls")) return raw;
        const nlohmann::json& fn = j["choices"][0]["message"]["tool_calls"][0]["function"];
        EXPECT_FALSE(nlohmann::json::parse(fn["arguments"].get<std::string>()).empty()) << raw;
        return fn["name"].get<std::string>();
    };
    const std::string by_itself = called("auto");
    EXPECT_NE(by_itself, "calculate");
    EXPECT_EQ(called({{"type", "function"}, {"function", {{"name", "calculate"}}}}), "calculate");
    ::kill(c.pid, SIGTERM);
    EXPECT_EQ(c.wait(60), 0) << c.err();
    fs::remove(dir.path + "-stderr");
}

// Whether the main thread of `pid` has SIGTERM blocked (serve's first step).
bool sigterm_blocked(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line)) {
        if (line.compare(0, 7, "SigBlk:") == 0)
            return (std::stoull(line.substr(7), nullptr, 16) >> (SIGTERM - 1)) & 1;
    }
    return false;
}

// SIGTERM while the server is still loading: it exits at once with a message instead of
// finishing start-up first (the signal used to wait, blocked, until the server listened).
TEST(ServeSignals, SigtermDuringStartUpIsHonoured) {
    scratch_dir dir("sigterm");
    child c({"serve", "-m", cli_tiny_model(), "-t", "1", "--port", "0", "-c", "65536",
             "--kv-disk-dir", dir.path},
            dir.path + "-stderr");
    ASSERT_GT(c.pid, 0);
    const auto end = clock_type::now() + std::chrono::seconds(30);
    while (!sigterm_blocked(c.pid) && clock_type::now() < end)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    ASSERT_TRUE(sigterm_blocked(c.pid)) << c.err();
    ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
    EXPECT_EQ(c.wait(30), 0) << c.err();
    EXPECT_EQ(c.out_text.find("listening on port"), std::string::npos) << c.out_text;
    EXPECT_NE(c.err().find("during start-up"), std::string::npos) << c.err();
    fs::remove(dir.path + "-stderr");
}

}  // namespace
}  // namespace magnetar::test
