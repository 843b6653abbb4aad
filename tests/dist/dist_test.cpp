// Pipelined inference under mpirun (src/dist, docs/distributed.md): 2 and 3 ranks on the tiny
// model against the single-process engine (logits over 300 positions of prefill and of decode,
// bitwise with the HC state as F32 and within the BF16 tolerance otherwise; greedy
// continuations; seeded sampling; one chat completion through the server), session snapshots
// moved between a single process and 2 or 3 stages, the handshake's errors, a rank killed
// mid-generation, and the layer split. Every case that needs mpirun skips when the build has no
// MPI.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_support.h"
#include "core/error.h"
#include "dist/split.h"
#include "gguf/gguf.h"
#include "support/fixture_cache.h"
#include "support/test_support.h"

namespace magnetar::test {
namespace {

const char* mpiexec() {
    return MAGNETAR_MPIEXEC;
}

// mpirun as root, more ranks than cores, no core binding (the ranks share the machine).
std::string mpirun(int np) {
    return std::string(mpiexec()) + " --allow-run-as-root --oversubscribe --bind-to none -np " +
           std::to_string(np) + " ";
}

#define REQUIRE_MPI()                                                            \
    do {                                                                         \
        if (std::string(mpiexec()).empty()) GTEST_SKIP() << "built without MPI"; \
    } while (0)

// Runs a shell command, stdout and stderr apart.
cmd_result run_shell(const std::string& cmd) {
    const std::string err_path = temp_dir() + "/dist-stderr.txt";
    cmd_result r;
    FILE* p = ::popen((cmd + " 2>" + shell_quote(err_path) + " </dev/null").c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = ::pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    std::ifstream e(err_path, std::ios::binary);
    std::stringstream ss;
    ss << e.rdbuf();
    r.err = ss.str();
    return r;
}

// 300 token ids of the tiny model's vocabulary (a fixed pseudo-random walk).
std::string token_file() {
    const std::string path = temp_dir() + "/tokens300.json";
    std::ofstream f(path);
    f << "[";
    uint32_t x = 12345;
    const uint32_t n_vocab = cli_engine().info().n_vocab;
    for (int i = 0; i < 300; ++i) {
        x = x * 1103515245u + 12345u;
        f << (i ? "," : "") << ((x >> 8) % n_vocab);
    }
    f << "]";
    return path;
}

// eval-logits of the 300 tokens: single process when np is 0.
std::vector<float> eval_logits(int np, const std::string& mode, const std::string& extra) {
    const std::string out = temp_dir() + "/logits-" + std::to_string(np) + "-" + mode + ".f32";
    std::string cmd = np > 0 ? mpirun(np) : std::string();
    cmd += magnetar_bin() + " eval-logits -t 1 -m " + shell_quote(cli_tiny_model()) + " --tokens " +
           shell_quote(token_file()) + " --out " + shell_quote(out) + " --mode " + mode + " " +
           extra;
    const cmd_result r = run_shell(cmd);
    EXPECT_EQ(r.rc, 0) << cmd << "\n" << r.err;
    if (r.rc != 0) return {};
    return read_f32(out);
}

void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b) {
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    size_t diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff += std::memcmp(&a[i], &b[i], 4) != 0;
    EXPECT_EQ(diff, 0u) << "of " << a.size() << " logits";
}

// BF16 keeps 8 significant bits of the HC state at each hop (a normalised error near 1e-6 of
// the state). The rounding can flip discrete choices of the model (expert routing, FP8 / FP4
// rounding of cache rows, the indexer's top-k), so on this random model single rows move
// more: the first positions (no compressed row yet) stay within 1e-3, the median row within
// 1e-2, and the greedy token mostly agrees (measured on a 300-token walk: median 1.6e-5 /
// 1.4e-3 with 2 / 3 ranks, greedy agreement 96% / 84%).
void expect_close(const std::vector<float>& want, const std::vector<float>& got, size_t n_vocab) {
    ASSERT_EQ(want.size(), got.size());
    ASSERT_FALSE(want.empty());
    const size_t rows = want.size() / n_vocab;
    std::vector<double> row_nmse(rows);
    size_t agree = 0;
    bool any_diff = false;
    for (size_t r = 0; r < rows; ++r) {
        double err2 = 0, ref2 = 0;
        size_t best_w = 0, best_g = 0;
        for (size_t i = r * n_vocab; i < (r + 1) * n_vocab; ++i) {
            ASSERT_TRUE(std::isfinite(got[i])) << "logit " << i;
            const double d = static_cast<double>(want[i]) - got[i];
            any_diff = any_diff || d != 0;
            err2 += d * d;
            ref2 += static_cast<double>(want[i]) * want[i];
            if (want[i] > want[r * n_vocab + best_w]) best_w = i - r * n_vocab;
            if (got[i] > got[r * n_vocab + best_g]) best_g = i - r * n_vocab;
        }
        row_nmse[r] = err2 / std::max(ref2, 1e-30);
        agree += best_w == best_g;
        if (r < 4) {
            EXPECT_LT(row_nmse[r], 1e-3) << "row " << r;
        }
    }
    std::vector<double> sorted = row_nmse;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_LT(sorted[rows / 2], 1e-2) << "median row nmse";
    EXPECT_GE(static_cast<double>(agree) / static_cast<double>(rows), 0.75) << "greedy agreement";
    EXPECT_TRUE(any_diff) << "BF16 on the wire should change something";
}

// Without ANSI colour sequences: mpirun gives rank 0 a pseudo-terminal as stdout, so `run`
// colours its output there and not in a pipe.
std::string strip_ansi(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
            i += 2;
            while (i < s.size() && !(s[i] >= '@' && s[i] <= '~')) ++i;
            continue;
        }
        out.push_back(s[i]);
    }
    return out;
}

