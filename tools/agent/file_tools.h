// The agent's file tools: read (numbered lines, a continue offset), more, write, edit (by exact
// unique text, or by line ranges checked against the lines the model was last shown), search
// (literal or regular expression, a file-name glob, .git skipped, a result cap) and list.
//
// Owns: what the model was shown of each file (a CRC-32 per line number, for line-range edits),
// where `more` continues, and the limits. Does not own: path confinement (workspace.h) or the
// tool-call syntax (tools.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "agent/workspace.h"

namespace magnetar::agent {

// What a tool call returns to the model: the text, and whether it did what was asked.
struct tool_result {
    bool ok = true;
    std::string text;
};

struct file_limits {
    uint64_t max_file_bytes = uint64_t{16} << 20;  // read / edit / search refuse larger files
    int64_t read_lines = 250;                      // lines of one read when it gives no limit
    // Bytes one tool result may hold (the caller sets it from the free context): a whole-file
    // read that needs more is refused, a windowed one is cut at a line boundary.
    uint64_t max_result_bytes = 64 << 10;
    int max_line_chars = 2000;  // longer lines are cut in the result (marked)
    int search_results = 100;   // default cap of search hits
    int search_results_max = 1000;
    int list_entries = 500;
};

// Writes `content` to `target` (whose folder exists) through a new temporary file beside it
// (created with `mode` before the umask, never through a symbolic link), fsync and a rename, so
// a failure never leaves a half-written file. False with *why set on any error.
bool write_atomically(const std::filesystem::path& target, const std::string& content,
                      unsigned mode, std::string* why);

class file_tools {
  public:
    file_tools(const workspace& ws, file_limits limits) : ws_(ws), lim_(limits) {}

    // Lines [offset, offset + limit) (1-based); limit 0: the default window; whole: every line
    // (refused when the result would exceed the budget).
    tool_result read(const std::string& path, int64_t offset, int64_t limit, bool whole);
    // The next window of the latest read (of `path`, or of the latest file read when empty).
    tool_result more(const std::string& path);
    tool_result write(const std::string& path, const std::string& content);
    // Replaces the one occurrence of old_text (refused when it occurs zero or several times).
    tool_result edit_text(const std::string& path, const std::string& old_text,
                          const std::string& new_text);
    // Replaces lines [first, last] (1-based) by new_text; every line of the range must have been
    // shown by read and be unchanged since (CRC-32). last = first - 1 inserts before `first`.
    tool_result edit_lines(const std::string& path, int64_t first, int64_t last,
                           const std::string& new_text);
    tool_result search(const std::string& pattern, const std::string& path, bool regex,
                       const std::string& glob, int max_results);
    tool_result list(const std::string& path);

    file_limits& limits() { return lim_; }

  private:
    struct shown_file {
        std::map<int64_t, uint32_t> crc;  // line number -> CRC-32 of the line as shown
        int64_t next_line = 1;            // where `more` continues
        int64_t n_lines = 0;
    };
    tool_result window(const std::string& shown_name, const std::string& text, int64_t offset,
                       int64_t limit, bool whole, shown_file& sf);
    std::optional<std::string> load(const std::string& path, std::string* resolved,
                                    tool_result* err) const;

    const workspace& ws_;
    file_limits lim_;
    std::map<std::string, shown_file> shown_;  // by resolved path
    std::string last_read_;
};

}  // namespace magnetar::agent
