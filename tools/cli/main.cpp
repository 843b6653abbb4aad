// The `magnetar` binary: one executable, one subcommand per front end.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"

namespace magnetar::cli {

std::vector<command>& command_registry() {
    static std::vector<command> registry;
    return registry;
}

}  // namespace magnetar::cli

int main(int argc, char** argv) {
    using namespace magnetar::cli;
    CLI::App app{"magnetar: inference engine for the DeepSeek V4 model family"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("magnetar 0.1.0"));

    auto& cmds = command_registry();
    std::sort(cmds.begin(), cmds.end(),
              [](const command& a, const command& b) { return std::string(a.name) < b.name; });
    action chosen;
    std::vector<std::pair<CLI::App*, action>> actions;
    for (const auto& c : cmds) {
        CLI::App* sub = app.add_subcommand(c.name, c.description);
        actions.emplace_back(sub, c.setup(*sub));
    }
    // ds4 spells the system prompt flag "-sys"; CLI11 takes one letter after a single dash.
    std::vector<char*> args(argv, argv + argc);
    static char system_flag[] = "--system";
    for (char*& arg : args) {
        if (std::string(arg) == "-sys") arg = system_flag;
    }
    try {
        app.parse(argc, args.data());
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    for (auto& [sub, act] : actions) {
        if (sub->parsed()) chosen = act;
    }
    try {
        return chosen ? chosen() : 1;
    } catch (const magnetar::Error& e) {
        std::fprintf(stderr, "magnetar: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "magnetar: error: %s\n", e.what());
        return 1;
    }
}
