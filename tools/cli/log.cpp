#include "cli/log.h"

#include <cstdarg>
#include <cstdio>

namespace magnetar::cli {

namespace {

verbosity g_verbosity = verbosity::normal;

void vprint(const char* fmt, va_list ap) {
    std::vfprintf(stderr, fmt, ap);
    std::fflush(stderr);
}

}  // namespace

void add_log_flags(CLI::App& sub) {
    auto* verbose = sub.add_flag_callback(
        "--verbose", [] { set_verbosity(verbosity::verbose); },
        "Also print the model, how its file is held, and the session and sampling settings");
    auto* quiet = sub.add_flag_callback(
        "--log-disable", [] { set_verbosity(verbosity::errors); },
        "Print nothing on stderr but errors (no progress bars, notes, warnings or timings)");
    verbose->excludes(quiet);
}

void set_verbosity(verbosity v) {
    g_verbosity = v;
}

bool log_notes() {
    return g_verbosity != verbosity::errors;
}

bool log_details() {
    return g_verbosity == verbosity::verbose;
}

void note(const char* fmt, ...) {
    if (!log_notes()) return;
    va_list ap;
    va_start(ap, fmt);
    vprint(fmt, ap);
    va_end(ap);
}

void detail(const char* fmt, ...) {
    if (!log_details()) return;
    va_list ap;
    va_start(ap, fmt);
    vprint(fmt, ap);
    va_end(ap);
}

}  // namespace magnetar::cli