TEST(DistLayers, AutoBalancesBytesAndExplicitRangesAreChecked) {
    dist::weight_map w;
    w.layers = {10, 10, 10, 10, 10, 10};
    w.first = 0;
    w.last = 0;
    EXPECT_EQ(dist::format_split(dist::split_layers("auto", 2, w)), "0:3,3:6");
    EXPECT_EQ(dist::format_split(dist::split_layers("auto", 3, w)), "0:2,2:4,4:6");
    w.last = 30;  // a heavy head moves layers to the first stage
    EXPECT_EQ(dist::format_split(dist::split_layers("auto", 2, w)), "0:4,4:6");
    EXPECT_EQ(dist::format_split(dist::split_layers("auto", 6, w)), "0:1,1:2,2:3,3:4,4:5,5:6");
    EXPECT_EQ(dist::format_split(dist::split_layers("0:1,1:6", 2, w)), "0:1,1:6");
    EXPECT_EQ(dist::format_split(dist::split_layers("2,4", 2, w)), "0:2,2:6");
    EXPECT_THROW(dist::split_layers("0:2,3:6", 2, w), Error);  // gap
    EXPECT_THROW(dist::split_layers("0:2,2:5", 2, w), Error);  // short
    EXPECT_THROW(dist::split_layers("0:2,2:7", 2, w), Error);  // past the end
    EXPECT_THROW(dist::split_layers("0:6", 2, w), Error);      // wrong stage count
    EXPECT_THROW(dist::split_layers("x", 1, w), Error);
    EXPECT_THROW(dist::split_layers("auto", 7, w), Error);  // a stage without a layer
    EXPECT_EQ(dist::stage_bytes(w, {4, 6}, 6), 50u);
}

// The single-process logits of every position of the 300 tokens (mode "prefill" or "decode"),
// computed once per build and kept in the fixture cache (ctest runs each case in its own
// process). Every way of cutting a prefill into chunks gives the same values.
std::vector<float> single_logits(const std::string& mode) {
    const std::string key = std::to_string(
        hash_inputs({magnetar_bin(), cli_tiny_model(), token_file()}, "dist-300-" + mode));
    const std::string dir = cached_dir("dist-single-" + mode, key, [&](const std::string& out) {
        const std::vector<float> l = eval_logits(0, mode, "--all-positions");
        std::ofstream f(out + "/logits.f32", std::ios::binary);
        f.write(reinterpret_cast<const char*>(l.data()),
                static_cast<std::streamsize>(l.size() * sizeof(float)));
    });
    return read_f32(dir + "/logits.f32");
}

