// Where the CLI's tokenizer commands get their vocabulary: a model GGUF (-m, or the default
// model) or a DeepSeek tokenizer.json (--tokenizer-json, or the reference package's copy).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace magnetar::cli {

struct tokenizer_source {
    std::string model;           // -m
    std::string tokenizer_json;  // --tokenizer-json
};

void add_tokenizer_options(CLI::App& sub, tokenizer_source& src);

// Order: --tokenizer-json, then -m, then the default model (resolve_model_path), then the
// reference package's tokenizer.json. *from receives a short description of the choice.
// Throws magnetar::Error when nothing is found or the source is invalid.
std::unique_ptr<tokenizer> load_tokenizer(const tokenizer_source& src, std::string* from = nullptr);

}  // namespace magnetar::cli
