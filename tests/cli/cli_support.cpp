#include "cli/cli_support.h"

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "gen-model/gen_model.h"
#include "support/fixture_cache.h"
#include "support/test_support.h"

namespace magnetar::test {

const std::string& cli_tiny_model() {
    static const std::string path = [] {
        const std::string key = std::to_string(hash_inputs({"/proc/self/exe"}, "cli-tiny-f32-1"));
        const std::string dir = cached_dir("cli-model-tiny-f32", key, [](const std::string& out) {
            genmodel::options o;
            o.preset = "tiny";
            o.weights = genmodel::parse_weight_scheme("f32");
            o.seed = 1;
            o.output = out + "/model.gguf";
            o.quiet = true;
            genmodel::generate(o);
        });
        return dir + "/model.gguf";
    }();
    return path;
}

const Engine& cli_engine() {
    static const std::unique_ptr<Engine> engine = [] {
        engine_options eo;
        eo.model_path = cli_tiny_model();
        eo.n_threads = 2;
        std::unique_ptr<Engine> e;
        const status st = Engine::load(eo, &e);
        if (!st.ok()) throw std::runtime_error("load: " + st.message());
        return e;
    }();
    return *engine;
}

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'') {
            out += "'\\''";
        } else {
            out.push_back(c);
        }
    }
    return out + "'";
}

cmd_result run_magnetar(const std::string& args, const std::string& cwd,
                        const std::string& wrapper) {
    const std::string err_path = temp_dir() + "/stderr-" + std::to_string(::getpid()) + ".txt";
    std::string cmd;
    if (!cwd.empty()) cmd = "cd " + shell_quote(cwd) + " && ";
    cmd += "exec " + (wrapper.empty() ? "" : wrapper + " ") + magnetar_bin() + " " + args + " 2>" +
           shell_quote(err_path) + " </dev/null";
    cmd_result r;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = ::pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    // The shell reports a child killed by a signal as 128 + signal.
    if (r.rc > 128) r.rc = -1;
    std::ifstream e(err_path, std::ios::binary);
    std::stringstream ss;
    ss << e.rdbuf();
    r.err = ss.str();
    return r;
}

std::vector<int32_t> chat_prompt(const Engine& e, const std::string& user, think_mode mode,
                                 int64_t n_ctx, const std::string& system) {
    std::vector<chat_turn> turns;
    if (!system.empty()) turns.push_back({"system", system, ""});
    turns.push_back({"user", user, ""});
    std::vector<int32_t> ids;
    const status st =
        e.tokenize(Engine::render_chat(turns, mode, static_cast<uint64_t>(n_ctx)), true, &ids);
    if (!st.ok()) throw std::runtime_error("tokenize: " + st.message());
    return ids;
}

std::vector<int32_t> greedy_continuation(const Engine& e, const std::vector<int32_t>& prompt,
                                         int64_t n, int64_t n_ctx) {
    session_options so;
    so.n_ctx = n_ctx;
    std::unique_ptr<Session> s;
    if (!e.create_session(so, &s).ok()) throw std::runtime_error("create_session");
    if (!s->eval(prompt).ok()) throw std::runtime_error("eval");
    const int64_t cap = std::min<int64_t>(n, n_ctx - static_cast<int64_t>(prompt.size()) - 1);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < cap; ++i) {
        const int32_t id = s->argmax();
        if (id == e.info().special.eos) break;
        out.push_back(id);
        if (i + 1 < cap && !s->eval(std::span<const int32_t>(&id, 1)).ok()) {
            throw std::runtime_error("eval");
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// pty_process
// ---------------------------------------------------------------------------------------------

pty_process::pty_process(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env) {
    struct winsize ws {};
    ws.ws_row = 50;
    ws.ws_col = 200;
    pid_ = ::forkpty(&fd_, nullptr, nullptr, &ws);
    if (pid_ < 0) throw std::runtime_error("forkpty failed");
    if (pid_ == 0) {
        for (const std::string& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
        std::vector<char*> args;
        for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        ::execv(args[0], args.data());
        std::perror("execv");
        ::_exit(127);
    }
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

pty_process::~pty_process() {
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
}

void pty_process::send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
        if (n > 0) {
            done += static_cast<size_t>(n);
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            throw std::runtime_error("write to pty failed");
        } else {
            pump(0.01);
        }
    }
}

bool pty_process::wait_line_editor(double timeout_s) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
        struct termios t {};
        // On Linux the master side reports the terminal settings of the slave side.
        if (::tcgetattr(fd_, &t) == 0 && (t.c_lflag & ICANON) == 0) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        pump(0.01);
    }
}

bool pty_process::pump(double timeout_s) {
    struct pollfd p {};
    p.fd = fd_;
    p.events = POLLIN;
    if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
    char buf[4096];
    bool got = false;
    for (;;) {
        const ssize_t n = ::read(fd_, buf, sizeof buf);
        if (n <= 0) break;  // EAGAIN, or EIO once the child is gone
        out_.append(buf, static_cast<size_t>(n));
        got = true;
    }
    return got;
}

size_t pty_process::expect(const std::string& needle, size_t from, double timeout_s) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
        const size_t pos = out_.find(needle, std::min(from, out_.size()));
        if (pos != std::string::npos) return pos;
        const double left =
            std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) return std::string::npos;
        if (!pump(std::min(left, 0.2))) {
            int st = 0;
            if (::waitpid(pid_, &st, WNOHANG) == pid_) {  // exited: take what is left
                pump(0.1);
                pid_ = -1;
                const size_t p2 = out_.find(needle, std::min(from, out_.size()));
                return p2;
            }
        }
    }
}

bool pty_process::wait_size(size_t n, double timeout_s) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (out_.size() < n) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        pump(0.1);
    }
    return true;
}

int pty_process::wait_exit(double timeout_s) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (pid_ > 0) {
        pump(0.05);
        int st = 0;
        const pid_t r = ::waitpid(pid_, &st, WNOHANG);
        if (r == pid_) {
            pid_ = -1;
            pump(0.05);
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        if (std::chrono::steady_clock::now() >= deadline) return -1;
    }
    return -1;
}

}  // namespace magnetar::test
