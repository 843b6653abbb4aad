// `magnetar bench`: the benchmarks, one sub-command each (see bench_command.h).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "cli/bench_command.h"

namespace magnetar::cli {

std::vector<command>& bench_registry() {
    static std::vector<command> registry;
    return registry;
}

namespace {

action setup(CLI::App& sub) {
    sub.require_subcommand(1);
    auto& benches = bench_registry();
    std::sort(benches.begin(), benches.end(),
              [](const command& a, const command& b) { return std::string(a.name) < b.name; });
    auto actions = std::make_shared<std::vector<std::pair<CLI::App*, action>>>();
    for (const auto& b : benches) {
        CLI::App* s = sub.add_subcommand(b.name, b.description);
        actions->emplace_back(s, b.setup(*s));
    }
    return [actions]() {
        for (auto& [s, act] : *actions) {
            if (s->parsed()) return act();
        }
        return 1;
    };
}

}  // namespace

MAGNETAR_COMMAND(bench, "bench", "Benchmarks (magnetar bench --help lists them)", setup);

}  // namespace magnetar::cli
