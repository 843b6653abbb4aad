// Line input of `magnetar chat` (see line_reader.h).
#include "cli/line_reader.h"

#include <editline/readline.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/generation.h"

namespace magnetar::cli {

namespace {
constexpr int kHistoryLines = 512;

// The text the next line starts with; inserted by the line editor's pre-input hook.
std::string g_initial;

int insert_initial() {
    if (!g_initial.empty()) {
        rl_insert_text(g_initial.c_str());
        g_initial.clear();
    }
    return 0;
}
}  // namespace

bool read_message(line_reader& in, const char* prompt, const char* continuation, std::string* out,
                  const std::string& initial) {
    out->clear();
    std::string line;
    if (!in.read(prompt, &line, initial)) return false;
    while (!line.empty() && line.back() == '\\') {
        line.pop_back();
        *out += line + "\n";
        if (!in.read(continuation, &line)) return true;
    }
    *out += line;
    return true;
}

std::string trim_line(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t\r\n");
    if (a == std::string::npos) return {};
    const size_t b = s.find_last_not_of(" \t\r\n");
    return s.substr(a, b - a + 1);
}

std::string default_history_file() {
    const char* home = std::getenv("HOME");
    return home && *home ? std::string(home) + "/.magnetar_history" : std::string();
}

line_reader::line_reader(std::string history_file)
    : tty_(isatty(STDIN_FILENO) != 0 && isatty(STDOUT_FILENO) != 0),
      history_file_(std::move(history_file)) {
    if (!tty_) return;
    using_history();
    stifle_history(kHistoryLines);
    if (!history_file_.empty()) read_history(history_file_.c_str());
}

line_reader::~line_reader() {
    if (tty_ && !history_file_.empty()) write_history(history_file_.c_str());
}

bool line_reader::read(const char* prompt, std::string* line, const std::string& initial) {
    line->clear();
    if (!tty_) {
        std::fputs(prompt, stdout);
        std::fflush(stdout);
        if (!std::getline(std::cin, *line)) {
            if (interrupted()) {
                clear_interrupt();
                std::cin.clear();
                return true;
            }
            return false;
        }
        return true;
    }
    // A line editor has one line: newlines of a message typed ahead become spaces.
    g_initial = initial;
    for (char& c : g_initial)
        if (c == '\n' || c == '\r') c = ' ';
    rl_pre_input_hook = insert_initial;
    char* s = readline(prompt);
    g_initial.clear();
    if (s == nullptr) {
        if (interrupted()) {  // Ctrl+C: a fresh prompt
            clear_interrupt();
            std::fputc('\n', stdout);
            return true;
        }
        return false;
    }
    *line = s;
    std::free(s);
    if (!line->empty()) add_history(line->c_str());
    clear_interrupt();
    return true;
}

}  // namespace magnetar::cli
