// Hostile hyper-parameters: every numeric deepseek4.* key of a small valid V4 model and every
// numeric deepseek41.* key of a small valid V4.1 model, each set to a list of hostile values
// (0, 1, all-ones, 2^31 - 1, -1, 2^63 - 1, 2^32, value + 1, value * 1000, a huge array, the
// wrong type, the key removed; the matching list for floats, booleans and arrays), one file
// per variant. Each variant goes through the real `magnetar inspect` and `magnetar run` (one
// prefill and one decode step) in a child process with a timeout, so an abort, a crash or a
// hang is a reported failure, not a dead test binary. Required: no signal, no timeout, exit 0
// or 1, and every refusal exactly one line on stderr that names the edited key.
// MAGNETAR_SWEEP_VERBOSE=1 lists the accepted variants.
//
// Also here: sessions with an absurd context get an error status (Engine::create_session,
// `magnetar run -c 1000000000`), the bounds themselves, and every preset within them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/format.h"
#include "gen-model/gen_model.h"
#include "gguf/gguf.h"
#include "magnetar/engine.h"
#include "model/catalogue.h"
#include "model/hparams.h"
#include "support/test_support.h"

extern char** environ;

namespace magnetar {
namespace {

using gguf::value;
using gguf::value_type;

constexpr double kTimeoutS = 20.0;      // per child process (a hang is far longer than a run)
constexpr size_t kHugeArray = 1 << 16;  // entries of the "huge array" variants

// ---------------------------------------------------------------------------------------------
// The two base models
// ---------------------------------------------------------------------------------------------

// V4: three layers (ratios 0, 4, 128; one hash-routed), 64 wide, 64 tokens: about 1 MB in F32.
hparams sweep_v4() {
    hparams hp = preset_tiny();
    hp.name = "sweep-v4";
    hp.n_ctx_train = 256;
    hp.n_embd = 64;
    hp.n_vocab = 64;
    hp.n_head = 2;
    hp.n_head_dim = hp.n_value_dim = 80;  // 64 FP8-rounded dims + 16 RoPE dims
    hp.n_rot = 16;
    hp.n_q_lora = 32;
    hp.n_o_lora = 16;
    hp.n_o_group = 2;
    hp.n_expert = 4;
    hp.n_expert_used = 2;
    hp.n_ff_exp = 32;
    hp.n_hash_layer = 1;
    hp.n_swa = 8;
    hp.n_indexer_head = 2;
    hp.n_indexer_head_dim = 32;
    hp.n_indexer_top_k = 4;
    hp.rope_orig_ctx = 64;
    hp.n_layer = 3;
    hp.compress_ratios = {0, 4, 128, 0};
    hp.swiglu_clamp.assign(4, 10.0f);
    hp.validate();
    return hp;
}

// V4.1: v41-tiny's eight layers (every attention mode, two Engram layers, two DSpark stages)
// at width 64 with a 64-token vocabulary.
hparams sweep_v41() {
    hparams hp = preset_v41_tiny();
    hp.name = "sweep-v41";
    hp.n_embd = 64;
    hp.n_vocab = 64;
    hp.n_head = 2;
    hp.n_head_dim = hp.n_value_dim = 32;
    hp.n_rot = 16;
    hp.n_q_lora = 32;
    hp.n_o_group = 2;
    hp.n_o_lora = 16;
    hp.n_expert = 4;
    hp.n_expert_used = 2;
    hp.n_ff_exp = 32;
    hp.n_indexer_head = 2;
    hp.n_indexer_head_dim = 32;
    engram_hparams& e = hp.v41.engram;
    e.token_map.resize(hp.n_vocab);
    for (uint32_t t = 0; t < hp.n_vocab; ++t) e.token_map[t] = static_cast<int32_t>(t / 2);
    e.compressed_vocab = hp.n_vocab / 2;
    e.pad_id = 1;
    hp.v41.dspark.noise_token_id = hp.n_vocab - 1;
    hp.v41.dspark.markov_rank = 32;
    hp.v41.dspark.n_expert = 4;
    hp.validate();
    return hp;
}

// Small random weights (norms 1, hash routes t + j mod E), F32.
void write_v4(const hparams& hp, const std::string& path) {
    gguf::writer w(path);
    write_hparams(w, hp);
    const std::vector<tensor_spec> specs = tensor_catalogue(hp, false);
    for (const tensor_spec& s : specs) {
        w.add_tensor(s.name, s.dtype == dtype_class::i32 ? ggml_type::I32 : ggml_type::F32, s.ne);
    }
    uint32_t rng = 12345;
    for (const tensor_spec& s : specs) {
        uint64_t n = 1;
        for (int64_t d : s.ne) n *= static_cast<uint64_t>(d);
        std::vector<uint8_t> buf(4 * n);
        const bool norm =
            s.suffix.find("norm") != std::string::npos || s.name.find("norm") != std::string::npos;
        for (uint64_t i = 0; i < n; ++i) {
            if (s.dtype == dtype_class::i32) {
                const auto k = static_cast<uint64_t>(s.ne[0]);
                const auto e = static_cast<int32_t>((i / k + i % k) % hp.n_expert);
                std::memcpy(&buf[4 * i], &e, 4);
                continue;
            }
            rng = rng * 1664525u + 1013904223u;
            const float v =
                norm ? 1.0f : (static_cast<float>(rng >> 8) / 16777216.0f - 0.5f) * 0.2f;
            std::memcpy(&buf[4 * i], &v, 4);
        }
        w.write_tensor_data(buf.data(), buf.size());
    }
    w.finish();
}

void write_v41(const hparams& hp, const std::string& path) {
    genmodel::options o;
    o.preset = "sweep-v41";
    o.weights = genmodel::weight_scheme::f32;
    o.seed = 1;
    o.output = path;
    o.quiet = true;
    genmodel::generate_v41(o, hp);
}

// ---------------------------------------------------------------------------------------------
// Variants
// ---------------------------------------------------------------------------------------------

struct variant {
    std::string key;   // full key, e.g. deepseek4.attention.sliding_window
    std::string what;  // the hostile value, for reports
    bool remove = false;
    value v;
};

value u32v(uint64_t x) {
    return value::make_u32(static_cast<uint32_t>(std::min<uint64_t>(x, UINT32_MAX)));
}

value array_of(value_type et, size_t n, const std::function<value(size_t)>& f) {
    std::vector<value> items;
    items.reserve(n);
    for (size_t i = 0; i < n; ++i) items.push_back(f(i));
    return value::make_array(et, std::move(items));
}

double num(const value& v) {
    if (v.type == value_type::f32 || v.type == value_type::f64) return v.f;
    if (v.type == value_type::i8 || v.type == value_type::i16 || v.type == value_type::i32 ||
        v.type == value_type::i64) {
        return static_cast<double>(v.i);
    }
    return static_cast<double>(v.u);
}

// A value of an array's element type (for its type predicates).
value elem_kind(const value& arr) {
    value v;
    v.type = arr.elem_type;
    return v;
}

// The hostile values of one key, by its type in the base file.
std::vector<variant> hostile(const std::string& key, const value& base) {
    std::vector<variant> out;
    auto add = [&](const std::string& what, value v) {
        out.push_back({key, what, false, std::move(v)});
    };
    const value str = value::make_string("hostile");
    if (base.is_integer()) {
        const uint64_t x = base.type == value_type::i32
                               ? static_cast<uint64_t>(std::max<int64_t>(base.i, 0))
                               : base.u;
        add("0", value::make_u32(0));
        add("1", value::make_u32(1));
        add("2^32-1", value::make_u32(UINT32_MAX));
        add("2^31-1", value::make_u32(INT32_MAX));
        add("-1 (i32)", value::make_i32(-1));
        add("2^63-1 (u64)", value::make_u64(static_cast<uint64_t>(INT64_MAX)));
        add("2^32 (u64)", value::make_u64(uint64_t{1} << 32));
        add("value+1", u32v(x + 1));
        add("value*1000", u32v(x * 1000));
        add("huge array", array_of(value_type::u32, kHugeArray, [&](size_t) { return u32v(x); }));
        add("string", str);
    } else if (base.is_float()) {
        const auto x = static_cast<float>(base.f);
        add("0", value::make_f32(0.0f));
        add("1", value::make_f32(1.0f));
        add("-1", value::make_f32(-1.0f));
        add("nan", value::make_f32(std::numeric_limits<float>::quiet_NaN()));
        add("inf", value::make_f32(std::numeric_limits<float>::infinity()));
        add("2^31-1 (u32)", value::make_u32(INT32_MAX));
        add("2^32-1 (u32)", value::make_u32(UINT32_MAX));
        add("2^63-1 (u64)", value::make_u64(static_cast<uint64_t>(INT64_MAX)));
        add("value+1", value::make_f32(x + 1.0f));
        add("value*1000", value::make_f32(x * 1000.0f));
        add("huge array",
            array_of(value_type::f32, kHugeArray, [&](size_t) { return value::make_f32(x); }));
        add("string", str);
    } else if (base.type == value_type::boolean) {
        add("!value", value::make_bool(base.u == 0));
        add("0 (u32)", value::make_u32(0));
        add("2^32-1 (u32)", value::make_u32(UINT32_MAX));
        add("-1 (i32)", value::make_i32(-1));
        add("huge array",
            array_of(value_type::u32, kHugeArray, [](size_t) { return value::make_u32(1); }));
        add("string", str);
    } else if (base.type == value_type::array &&
               (elem_kind(base).is_integer() || elem_kind(base).is_float())) {
        const bool flt = elem_kind(base).is_float();
        const size_t n = base.arr.size();
        auto same = [&](size_t i) { return base.arr[i % std::max<size_t>(n, 1)]; };
        auto scaled = [&](double mul, double plus) {
            return array_of(base.elem_type, n, [&](size_t i) {
                value e = base.arr[i];
                const double y = num(e) * mul + plus;
                if (flt) {
                    e.f = static_cast<float>(y);
                } else if (e.type == value_type::i32 || e.type == value_type::i64) {
                    e.i = static_cast<int64_t>(std::min(y, 2147483647.0));
                } else {
                    e.u = static_cast<uint64_t>(std::min(y, 4294967295.0));
                }
                return e;
            });
        };
        add("empty", value::make_array(base.elem_type, {}));
        add("entries 0", array_of(value_type::u32, n, [](size_t) { return value::make_u32(0); }));
        add("entries 1", array_of(value_type::u32, n, [](size_t) { return value::make_u32(1); }));
        add("entries 2^32-1",
            array_of(value_type::u32, n, [](size_t) { return value::make_u32(UINT32_MAX); }));
        add("entries 2^31-1",
            array_of(value_type::u32, n, [](size_t) { return value::make_u32(INT32_MAX); }));
        add("entries -1 (i32)",
            array_of(value_type::i32, n, [](size_t) { return value::make_i32(-1); }));
        add("entries 2^63-1 (u64)", array_of(value_type::u64, n, [](size_t) {
                return value::make_u64(static_cast<uint64_t>(INT64_MAX));
            }));
        if (flt) {
            add("entries nan", array_of(value_type::f32, n, [](size_t) {
                    return value::make_f32(std::numeric_limits<float>::quiet_NaN());
                }));
        }
        add("entries+1", scaled(1.0, 1.0));
        add("entries*1000", scaled(1000.0, 0.0));
        add("length+1", array_of(base.elem_type, n + 1, same));
        if (n > 0) add("length-1", array_of(base.elem_type, n - 1, same));
        add("huge array", array_of(base.elem_type, kHugeArray, same));
        add("scalar", n > 0 ? base.arr[0] : value::make_u32(0));
        add("string", str);
    } else {
        return out;  // strings: not numeric
    }
    out.push_back({key, "removed", true, {}});
    return out;
}

// Copy of `base` with one key replaced (or removed).
void write_variant(const gguf::reader& base, const variant& v, const std::string& path) {
    gguf::writer w(path);
    for (const gguf::kv& e : base.metadata()) {
        if (e.key != v.key) {
            w.set(e.key, e.val);
        } else if (!v.remove) {
            w.set(e.key, v.v);
        }
    }
    for (const gguf::tensor_info& t : base.tensors()) {
        w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne, t.n_dims));
    }
    for (const gguf::tensor_info& t : base.tensors())
        w.write_tensor_data(base.tensor_data(t), t.n_bytes);
    w.finish();
}

