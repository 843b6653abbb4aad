// Input lines of `magnetar chat`: libedit (line editing, history in a file) when standard input
// is a terminal, plain lines otherwise (pipes, tests).
#pragma once

#include <string>

namespace magnetar::cli {

class line_reader {
  public:
    // history_file: where the history persists (512 lines); empty: no history file.
    explicit line_reader(std::string history_file);
    ~line_reader();
    line_reader(const line_reader&) = delete;
    line_reader& operator=(const line_reader&) = delete;

    // Shows `prompt` and reads one line (without its newline). False at the end of input
    // (Ctrl+D). Ctrl+C at the prompt discards the line and returns an empty one. On a terminal
    // the line starts out holding `initial` (newlines shown as spaces), to be edited.
    bool read(const char* prompt, std::string* line, const std::string& initial = "");
    bool interactive() const { return tty_; }

  private:
    bool tty_;
    std::string history_file_;
};

// One message: a line, continued on the next (shown `continuation`) while it ends with a
// backslash, which becomes a newline. False at the end of input. `initial`: what the first line
// starts with on a terminal (its newlines shown as spaces).
bool read_message(line_reader& in, const char* prompt, const char* continuation, std::string* out,
                  const std::string& initial = "");

// `s` without leading and trailing spaces, tabs and line ends.
std::string trim_line(const std::string& s);

// $HOME/.magnetar_history, or "" without $HOME.
std::string default_history_file();

}  // namespace magnetar::cli
