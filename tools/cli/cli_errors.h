// Command-line errors a person understands: one formatter for CLI11's parse errors (no
// 309-digit ranges, "not a number", extra words in the order typed, the nearest command or
// option suggested), and the habits of other tools mapped before parsing (`-sys`, `-ngl`).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace magnetar::cli {

// Rewrites single-dash long flags that CLI11 would split (`-sys` -> `--system`, `-ngl` ->
// `--n-gpu-layers`) in place.
void rewrite_habits(std::vector<char*>& args);

// The closest of `names` to `word` by edit distance, or "" when none is close enough.
std::string nearest(const std::string& word, const std::vector<std::string>& names);

// When args[1] names no command: one line with the nearest command, else "".
std::string unknown_command(const std::vector<char*>& args, const std::vector<std::string>& names);

// One line for a parse error of `app` (its parsed subcommand, if any, gives the option names
// and the "magnetar run" prefix).
std::string friendly_parse_error(const CLI::App& app, const CLI::ParseError& e);

}  // namespace magnetar::cli