// ---------------------------------------------------------------------------------------------
// Child processes with a timeout
// ---------------------------------------------------------------------------------------------

struct child_result {
    int rc = -1;     // exit status, -1 when signalled or timed out
    int signal = 0;  // the terminating signal
    bool timed_out = false;
    std::string err;  // stderr
};

child_result run_child(const std::vector<std::string>& args, const std::string& err_path) {
    child_result r;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        r.err = std::string("posix_spawn: ") + std::strerror(rc);
        return r;
    }
    const auto t0 = std::chrono::steady_clock::now();
    int st = 0;
    std::chrono::microseconds nap(200);
    for (;;) {
        const pid_t w = ::waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
            kTimeoutS) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &st, 0);
            r.timed_out = true;
            break;
        }
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(5000));
    }
    if (!r.timed_out) {
        if (WIFEXITED(st)) r.rc = WEXITSTATUS(st);
        if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
    }
    std::ifstream f(err_path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    r.err = ss.str();
    return r;
}

// ---------------------------------------------------------------------------------------------
// The sweep
// ---------------------------------------------------------------------------------------------

struct sweep_counts {
    size_t variants = 0, refused = 0, accepted = 0, run_refused = 0;
    std::vector<std::string> failures;
};

// Problems with one child's outcome ("" when it is fine). A refusal is one line naming the key
// (its suffix after the architecture prefix, e.g. "attention.sliding_window", or the whole key).
std::string judge(const char* what, const child_result& r, const variant& v,
                  const std::string& arch) {
    const std::string suffix = v.key.substr(arch.size() + 1);
    if (r.timed_out) return strfmt("%s: timed out after %.0f s (a hang)", what, kTimeoutS);
    if (r.signal != 0) return strfmt("%s: killed by signal %d: %s", what, r.signal, r.err.c_str());
    if (r.rc == 0) return "";
    if (r.rc != 1) return strfmt("%s: exit %d: %s", what, r.rc, r.err.c_str());
    const size_t nl = r.err.find('\n');
    if (r.err.empty() || nl + 1 != r.err.size())
        return strfmt("%s: refusal is not exactly one line: %s", what, r.err.c_str());
    if (r.err.find(suffix) == std::string::npos) {
        return strfmt("%s: refusal does not name '%s': %s", what, v.key.c_str(), r.err.c_str());
    }
    return "";
}

