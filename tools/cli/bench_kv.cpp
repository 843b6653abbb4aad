// `magnetar bench kv`: restoring a session from the disk KV cache (and from memory) against
// re-prefilling the same prefix, at several prefix lengths.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_command.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/format.h"
#include "core/progress.h"
#include "core/rng.h"
#include "kvstore/kv_file.h"
#include "kvstore/kv_store.h"
#include "magnetar/engine.h"

namespace magnetar::cli {

namespace {

struct args {
    std::string model;
    std::vector<int64_t> lengths = {8192, 32768};
    std::string dir;
    int threads = 0;
    uint64_t seed = 1;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check(const status& st) {
    if (!st.ok()) throw Error(st.message());
}

int run(const args& a) {
    engine_options eo;
    eo.model_path = resolve_model_path(a.model);
    eo.n_threads = a.threads;
    std::unique_ptr<Engine> engine;
    check(Engine::load(eo, &engine));
    const kvstore::model_identity id = kvstore::identity_of_model(eo.model_path);
    namespace fs = std::filesystem;
    const bool own_dir = a.dir.empty();
    const std::string dir =
        own_dir ? (fs::temp_directory_path() / strfmt("magnetar-bench-kv-%d", ::getpid())).string()
                : a.dir;
    fs::create_directories(dir);

    std::printf("model: %s (%u layers), threads %d\n", engine->info().name.c_str(),
                engine->info().n_layer, engine->info().n_threads);
    std::printf("%8s %10s %10s %11s %9s %12s %12s %10s %10s\n", "tokens", "prefill_s",
                "prefill_tps", "payload_MiB", "save_s", "restore_s", "restore_mem_s", "disk_ratio",
                "mem_ratio");
    for (const int64_t n : a.lengths) {
        if (n < 2) throw Error("bench kv: lengths must be at least 2");
        std::vector<int32_t> toks(static_cast<size_t>(n));
        Rng rng(a.seed);
        toks[0] = engine->info().special.bos >= 0 ? engine->info().special.bos : 0;
        for (int64_t i = 1; i < n; ++i)
            toks[static_cast<size_t>(i)] =
                static_cast<int32_t>(rng.next_u64() % engine->info().n_vocab);
        session_options so;
        so.n_ctx = n + 1;
        so.checkpoint_interval = 0;
        std::unique_ptr<Session> s;
        check(engine->create_session(so, &s));

        Progress bar(strfmt("prefill %lld", static_cast<long long>(n)), static_cast<uint64_t>(n),
                     Progress::Unit::tokens);
        eval_options ev;
        ev.progress = [&](int64_t done, int64_t) { bar.update(static_cast<uint64_t>(done)); };
        auto t0 = std::chrono::steady_clock::now();
        check(s->sync(toks, ev));
        const double prefill = seconds_since(t0);
        bar.finish();
        const std::vector<float> want(s->logits().begin(), s->logits().end());

        kvstore::write_request req;
        const std::string key = strfmt("bench-kv-%lld", static_cast<long long>(n));
        req.key_text = key;
        std::string path;
        t0 = std::chrono::steady_clock::now();
        check(kvstore::write_file(dir, *s, id, req, &path));
        const double save = seconds_since(t0);
        std::vector<uint8_t> mem;
        check(s->save_payload(&mem));

        s->reset();
        t0 = std::chrono::steady_clock::now();
        check(kvstore::load_file(path, *s, id));
        const double restore = seconds_since(t0);
        if (std::vector<float>(s->logits().begin(), s->logits().end()) != want)
            throw Error("bench kv: the restored logits differ");
        s->reset();
        t0 = std::chrono::steady_clock::now();
        check(s->load_payload(mem));
        const double restore_mem = seconds_since(t0);
        std::printf("%8lld %10.3f %10.1f %11.1f %9.3f %12.4f %12.4f %9.0fx %9.0fx\n",
                    static_cast<long long>(n), prefill, n / prefill,
                    static_cast<double>(mem.size()) / (1 << 20), save, restore, restore_mem,
                    prefill / restore, prefill / restore_mem);
        std::fflush(stdout);
        ::unlink(path.c_str());
    }
    if (own_dir) fs::remove_all(dir);
    std::printf(
        "restore_s reads the file just written (warm page cache) and loads it into a "
        "fresh session; ratios are prefill time / restore time.\n");
    return 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    sub.add_option("-m,--model", a->model,
                   "Model GGUF (default: $MAGNETAR_MODEL or models/magnetar-tiny.gguf)");
    sub.add_option("--tokens", a->lengths, "Prefix lengths")->delimiter(',')->capture_default_str();
    sub.add_option("--dir", a->dir, "Directory for the cache files (default: a temp directory)");
    sub.add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
    sub.add_option("--seed", a->seed, "Seed of the random token ids")->capture_default_str();
    return [a]() { return run(*a); };
}

}  // namespace

MAGNETAR_BENCH_COMMAND(kv, "kv", "Disk KV cache restore time vs re-prefill", setup);

}  // namespace magnetar::cli
