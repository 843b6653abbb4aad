// Shared set-up of the tokenizer tests: the DeepSeek vocabulary (from the reference package's
// tokenizer.json, laid out as synthetic model GGUFs carry it) and a tokenizer built from it,
// each built once per test process (the JSON parse is shared through the fixture cache).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gen-model/vocab.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::test {

const genmodel::vocab& deepseek_vocab();
const tokenizer& deepseek_tokenizer();

// Path of a file in the source tree.
std::string source_path(const std::string& rel);
// Single-quoted for /bin/sh.
std::string shell_quote(const std::string& s);
// Printable form of bytes for failure messages: ASCII kept, everything else as \xNN.
std::string escape_bytes(std::string_view s);
// "[1, 2, 3]" of ids[from, to), clamped.
std::string ids_str(const std::vector<int32_t>& ids, size_t from, size_t to);

}  // namespace magnetar::test
