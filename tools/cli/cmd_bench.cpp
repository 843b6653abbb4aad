// `magnetar bench`: without a sub-command, the model walk (bench_model.h, docs/performance.md);
// with one, the named benchmark (`magnetar bench kernels`, `magnetar bench tokenizer`, ...,
// registered with MAGNETAR_BENCH_COMMAND, see bench_command.h).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "cli/bench_command.h"
#include "cli/bench_model.h"

namespace magnetar::cli {

std::vector<command>& bench_registry() {
    static std::vector<command> registry;
    return registry;
}

namespace {

action setup(CLI::App& sub) {
    // The walk's flags belong to `bench` itself; a sub-command takes only its own flags.
    sub.require_subcommand(0, 1);
    auto walk = std::make_shared<model_bench_args>();
    add_model_bench_flags(sub, *walk);
    auto& benches = bench_registry();
    std::sort(benches.begin(), benches.end(),
              [](const command& a, const command& b) { return std::string(a.name) < b.name; });
    auto actions = std::make_shared<std::vector<std::pair<CLI::App*, action>>>();
    for (const auto& b : benches) {
        CLI::App* s = sub.add_subcommand(b.name, b.description);
        actions->emplace_back(s, b.setup(*s));
    }
    return [actions, walk]() {
        for (auto& [s, act] : *actions) {
            if (s->parsed()) return act();
        }
        return run_model_bench(*walk);
    };
}

}  // namespace

MAGNETAR_COMMAND(bench, "bench",
                 "Model walk to context frontiers (ds4-bench) with roofline accounting; "
                 "sub-commands: other benchmarks",
                 setup);

}  // namespace magnetar::cli
