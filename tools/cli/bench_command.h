// Sub-commands of `magnetar bench` (`magnetar bench tokenizer`, ...), registered like the
// top-level commands: each benchmark defines itself in its own file with MAGNETAR_BENCH_COMMAND
// and cmd_bench.cpp builds the `bench` sub-app from this registry.
#pragma once

#include <vector>

#include "cli/command.h"

namespace magnetar::cli {

std::vector<command>& bench_registry();

struct bench_registrar {
    bench_registrar(const char* name, const char* description, setup_fn setup) {
        bench_registry().push_back({name, description, setup});
    }
};

}  // namespace magnetar::cli

#define MAGNETAR_BENCH_COMMAND(ident, name, description, setup) \
    static ::magnetar::cli::bench_registrar magnetar_bench_command_##ident(name, description, setup)
