// Helpers shared by the subcommands: default model resolution, medians, output files.
#pragma once

#include <string>
#include <vector>

namespace magnetar::cli {

// Where the embedded default model lives, relative to the repository root.
constexpr const char* kDefaultModelRelPath = "models/magnetar-tiny.gguf";

// The model to use: `flag` if non-empty, else $MAGNETAR_MODEL, else models/magnetar-tiny.gguf
// searched upwards from the current directory and from the executable's directory.
// Throws magnetar::Error explaining the three options when nothing is found.
std::string resolve_model_path(const std::string& flag);

// Median of the values (the mean of the middle two for an even count), 0 for none: how the
// benchmarks summarize repeated passes.
double median(std::vector<double> v);

// Refuses to replace an existing file unless --overwrite was given (throws std::runtime_error
// with one line naming the file, and saying when it is also one of `inputs`).
void check_output(const std::string& path, bool overwrite,
                  const std::vector<std::string>& inputs = {});

// Writes `text` to `path` (replacing it); throws std::runtime_error naming the file.
void write_file_text(const std::string& path, const std::string& text);

}  // namespace magnetar::cli