// The handshake's fingerprint covers the metadata and the tensor directory, not the data.
TEST(DistLayers, FingerprintCoversMetadataAndDirectory) {
    const std::string& path = cli_tiny_model();
    const uint64_t off = gguf::reader::open(path)->data_offset();
    const std::string base = dist::model_fingerprint(path, off, "", 0);
    EXPECT_EQ(base.size(), 64u);
    EXPECT_EQ(base, dist::model_fingerprint(path, off, "", 0));
    // The header and the first bytes of the tensor data are enough: nothing after is read.
    std::vector<uint8_t> bytes = read_file(path);
    bytes.resize(static_cast<size_t>(off) + 64);
    const std::string copy = temp_dir() + "/fingerprint.gguf";
    bytes[bytes.size() - 1] ^= 1;  // tensor data
    write_file(copy, bytes);
    EXPECT_EQ(base, dist::model_fingerprint(copy, off, "", 0));
    bytes[static_cast<size_t>(off) - 100] ^= 1;  // tensor directory
    write_file(copy, bytes);
    EXPECT_NE(base, dist::model_fingerprint(copy, off, "", 0));
    EXPECT_THROW(dist::model_fingerprint(temp_dir() + "/missing.gguf", off, "", 0), Error);
}

TEST(Dist, TwoRanksF32LogitsBitwiseOverPrefillAndDecode) {
    REQUIRE_MPI();
    expect_bitwise(single_logits("prefill"),
                   eval_logits(2, "chunked:37", "--all-positions --wire-f32 --pipeline-chunk 16"));
    expect_bitwise(single_logits("decode"), eval_logits(2, "decode", "--all-positions --wire-f32"));
}

TEST(Dist, ThreeRanksOversubscribedF32BitwiseAndBf16Close) {
    REQUIRE_MPI();
    const std::vector<float> prefill = single_logits("prefill");
    expect_bitwise(prefill,
                   eval_logits(3, "prefill", "--all-positions --wire-f32 --layers 0:1,1:4,4:6"));
    expect_bitwise(single_logits("decode"), eval_logits(3, "decode", "--all-positions --wire-f32"));
    expect_close(prefill, eval_logits(3, "prefill", "--all-positions"),
                 cli_engine().info().n_vocab);
}

TEST(Dist, GreedyAndSeededContinuationsMatchTheSingleProcess) {
    REQUIRE_MPI();
    const std::string args = " run -t 1 -m " + shell_quote(cli_tiny_model()) +
                             " -p 'Tell me a story.' -n 40 -c 512 --wire-f32 ";
    for (const std::string& sampling :
         {std::string("--temp 0"), std::string("--temp 0.9 --seed 42")}) {
        const cmd_result one = run_shell(magnetar_bin() + args + sampling);
        const cmd_result two = run_shell(mpirun(2) + magnetar_bin() + args + sampling);
        ASSERT_EQ(one.rc, 0) << one.err;
        ASSERT_EQ(two.rc, 0) << two.err;
        EXPECT_FALSE(one.out.empty());
        EXPECT_EQ(strip_ansi(one.out), strip_ansi(two.out)) << sampling;
        EXPECT_NE(two.err.find("pipeline of 2 stages"), std::string::npos) << two.err;
    }
}

// Tokens [b, e) of token_file()'s walk, as a token file.
std::string token_slice(int b, int e) {
    const std::string path =
        temp_dir() + "/tokens-" + std::to_string(b) + "-" + std::to_string(e) + ".json";
    std::ofstream f(path);
    f << "[";
    uint32_t x = 12345;
    const uint32_t n_vocab = cli_engine().info().n_vocab;
    for (int i = 0; i < e; ++i) {
        x = x * 1103515245u + 12345u;
        if (i >= b) f << (i > b ? "," : "") << ((x >> 8) % n_vocab);
    }
    f << "]";
    return path;
}