sweep_counts sweep(const std::string& base_path, const std::string& arch, const std::string& dir) {
    const auto base = gguf::reader::open(base_path);
    std::vector<variant> vars;
    for (const gguf::kv& e : base->metadata()) {
        if (e.key.rfind(arch + ".", 0) != 0) continue;
        for (variant& v : hostile(e.key, e.val)) vars.push_back(std::move(v));
    }
    // The prompt: 12 tokens (crosses the ratio-4 / ratio-2 compression and the window), then
    // one decode step.
    const std::string tokens = dir + "/tokens.json";
    {
        std::ofstream t(tokens);
        t << "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]";
    }
    const std::string bin = test::magnetar_bin();
    struct outcome {
        std::string inspect_fail, run_fail;
        bool inspect_ok = false, run_ok = false;
    };
    std::vector<outcome> res(vars.size());
    std::atomic<size_t> next{0};
    const unsigned n_workers = std::max(2u, std::min(8u, std::thread::hardware_concurrency()));
    auto worker = [&](unsigned id) {
        const std::string path = dir + "/variant-" + std::to_string(id) + ".gguf";
        const std::string err = dir + "/stderr-" + std::to_string(id) + ".txt";
        for (size_t i = next++; i < vars.size(); i = next++) {
            const variant& v = vars[i];
            outcome& o = res[i];
            try {
                write_variant(*base, v, path);
            } catch (const std::exception& e) {
                o.inspect_fail = std::string("writing the variant: ") + e.what();
                continue;
            }
            const child_result ri = run_child({bin, "inspect", "--summary", path}, err);
            const child_result rr = run_child(
                {bin, "run", "-m", path, "--tokens", tokens, "-n", "2", "-c", "64", "-t", "1"},
                err);
            o.inspect_fail = judge("inspect", ri, v, arch);
            o.run_fail = judge("run", rr, v, arch);
            o.inspect_ok = ri.rc == 0;
            o.run_ok = rr.rc == 0;
            // The same load: what inspect refuses, run refuses.
            if (o.run_fail.empty() && !o.inspect_ok && o.run_ok)
                o.run_fail = "run: accepted what inspect refused";
        }
        std::filesystem::remove(path);
    };
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < n_workers; ++w) pool.emplace_back(worker, w);
    for (auto& t : pool) t.join();

    sweep_counts c;
    c.variants = vars.size();
    for (size_t i = 0; i < vars.size(); ++i) {
        const outcome& o = res[i];
        c.refused += o.inspect_ok ? 0 : 1;
        c.accepted += o.inspect_ok ? 1 : 0;
        c.run_refused += o.run_ok ? 0 : 1;
        if (o.inspect_ok && std::getenv("MAGNETAR_SWEEP_VERBOSE")) {
            std::printf("[ accepted ] %s = %s%s\n", vars[i].key.c_str(), vars[i].what.c_str(),
                        o.run_ok ? "" : " (run refused)");
        }
        for (const std::string* f : {&o.inspect_fail, &o.run_fail}) {
            if (!f->empty()) c.failures.push_back(vars[i].key + " = " + vars[i].what + ": " + *f);
        }
    }
    return c;
}

