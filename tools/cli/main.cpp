// The `magnetar` binary: one executable, one subcommand per front end.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/cli_errors.h"
#include "cli/command.h"
#include "core/error.h"
#include "dist/comm.h"
#include "dist/pipeline.h"
#include "dist/stage.h"

namespace magnetar::cli {

std::vector<command>& command_registry() {
    static std::vector<command> registry;
    return registry;
}

}  // namespace magnetar::cli

namespace {

int run_cli(int argc, char** argv) {
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
    // Habits of other tools (ds4's -sys, llama.cpp's -ngl) that CLI11 would split.
    std::vector<char*> args(argv, argv + argc);
    rewrite_habits(args);
    std::vector<std::string> names;
    for (const auto& c : cmds) names.emplace_back(c.name);
    if (const std::string line = unknown_command(args, names); !line.empty()) {
        std::fprintf(stderr, "%s\n", line.c_str());
        return 2;
    }
    if (argc == 1) {
        std::fputs(app.help().c_str(), stdout);
        return 2;
    }
    try {
        app.parse(argc, args.data());
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "%s\n", friendly_parse_error(app, e).c_str());
        return 2;
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

}  // namespace

// Under mpirun with several ranks (docs/distributed.md), rank 0 runs the front end and the
// first pipeline stage; every other rank serves its stage until rank 0 is done.
int main(int argc, char** argv) {
    // A file-size limit (ulimit -f) must fail the write that reaches it with EFBIG, which every
    // writer (disk KV cache, quantize, gen-model, ...) reports as an error, instead of killing
    // the process with SIGXFSZ: `serve` answers the request and carries on without that file.
    ::signal(SIGXFSZ, SIG_IGN);
    namespace dist = magnetar::dist;
    if (dist::launched_multi() && dist::built_with_mpi()) {
        try {
            dist::init(&argc, &argv);
        } catch (const magnetar::Error& e) {
            std::fprintf(stderr, "magnetar: error: %s\n", e.what());
            return 1;
        }
        if (dist::rank() != 0) {
            const int rc = dist::run_worker();
            dist::finalize();
            return rc;
        }
    }
    const int rc = run_cli(argc, argv);
    try {
        dist::pipeline::shutdown_all();
    } catch (const magnetar::Error& e) {
        std::fprintf(stderr, "magnetar: error: %s\n", e.what());
    }
    dist::finalize();
    return rc;
}
