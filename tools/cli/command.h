// Subcommand registry of the `magnetar` binary.
//
// Each front end defines its subcommand in its own file with MAGNETAR_COMMAND: a name, a
// one-line description and a function that adds options to its CLI11 sub-app and returns the
// action to run after parsing. main.cpp builds the app from the registry.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace magnetar::cli {

// The action returns the process exit code.
using action = std::function<int()>;
using setup_fn = action (*)(CLI::App& sub);

struct command {
    const char* name;
    const char* description;
    setup_fn setup;
};

std::vector<command>& command_registry();

struct command_registrar {
    command_registrar(const char* name, const char* description, setup_fn setup) {
        command_registry().push_back({name, description, setup});
    }
};

}  // namespace magnetar::cli

#define MAGNETAR_COMMAND(ident, name, description, setup) \
    static ::magnetar::cli::command_registrar magnetar_command_##ident(name, description, setup)