void report(const char* name, const sweep_counts& c) {
    std::printf(
        "[ sweep    ] %s: %zu variants, %zu refused at load, %zu accepted (run refused %zu), %zu "
        "failures\n",
        name, c.variants, c.refused, c.accepted, c.run_refused, c.failures.size());
    for (const std::string& f : c.failures) std::printf("[ FAILURE  ] %s\n", f.c_str());
    EXPECT_TRUE(c.failures.empty())
        << name << ": " << c.failures.size() << " failures (listed above)";
}

TEST(HparamSweep, EveryNumericKeyHostileV4AndV41) {
    const std::string dir = test::temp_dir();
    const std::string v4 = dir + "/base-v4.gguf";
    const std::string v41 = dir + "/base-v41.gguf";
    write_v4(sweep_v4(), v4);
    write_v41(sweep_v41(), v41);
    // The bases themselves load and run.
    for (const std::string& p : {v4, v41}) {
        std::string out;
        ASSERT_EQ(test::run_command(test::magnetar_bin() + " inspect --summary " + p, &out), 0)
            << out;
    }
    const sweep_counts a = sweep(v4, kArchDeepseek4, dir);
    const sweep_counts b = sweep(v41, kArchDeepseek41, dir);
    report("deepseek4", a);
    report("deepseek41", b);
    EXPECT_GE(a.variants + b.variants, 432u);
    EXPECT_GT(a.refused, 0u);
    EXPECT_GT(a.accepted, 0u);
    EXPECT_GT(b.refused, 0u);
}

