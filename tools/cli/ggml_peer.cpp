#include "cli/ggml_peer.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "core/paths.h"

namespace magnetar::cli {

namespace fs = std::filesystem;

namespace {

// GGML's `struct ggml_type_traits_cpu` (ggml-cpu.h): checked at load against activation types
// every GGML build agrees on.
struct cpu_traits {
    void (*from_float)(const float* x, void* y, int64_t k);
    void (*vec_dot)(int n, float* s, size_t bs, const void* x, size_t bx, const void* y, size_t by,
                    int nrc);
    int vec_dot_type;
    int64_t nrows;
};

using traits_fn = const cpu_traits* (*)(int type);
using name_fn = const char* (*)(int type);
using row_size_fn = size_t (*)(int type, int64_t ne);
using init_fn = void (*)();
using score_fn = int (*)();

// The node-llama-cpp package's CPU libraries, relative to the checkout.
constexpr const char* kPackageDir =
    "scripts/bench/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64";

void* open_library(const std::string& path) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char* why = dlerror();
        throw Error(strfmt("ggml peer: cannot load %s: %s", path.c_str(), why ? why : "?"));
    }
    return h;
}

template <class F>
F symbol(void* h, const char* name) {
    return reinterpret_cast<F>(dlsym(h, name));
}

// The CPU libraries of a directory: the one GGML's loader would pick (highest score; 0 means
// the CPU cannot run it), or a plain libggml-cpu.so.
std::string best_in_directory(const fs::path& dir) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (n.rfind("libggml-cpu", 0) == 0 && n.size() > 3 && n.substr(n.size() - 3) == ".so")
            files.push_back(e.path());
    }
    if (ec) throw Error("ggml peer: cannot read directory " + dir.string() + ": " + ec.message());
    if (files.empty()) throw Error("ggml peer: no libggml-cpu*.so in " + dir.string());
    std::sort(files.begin(), files.end());
    std::string best;
    int best_score = 0;
    for (const fs::path& f : files) {
        void* h = dlopen(f.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        const auto score = symbol<score_fn>(h, "ggml_backend_score");
        // A library without a score is a single-variant build: usable, lowest preference.
        const int s = score ? score() : 1;
        if (s > best_score) {
            best_score = s;
            best = f.string();
        }
        dlclose(h);
    }
    if (best.empty())
        throw Error("ggml peer: none of the " + std::to_string(files.size()) + " libraries in " +
                    dir.string() + " runs on this CPU");
    return best;
}

}  // namespace

struct ggml_peer::api {
    traits_fn traits = nullptr;
    name_fn type_name = nullptr;
    row_size_fn row_size = nullptr;

    const cpu_traits* of(ggml_type t) const { return traits(static_cast<int>(t)); }
};

std::string ggml_peer::default_location() {
    if (const char* env = std::getenv("MAGNETAR_GGML_LIB"); env && *env) return env;
    return find_in_ancestors(kPackageDir);
}

std::unique_ptr<ggml_peer> ggml_peer::load(const std::string& where) {
    std::error_code ec;
    if (!fs::exists(where, ec)) throw Error("ggml peer: " + where + " does not exist");
    const std::string file = fs::is_directory(where, ec) ? best_in_directory(where) : where;
    void* h = open_library(file);
    auto fns = std::make_unique<api>();
    fns->traits = symbol<traits_fn>(h, "ggml_get_type_traits_cpu");
    fns->type_name = symbol<name_fn>(h, "ggml_type_name");
    fns->row_size = symbol<row_size_fn>(h, "ggml_row_size");
    const auto init = symbol<init_fn>(h, "ggml_cpu_init");
    if (!fns->traits || !fns->type_name || !fns->row_size || !init) {
        dlclose(h);
        throw Error("ggml peer: " + file +
                    " lacks ggml_get_type_traits_cpu / ggml_type_name / ggml_row_size / "
                    "ggml_cpu_init (not a GGML CPU library)");
    }
    init();
    // The traits record must read as GGML's: Q8_0 pairs with itself, the K quants with Q8_K.
    const cpu_traits* q8 = fns->traits(static_cast<int>(ggml_type::Q8_0));
    const cpu_traits* q2k = fns->traits(static_cast<int>(ggml_type::Q2_K));
    if (!q8 || !q2k || q8->vec_dot_type != static_cast<int>(ggml_type::Q8_0) ||
        q2k->vec_dot_type != static_cast<int>(ggml_type::Q8_K) || !q8->vec_dot || !q8->from_float) {
        dlclose(h);
        throw Error("ggml peer: " + file +
                    ": its CPU type traits do not have the layout this "
                    "bench reads (from_float, vec_dot, vec_dot_type, nrows)");
    }
    // The library stays loaded for the rest of the process (GGML keeps process-wide state).
    return std::unique_ptr<ggml_peer>(
        new ggml_peer(fs::path(file).filename().string(), std::move(fns)));
}

ggml_peer::ggml_peer(std::string name, std::unique_ptr<api> fns)
    : name_(std::move(name)), api_(std::move(fns)) {}

ggml_peer::~ggml_peer() = default;

bool ggml_peer::supports(ggml_type t) const {
    const char* n = api_->type_name(static_cast<int>(t));
    if (!n || std::string(n) != type_traits_of(t).name) return false;
    const cpu_traits* tr = api_->of(t);
    if (!tr || !tr->vec_dot) return false;
    const cpu_traits* at = api_->traits(tr->vec_dot_type);
    return at && at->from_float;
}

size_t ggml_peer::act_row_bytes(ggml_type t, int64_t n) const {
    return api_->row_size(api_->of(t)->vec_dot_type, n);
}

void ggml_peer::convert_act(ggml_type t, const float* x, void* act, int64_t n) const {
    api_->traits(api_->of(t)->vec_dot_type)->from_float(x, act, n);
}

float ggml_peer::dot(ggml_type t, const void* w, const void* act, int64_t n) const {
    float s = 0.0f;
    api_->of(t)->vec_dot(static_cast<int>(n), &s, 0, w, 0, act, 0, 1);
    return s;
}

}  // namespace magnetar::cli
