// Helpers shared by the subcommands: default model resolution.
#pragma once

#include <string>

namespace magnetar::cli {

// Where the embedded default model lives, relative to the repository root.
constexpr const char* kDefaultModelRelPath = "models/magnetar-tiny.gguf";

// The model to use: `flag` if non-empty, else $MAGNETAR_MODEL, else models/magnetar-tiny.gguf
// searched upwards from the current directory and from the executable's directory.
// Throws magnetar::Error explaining the three options when nothing is found.
std::string resolve_model_path(const std::string& flag);

}  // namespace magnetar::cli