// ---------------------------------------------------------------------------------------------
// Sessions with an absurd context
// ---------------------------------------------------------------------------------------------

TEST(HparamSweep, AbsurdContextIsAStatusNotAnAbort) {
    const std::string dir = test::temp_dir();
    const std::string path = dir + "/v4.gguf";
    write_v4(sweep_v4(), path);
    engine_options eo;
    eo.model_path = path;
    eo.n_threads = 1;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::load(eo, &e).ok());
    for (int64_t n_ctx :
         {int64_t{1000000000}, int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
        session_options so;
        so.n_ctx = n_ctx;
        std::unique_ptr<Session> s;
        const status st = e->create_session(so, &s);
        EXPECT_FALSE(st.ok()) << n_ctx;
        EXPECT_EQ(st.code(), status_code::invalid_argument);
        EXPECT_NE(st.message().find("context too large"), std::string::npos) << st.message();
        EXPECT_EQ(st.message().find('\n'), std::string::npos);
    }
    // A valid session still works.
    session_options so;
    so.n_ctx = 64;
    std::unique_ptr<Session> s;
    ASSERT_TRUE(e->create_session(so, &s).ok());
    const std::vector<int32_t> toks = {1, 2, 3};
    EXPECT_TRUE(s->eval(toks).ok());

    // The CLI: exit 1, one line.
    const std::string tokens = dir + "/t.json";
    std::ofstream(tokens) << "[1, 2, 3]";
    const child_result r = run_child({test::magnetar_bin(), "run", "-m", path, "--tokens", tokens,
                                      "-n", "1", "-c", "1000000000", "-t", "1"},
                                     dir + "/err.txt");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_EQ(r.err.find('\n') + 1, r.err.size()) << r.err;
    EXPECT_NE(r.err.find("context too large"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------------
// The bounds
// ---------------------------------------------------------------------------------------------

std::string validate_error(const hparams& hp) {
    try {
        hp.validate();
    } catch (const Error& e) {
        return e.what();
    }
    return "(valid)";
}

TEST(HparamBounds, PresetsAreWithinTheBounds) {
    for (const char* name : {"flash", "pro", "tiny", "tiny-mtp", "flash-layers:1", "flash-layers:2",
                             "flash-layers:43", "v41-tiny", "v41-flash"}) {
        bool mtp = false;
        EXPECT_NO_THROW(preset_by_name(name, &mtp)) << name;
    }
    EXPECT_EQ(validate_error(sweep_v4()), "(valid)");
    EXPECT_EQ(validate_error(sweep_v41()), "(valid)");
}

TEST(HparamBounds, ReportedInOneLineNamingTheKey) {
    struct bad {
        void (*edit)(hparams&);
        const char* key;
    };
    const bad cases[] = {
        {[](hparams& h) { h.n_swa = INT32_MAX; },
         "deepseek4.attention.sliding_window: expected at most"},
        {[](hparams& h) { h.n_swa = 8192; },
         "deepseek4.attention.sliding_window: expected at most context_length"},
        {[](hparams& h) { h.n_indexer_top_k = UINT32_MAX; },
         "deepseek4.attention.indexer.top_k: expected at most"},
        {[](hparams& h) { h.n_indexer_top_k = 2048; },
         "deepseek4.attention.indexer.top_k: expected at most context_length / 4"},
        {[](hparams& h) { h.n_sinkhorn_iter = INT32_MAX; },
         "deepseek4.hyper_connection.sinkhorn_iterations: expected at most"},
        {[](hparams& h) { h.n_hc = 9; }, "deepseek4.hyper_connection.count: expected at most 8"},
        {[](hparams& h) { h.n_expert_used = 65; },
         "deepseek4.expert_used_count: expected at most 64"},
        {[](hparams& h) { h.n_layer = UINT32_MAX; }, "deepseek4.block_count: expected at most"},
        {[](hparams& h) { h.n_ctx_train = uint64_t{1} << 40; },
         "deepseek4.context_length: expected at most"},
        {[](hparams& h) { h.n_rot = 512; }, "deepseek4.rope.dimension_count: expected at most 256"},
        {[](hparams& h) { h.compress_ratios.resize(100000, 0); },
         "deepseek4.attention.compress_ratios: expected at most"},
        {[](hparams& h) { h.rope_freq_base = 1.0f; },
         "deepseek4.rope.freq_base: must be a finite value > 1"},
    };
    for (const bad& b : cases) {
        hparams hp = preset_tiny();
        b.edit(hp);
        const std::string m = validate_error(hp);
        EXPECT_NE(m.find(b.key), std::string::npos) << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    hparams hp = preset_v41_tiny();
    hp.v41.engram.n_head = INT32_MAX;
    EXPECT_NE(validate_error(hp).find("deepseek41.engram.head_count: expected at most"),
              std::string::npos);
    hp = preset_v41_tiny();
    hp.v41.engram.compressed_vocab = UINT32_MAX;
    EXPECT_NE(validate_error(hp).find("deepseek41.engram.compressed_vocab_size: expected at most"),
              std::string::npos);
    hp = preset_v41_tiny();
    hp.v41.candidate_topk_blocks = 1000;
    EXPECT_NE(
        validate_error(hp).find("attention.candidate_topk_blocks * attention.candidate_block_size"),
        std::string::npos);
}

}  // namespace
}  // namespace magnetar
