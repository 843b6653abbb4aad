// The agent's shell jobs: `bash` starts a command as a tracked job in its own process group,
// with its output in a private file and a deadline; `bash_status` and `bash_stop` look at it
// and end it. A report shows the output head first, then its tail, with what was left out.
//
// Owns: the processes (started, reaped, killed by group on timeout, stop and destruction), the
// private output folder. Does not own: what the commands do.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "agent/file_tools.h"

namespace magnetar::agent {

struct job_limits {
    double default_timeout_s = 120;
    double max_timeout_s = 3600;
    double default_wait_s =
        30;  // how long `bash` waits for the command before reporting it running
    size_t report_bytes = 8 << 10;  // an output report holds at most this (head, then tail)
    double stop_grace_s = 2;        // SIGTERM, then SIGKILL after this
};

class job_table {
  public:
    // Commands run in `cwd` (the workspace root).
    job_table(std::filesystem::path cwd, job_limits limits);
    ~job_table();  // kills every running job's process group
    job_table(const job_table&) = delete;
    job_table& operator=(const job_table&) = delete;

    // Starts `command` under /bin/bash -c; waits up to wait_s (< 0: the default) for it to end;
    // timeout_s (<= 0: the default) kills its process group.
    tool_result start(const std::string& command, double timeout_s, double wait_s);
    // A job's state and output report; waits up to wait_s for it to end first.
    tool_result status(int id, double wait_s);
    tool_result stop(int id);
    // Ids of jobs still running.
    std::vector<int> running() const;

  private:
    struct job {
        int id = 0;
        pid_t pid = -1;
        std::string command;
        std::filesystem::path output;
        std::chrono::steady_clock::time_point started, deadline;
        bool done = false;
        int exit_code = -1;
        int signal = 0;
        bool timed_out = false;
        bool stopped = false;
        double seconds = 0;
    };
    void monitor();
    // Reaps the job if it ended; kills it when past its deadline. Caller holds mu_.
    void poll(job& j);
    void kill_group(job& j, int sig);
    tool_result report(const job& j) const;
    bool wait_for(job& j, double wait_s, std::unique_lock<std::mutex>& lk);

    std::filesystem::path cwd_;
    job_limits lim_;
    std::filesystem::path dir_;  // private output folder (0700)
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::map<int, job> jobs_;
    int next_id_ = 1;
    bool quit_ = false;
    std::thread monitor_;
};

}  // namespace magnetar::agent