// eval-logits of tokens [b, e) in a 300-token session (np 0: single process), after loading
// `load` when given and saving the payload to `save` when given.
std::vector<float> snapshot_run(int np, int b, int e, const std::string& load,
                                const std::string& save, const std::string& extra) {
    const std::string out = temp_dir() + "/snap-logits.f32";
    std::string cmd = np > 0 ? mpirun(np) : std::string();
    cmd += magnetar_bin() + " eval-logits -t 1 --ctx 300 --all-positions --wire-f32 -m " +
           shell_quote(cli_tiny_model()) + " --tokens " + shell_quote(token_slice(b, e)) +
           " --out " + shell_quote(out) + " " + extra;
    if (!load.empty()) cmd += " --load-payload " + shell_quote(load);
    if (!save.empty()) cmd += " --save-payload " + shell_quote(save);
    const cmd_result r = run_shell(cmd);
    EXPECT_EQ(r.rc, 0) << cmd << "\n" << r.err;
    if (r.rc != 0) return {};
    return read_f32(out);
}

// The logits rows [b, e) of a 300-row run.
std::vector<float> rows_of(const std::vector<float>& all, int b, int e) {
    const size_t v = cli_engine().info().n_vocab;
    if (all.size() < static_cast<size_t>(e) * v) return {};
    return {all.begin() + static_cast<std::ptrdiff_t>(b * v),
            all.begin() + static_cast<std::ptrdiff_t>(e * v)};
}

// A snapshot at 173 tokens (raw window wrapped, compressor frontiers part-filled) saved by 2
// stages is the single process's payload byte for byte and loads in a single process; the
// single process's loads into 2 and 3 stages (another split). Every continuation gives the
// logits of the uncut run.
TEST(Dist, SnapshotsMoveBetweenOneProcessAndThePipeline) {
    REQUIRE_MPI();
    const int cut = 173;
    const std::vector<float> full = single_logits("prefill");
    const std::vector<float> head = rows_of(full, 0, cut);
    const std::vector<float> tail = rows_of(full, cut, 300);
    const std::string one = temp_dir() + "/snap-1.bin";
    const std::string two = temp_dir() + "/snap-2.bin";
    expect_bitwise(head, snapshot_run(0, 0, cut, "", one, ""));
    expect_bitwise(head, snapshot_run(2, 0, cut, "", two, ""));
    const std::vector<uint8_t> want = read_file(one);
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(read_file(two) == want) << "the 2-stage payload differs";
    expect_bitwise(tail, snapshot_run(0, cut, 300, two, "", ""));
    expect_bitwise(tail, snapshot_run(2, cut, 300, one, "", ""));
    expect_bitwise(tail, snapshot_run(3, cut, 300, one, "", "--layers 0:3,3:5,5:6"));
}

// A bad payload is refused on rank 0 with the payload's error, and the job ends without hanging.
TEST(Dist, PipelinedLoadRefusesABadPayload) {
    REQUIRE_MPI();
    std::vector<uint8_t> bad(256, 0);
    const uint32_t head[2] = {0x34565344u, 7};  // "DSV4", version 7
    std::memcpy(bad.data(), head, sizeof(head));
    const std::string path = temp_dir() + "/snap-bad.bin";
    write_file(path, bad);
    const std::string cmd =
        "timeout 60 " + mpirun(2) + magnetar_bin() + " eval-logits -t 1 --ctx 300 -m " +
        shell_quote(cli_tiny_model()) + " --tokens " + shell_quote(token_slice(0, 8)) + " --out " +
        shell_quote(temp_dir() + "/snap-bad.f32") + " --load-payload " + shell_quote(path);
    const cmd_result r = run_shell(cmd);
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.rc, 124) << "hung";
    EXPECT_NE(r.err.find("session payload: version is 7, expected 1"), std::string::npos) << r.err;
}

TEST(Dist, HandshakeRejectsABadSplit) {
    REQUIRE_MPI();
    const cmd_result r = run_shell(mpirun(2) + magnetar_bin() + " run -t 1 -m " +
                                   shell_quote(cli_tiny_model()) + " -p hi -n 2 --layers 0:2,3:6");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("ranges must be contiguous"), std::string::npos) << r.err;
}

