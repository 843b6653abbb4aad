// The agent's shell jobs: see jobs.h.
#include "agent/jobs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "core/format.h"

namespace fs = std::filesystem;

namespace magnetar::agent {

using clock_type = std::chrono::steady_clock;

job_table::job_table(fs::path cwd, job_limits limits) : cwd_(std::move(cwd)), lim_(limits) {
    std::string tmpl = (fs::temp_directory_path() / "magnetar-agent-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) {
        throw std::runtime_error(std::string("agent: cannot create the jobs' output folder: ") +
                                 std::strerror(errno));
    }
    dir_ = buf.data();  // mkdtemp makes it 0700
    monitor_ = std::thread([this] { monitor(); });
}

job_table::~job_table() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        quit_ = true;
        for (auto& [id, j] : jobs_) {
            if (j.done) continue;
            kill_group(j, SIGKILL);
            int st = 0;
            ::waitpid(j.pid, &st, 0);
            j.done = true;
        }
    }
    cv_.notify_all();
    if (monitor_.joinable()) monitor_.join();
    std::error_code ec;
    fs::remove_all(dir_, ec);
}

void job_table::kill_group(job& j, int sig) {
    if (j.pid > 0) ::kill(-j.pid, sig);
}

void job_table::poll(job& j) {
    if (j.done) return;
    int st = 0;
    const pid_t r = ::waitpid(j.pid, &st, WNOHANG);
    if (r == j.pid) {
        j.done = true;
        j.seconds = std::chrono::duration<double>(clock_type::now() - j.started).count();
        if (WIFEXITED(st)) j.exit_code = WEXITSTATUS(st);
        if (WIFSIGNALED(st)) j.signal = WTERMSIG(st);
        // Children left behind in its group end with it.
        ::kill(-j.pid, SIGKILL);
        cv_.notify_all();
        return;
    }
    if (clock_type::now() >= j.deadline && !j.timed_out && !j.stopped) {
        j.timed_out = true;
        kill_group(j, SIGTERM);
        j.deadline = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                             std::chrono::duration<double>(lim_.stop_grace_s));
    } else if (clock_type::now() >= j.deadline && (j.timed_out || j.stopped)) {
        kill_group(j, SIGKILL);
    }
}

void job_table::monitor() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!quit_) {
        for (auto& [id, j] : jobs_) poll(j);
        cv_.wait_for(lk, std::chrono::milliseconds(50));
    }
}

bool job_table::wait_for(job& j, double wait_s, std::unique_lock<std::mutex>& lk) {
    const auto until = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                               std::chrono::duration<double>(wait_s));
    while (!j.done && clock_type::now() < until) {
        poll(j);
        if (j.done) break;
        cv_.wait_until(lk, std::min(until, clock_type::now() + std::chrono::milliseconds(20)));
    }
    return j.done;
}

tool_result job_table::start(const std::string& command, double timeout_s, double wait_s) {
    if (command.empty()) return {false, "error: bash: empty command"};
    if (timeout_s <= 0) timeout_s = lim_.default_timeout_s;
    if (timeout_s > lim_.max_timeout_s) {
        return {false, strfmt("error: bash: timeout %g s is more than the %g s allowed", timeout_s,
                              lim_.max_timeout_s)};
    }
    if (wait_s < 0) wait_s = lim_.default_wait_s;
    std::unique_lock<std::mutex> lk(mu_);
    job j;
    j.id = next_id_++;
    j.command = command;
    j.output = dir_ / strfmt("job-%d.out", j.id);
    const int fd =
        ::open(j.output.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        return {false,
                std::string("error: bash: cannot create the output file: ") + std::strerror(errno)};
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(fd);
        return {false, std::string("error: bash: cannot start: ") + std::strerror(errno)};
    }
    if (pid == 0) {
        // The child: its own process group, no terminal input, output to the private file.
        ::setpgid(0, 0);
        const int null = ::open("/dev/null", O_RDONLY);
        if (null >= 0) ::dup2(null, 0);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        if (::chdir(cwd_.c_str()) != 0) ::_exit(126);
        ::execl("/bin/bash", "bash", "-c", command.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so a kill right after start reaches the group
    ::close(fd);
    j.pid = pid;
    j.started = clock_type::now();
    j.deadline = j.started + std::chrono::duration_cast<clock_type::duration>(
                                 std::chrono::duration<double>(timeout_s));
    auto& ref = jobs_.emplace(j.id, std::move(j)).first->second;
    cv_.notify_all();
    wait_for(ref, wait_s, lk);
    return report(ref);
}

tool_result job_table::status(int id, double wait_s) {
    std::unique_lock<std::mutex> lk(mu_);
    const auto it = jobs_.find(id);
    if (it == jobs_.end()) return {false, strfmt("error: no job %d", id)};
    if (wait_s > 0) wait_for(it->second, wait_s, lk);
    poll(it->second);
    return report(it->second);
}

tool_result job_table::stop(int id) {
    std::unique_lock<std::mutex> lk(mu_);
    const auto it = jobs_.find(id);
    if (it == jobs_.end()) return {false, strfmt("error: no job %d", id)};
    job& j = it->second;
    if (!j.done) {
        j.stopped = true;
        kill_group(j, SIGTERM);
        j.deadline = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                             std::chrono::duration<double>(lim_.stop_grace_s));
        wait_for(j, lim_.stop_grace_s + 1.0, lk);
    }
    return report(j);
}

std::vector<int> job_table::running() const {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<int> out;
    for (const auto& [id, j] : jobs_)
        if (!j.done) out.push_back(id);
    return out;
}

tool_result job_table::report(const job& j) const {
    std::error_code ec;
    const uint64_t size = fs::exists(j.output, ec) ? fs::file_size(j.output, ec) : 0;
    std::string text;
    {
        std::ifstream in(j.output, std::ios::binary);
        const size_t half = lim_.report_bytes / 2;
        if (size <= lim_.report_bytes) {
            text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        } else {
            std::string head(half, '\0'), tail(half, '\0');
            in.read(head.data(), static_cast<std::streamsize>(half));
            in.seekg(static_cast<std::streamoff>(size - half));
            in.read(tail.data(), static_cast<std::streamsize>(half));
            text = head +
                   strfmt("\n[... %llu bytes left out ...]\n",
                          static_cast<unsigned long long>(size - 2 * half)) +
                   tail;
        }
    }
    std::string state;
    bool ok = true;
    if (!j.done) {
        state = strfmt(
            "job %d running for %.1f s (bash_status %d waits for it, bash_stop %d ends it)", j.id,
            std::chrono::duration<double>(clock_type::now() - j.started).count(), j.id, j.id);
    } else if (j.timed_out) {
        ok = false;
        state = strfmt("job %d killed after its timeout (%.1f s)", j.id, j.seconds);
    } else if (j.stopped) {
        state = strfmt("job %d stopped after %.1f s", j.id, j.seconds);
    } else if (j.signal != 0) {
        ok = false;
        state = strfmt("job %d ended by signal %d after %.1f s", j.id, j.signal, j.seconds);
    } else {
        ok = j.exit_code == 0;
        state = strfmt("job %d exited with status %d after %.1f s", j.id, j.exit_code, j.seconds);
    }
    std::string out = text;
    if (!out.empty() && out.back() != '\n') out.push_back('\n');
    out += "[" + state + strfmt("; %s of output]", human_bytes(size).c_str());
    return {ok, out};
}

}  // namespace magnetar::agent
