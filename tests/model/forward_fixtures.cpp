#include "model/forward_fixtures.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>

#include "core/rng.h"
#include "gen-model/gen_model.h"
#include "magnetar/engine.h"
#include "support/fixture_cache.h"
#include "support/test_support.h"

namespace magnetar::test {

namespace fs = std::filesystem;

const std::string& tiny_model(const std::string& preset, const std::string& weights) {
    static std::map<std::string, std::string> paths;
    const std::string name = "model-" + preset + "-" + weights;
    auto it = paths.find(name);
    if (it != paths.end()) return it->second;
    // The generator is linked into this executable: a rebuild may change the bytes.
    const std::string key =
        std::to_string(hash_inputs({"/proc/self/exe"}, name + std::to_string(kModelSeed)));
    const std::string dir = cached_dir(name, key, [&](const std::string& out) {
        genmodel::options o;
        o.preset = preset;
        o.weights = genmodel::parse_weight_scheme(weights);
        o.seed = kModelSeed;
        o.output = out + "/model.gguf";
        o.quiet = true;
        genmodel::generate(o);
    });
    return paths.emplace(name, dir + "/model.gguf").first->second;
}

std::vector<int32_t> test_tokens(uint64_t seed, int n, uint32_t n_vocab) {
    Rng rng(seed);
    std::vector<int32_t> ids{0};
    while (static_cast<int>(ids.size()) < n)
        ids.push_back(static_cast<int32_t>(rng.below(n_vocab)));
    return ids;
}

namespace {

std::string json_ids(const std::vector<int32_t>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s + "]";
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
        s.replace(p, from.size(), to);
    return s;
}

}  // namespace

std::string reference_run(const std::string& name, const std::string& model,
                          const std::vector<int32_t>& tokens, const std::string& args) {
    const std::string ref_dir = std::string(MAGNETAR_SOURCE_DIR) + "/tests/reference";
    std::vector<std::string> inputs{model, ref_dir + "/ref.py"};
    std::vector<std::string> pkg;
    for (const char* sub : {"/dsv4_ref", "/dsv41_ref"}) {
        if (!fs::is_directory(ref_dir + sub)) continue;
        for (const auto& e : fs::directory_iterator(ref_dir + sub)) {
            if (e.path().extension() == ".py") pkg.push_back(e.path().string());
        }
    }
    std::sort(pkg.begin(), pkg.end());
    inputs.insert(inputs.end(), pkg.begin(), pkg.end());
    const std::string ids = json_ids(tokens);
    const std::string key = std::to_string(hash_inputs(inputs, ids + "|" + args));
    return cached_dir("ref-" + name, key, [&](const std::string& out) {
        std::ofstream(out + "/ids.json") << ids;
        const std::string cmd = "/usr/bin/python3 " + ref_dir + "/ref.py eval-logits -m " + model +
                                " --tokens " + out + "/ids.json --out " + out + "/logits.f32 " +
                                replace_all(args, "@DIR@", out);
        std::string log;
        if (run_command(cmd, &log) != 0)
            throw std::runtime_error("reference run failed: " + cmd + "\n" + log);
    });
}

engine_out run_engine(const std::string& model, const std::vector<int32_t>& tokens,
                      const engine_run& r) {
    engine_options eo;
    eo.model_path = model;
    eo.n_threads = r.threads;
    eo.exact_matmul = r.exact;
    std::unique_ptr<Engine> engine;
    status st = Engine::load(eo, &engine);
    if (!st.ok()) throw std::runtime_error(st.message());
    session_options so;
    so.n_ctx = static_cast<int64_t>(tokens.size());
    so.chunk_size = r.chunk;
    so.all_logits = r.all_positions && !r.decode;
    so.mtp_logits = r.mtp;
    std::unique_ptr<Session> s;
    st = engine->create_session(so, &s);
    if (!st.ok()) throw std::runtime_error(st.message());
    if (!r.dumps.empty()) s->set_dump(r.dumps, r.dump);
    const size_t v = engine->info().n_vocab;
    engine_out out;
    auto take_mtp = [&] {
        for (int64_t j = 0; r.mtp && j < s->n_mtp_rows(); ++j) {
            auto row = s->mtp_logits_at(j);
            out.mtp.insert(out.mtp.end(), row.begin(), row.end());
        }
    };
    if (r.decode) {
        for (size_t i = 0; i < tokens.size(); ++i) {
            st = s->eval(std::span<const int32_t>(tokens.data() + i, 1));
            if (!st.ok()) throw std::runtime_error(st.message());
            if (r.all_positions || i + 1 == tokens.size()) {
                auto row = s->logits();
                out.logits.insert(out.logits.end(), row.begin(), row.end());
            }
            take_mtp();
        }
    } else {
        st = s->eval(tokens);
        if (!st.ok()) throw std::runtime_error(st.message());
        out.logits.reserve(static_cast<size_t>(s->n_logit_rows()) * v);
        for (int64_t i = 0; i < s->n_logit_rows(); ++i) {
            auto row = s->logits_at(i);
            out.logits.insert(out.logits.end(), row.begin(), row.end());
        }
        take_mtp();
    }
    return out;
}

diff_stats compare_rows(const std::vector<float>& got, const std::vector<float>& ref,
                        int64_t width) {
    diff_stats d;
    if (got.size() != ref.size() || ref.size() % static_cast<size_t>(width) != 0) {
        d.nmse = std::numeric_limits<double>::infinity();
        return d;
    }
    d.bit_identical = std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)) == 0;
    double num = 0, den = 0;
    const int64_t rows = static_cast<int64_t>(ref.size()) / width;
    for (int64_t r = 0; r < rows; ++r) {
        const float* a = got.data() + r * width;
        const float* b = ref.data() + r * width;
        int64_t ia = 0, ib = 0;
        double row_max = 0;
        for (int64_t i = 0; i < width; ++i) {
            if (std::isnan(a[i]) || std::isnan(b[i])) {
                d.nmse = std::numeric_limits<double>::infinity();
                return d;
            }
            const double e = static_cast<double>(a[i]) - b[i];
            num += e * e;
            den += static_cast<double>(b[i]) * b[i];
            if (std::fabs(e) > d.max_abs) {
                d.max_abs = std::fabs(e);
                d.worst_row = r;
            }
            row_max = std::max(row_max, std::fabs(static_cast<double>(b[i])));
            if (a[i] > a[ia]) ia = i;
            if (b[i] > b[ib]) ib = i;
        }
        // Relative to the row's scale (logits near zero make element-wise ratios meaningless).
        for (int64_t i = 0; i < width; ++i) {
            const double rel =
                std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(row_max, 1e-30);
            d.max_rel = std::max(d.max_rel, rel);
        }
        if (ia != ib) ++d.argmax_mismatch;
    }
    d.nmse = den > 0 ? num / den : num;
    return d;
}

}  // namespace magnetar::test
