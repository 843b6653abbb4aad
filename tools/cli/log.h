// What the CLI writes on stderr besides its output, and the flags that choose it: errors
// always; notes (load reports, warnings, timings, progress bars) unless --log-disable; details
// (the model, how its file is held, the session and sampling settings) only with --verbose.
#pragma once

#include <CLI/CLI.hpp>

namespace magnetar::cli {

enum class verbosity { errors, normal, verbose };

// --verbose and --log-disable (they exclude each other), setting the process's verbosity.
void add_log_flags(CLI::App& sub);

void set_verbosity(verbosity v);
// Whether notes are printed (not --log-disable).
bool log_notes();
// Whether details are printed (--verbose).
bool log_details();

// A note on stderr unless --log-disable; a detail only with --verbose. printf formats; no
// newline is added.
void note(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void detail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace magnetar::cli
