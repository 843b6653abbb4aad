// Helpers of the CLI tests: the tiny model fixture, running `magnetar` with stdout and stderr
// kept apart, greedy continuations through the public API, and a pseudo-terminal driver for
// `magnetar chat`.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "magnetar/engine.h"

namespace magnetar::test {

// The tiny synthetic model (preset tiny, F32 weights, seed 1: the embedded default model's
// recipe), generated once into the fixture cache.
const std::string& cli_tiny_model();

// The engine over cli_tiny_model(), loaded once per process.
const Engine& cli_engine();

struct cmd_result {
    int rc = -1;  // exit status; -1 when killed by a signal
    std::string out;
    std::string err;
};

// Runs `magnetar ARGS` (a shell-quoted argument string) with stdout and stderr captured apart;
// `wrapper` (shell words, e.g. "prlimit --memlock=0:0") runs the binary when given.
cmd_result run_magnetar(const std::string& args, const std::string& cwd = "",
                        const std::string& wrapper = "");

// Single-quoted for the shell.
std::string shell_quote(const std::string& s);

// The user turn as `magnetar run` renders it (no system prompt unless given).
std::vector<int32_t> chat_prompt(const Engine& e, const std::string& user, think_mode mode,
                                 int64_t n_ctx, const std::string& system = "");

// Greedy continuation through the API: at most n tokens, stopping before EOS, capped at
// n_ctx - prompt - 1 like the CLI.
std::vector<int32_t> greedy_continuation(const Engine& e, const std::vector<int32_t>& prompt,
                                         int64_t n, int64_t n_ctx);

// A child process on a pseudo-terminal.
class pty_process {
  public:
    pty_process(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
    ~pty_process();
    pty_process(const pty_process&) = delete;
    pty_process& operator=(const pty_process&) = delete;

    void send(const std::string& bytes);
    // Waits until the line editor has the terminal in raw mode (after printing its prompt it
    // switches; a Ctrl+D typed before that reaches it as a NUL byte). False after timeout_s.
    bool wait_line_editor(double timeout_s = 10);
    // Reads until `needle` occurs at or after position `from` of output(); returns its position
    // or std::string::npos after timeout_s.
    size_t expect(const std::string& needle, size_t from, double timeout_s = 60);
    // Reads until output() has grown to at least n bytes.
    bool wait_size(size_t n, double timeout_s = 60);
    // Waits for the exit; the exit status, or -1 on a signal or timeout.
    int wait_exit(double timeout_s = 30);
    const std::string& output() const { return out_; }

  private:
    bool pump(double timeout_s);

    pid_t pid_ = -1;
    int fd_ = -1;
    std::string out_;
};

}  // namespace magnetar::test