// Reads "listening on port N" from the server's stdout.
int server_port(FILE* out) {
    char line[256];
    while (std::fgets(line, sizeof line, out)) {
        int port = 0;
        if (std::sscanf(line, "listening on port %d", &port) == 1) return port;
    }
    return -1;
}

std::string chat_completion(const std::string& launcher) {
    const std::string cmd = "exec " + launcher + magnetar_bin() + " serve -t 1 -m " +
                            shell_quote(cli_tiny_model()) +
                            " --port 0 -c 512 --wire-f32 2>/dev/null";
    int fds[2];
    if (::pipe(fds) != 0) return "pipe failed";
    const pid_t pid = ::fork();
    if (pid < 0) return "fork failed";
    if (pid == 0) {
        ::setpgid(0, 0);
        ::dup2(fds[1], 1);
        ::close(fds[0]);
        ::close(fds[1]);
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(fds[1]);
    FILE* out = ::fdopen(fds[0], "r");
    const int port = server_port(out);
    std::string content = "no port";
    if (port > 0) {
        httplib::Client cli("127.0.0.1", port);
        cli.set_read_timeout(60, 0);
        const nlohmann::json body = {
            {"model", "x"},     {"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
            {"max_tokens", 24}, {"seed", 7},  // thinking mode samples at its own temperature
            {"logprobs", true}, {"top_logprobs", 3}};
        auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
        if (!res) {
            content = "no answer";
        } else if (res->status != 200) {
            content = "status " + std::to_string(res->status) + ": " + res->body;
        } else {
            const nlohmann::json j = nlohmann::json::parse(res->body);
            content = j["choices"][0]["message"].dump() + j["choices"][0]["logprobs"].dump();
        }
    }
    // Stop the server's process group (the launcher and its ranks) and reap it.
    ::kill(-pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 200 && ::waitpid(pid, &st, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &st, WNOHANG);
    std::fclose(out);
    return content;
}

TEST(Dist, ServerChatCompletionMatchesTheSingleProcess) {
    REQUIRE_MPI();
    const std::string one = chat_completion("");
    const std::string two = chat_completion(mpirun(2));
    EXPECT_NE(one.find("content"), std::string::npos) << one;
    EXPECT_EQ(one, two);
}

TEST(Dist, KilledRankEndsTheJobWithAnError) {
    REQUIRE_MPI();
    const std::string err_path = temp_dir() + "/kill-stderr.txt";
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::setpgid(0, 0);
        const std::string cmd = "exec " + mpirun(2) + magnetar_bin() + " run -t 1 -m " +
                                shell_quote(cli_tiny_model()) +
                                " -p 'Tell me a story.' -n 100000 -c 4096 --temp 0 >/dev/null 2>" +
                                shell_quote(err_path);
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    // Find rank 1 among the launcher's children once generation is under way.
    pid_t victim = -1;
    for (int i = 0; i < 300 && victim < 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::string out;
        run_command("for p in $(pgrep -P " + std::to_string(pid) +
                        "); do tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx "
                        "OMPI_COMM_WORLD_RANK=1 && echo $p; done",
                    &out);
        if (!out.empty() && i >= 20) victim = std::atoi(out.c_str());
    }
    ASSERT_GT(victim, 0) << "rank 1 not found";
    const auto t0 = std::chrono::steady_clock::now();
    ::kill(victim, SIGKILL);
    int st = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pid, &st, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (done == 0) {
        ::kill(-pid, SIGKILL);
        ::waitpid(pid, &st, 0);
        FAIL() << "the job did not end within 20 s of the kill";
    }
    EXPECT_LT(secs, 10.0);
    EXPECT_FALSE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    std::ifstream e(err_path);
    std::stringstream ss;
    ss << e.rdbuf();
    EXPECT_NE(ss.str().find("magnetar: error: rank 0: the MPI job is being aborted"),
              std::string::npos)
        << ss.str();
}

}  // namespace
}  // namespace magnetar::test
