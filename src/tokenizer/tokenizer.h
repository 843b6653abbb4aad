// The DeepSeek V4 tokenizer: byte-level BPE with the DeepSeek V3/V4 pre-tokenizer.
//
// Owns: the vocabulary (id <-> token string, token types), special-token lookup by string, the
// two encoding entry points of spec protocol.md §1.6 and decoding to bytes (§1.7). Built from
// plain vectors or from the tokenizer.ggml.* keys of a GGUF file. Does not own chat rendering
// or DSML (src/chat) and does not decide which text is trusted; callers pick the entry point.
//
// Entry points (docs/tokenizer.md explains the choices):
//   encode()      plain text. Never yields a special token: literals such as "<｜User｜>" in
//                 user content are split into ordinary BPE tokens, so content cannot inject a
//                 control token.
//   encode_chat() rendered chat text. Every special token literal is matched atomically,
//                 leftmost and longest first, as the HF tokenizer matches its added tokens; the
//                 stretches between literals are tokenized as plain text.
// "Special" tokens are those typed control or user-defined in the vocabulary, plus the seven
// required ones whatever their type.
//
// A tokenizer is immutable after construction; every const method is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace magnetar {

namespace gguf {
class reader;
}

// llama.cpp token types (tokenizer.ggml.token_type).
enum class token_kind : int32_t {
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6,
};

class tokenizer {
  public:
    // Ids of the tokens the engine needs, looked up by their strings at construction.
    struct special_ids {
        int32_t bos = -1;        // <｜begin▁of▁sentence｜>
        int32_t eos = -1;        // <｜end▁of▁sentence｜>
        int32_t user = -1;       // <｜User｜>
        int32_t assistant = -1;  // <｜Assistant｜>
        int32_t think = -1;      // <think>
        int32_t think_end = -1;  // </think>
        int32_t dsml = -1;       // ｜DSML｜
    };

    // tokens: id -> token string in byte-level form. types: id -> token_kind value, same length,
    // or empty (then all tokens are normal apart from the required specials). merges: "left
    // right", rank = index. pre: tokenizer.ggml.pre. Throws magnetar::Error on an unsupported
    // pre-tokenizer, a malformed merge or a missing required special token (named).
    tokenizer(std::vector<std::string> tokens, std::vector<int32_t> types,
              const std::vector<std::string>& merges, std::string_view pre = "deepseek-v3");
    // Reads tokenizer.ggml.{model,pre,tokens,token_type,merges}; model must be "gpt2". Errors
    // name the file and the key.
    static std::unique_ptr<tokenizer> from_gguf(const gguf::reader& r);

    ~tokenizer();
    tokenizer(const tokenizer&) = delete;
    tokenizer& operator=(const tokenizer&) = delete;

    std::vector<int32_t> encode(std::string_view text) const;
    std::vector<int32_t> encode_chat(std::string_view text) const;
    // Appends to `out`; `specials` selects encode_chat() semantics.
    void encode_append(std::string_view text, bool specials, std::vector<int32_t>& out) const;

    // Bytes of one token: the literal string for special tokens (and any token with characters
    // outside the byte alphabet), else the raw bytes it stands for. May be a partial UTF-8
    // character; streaming front ends use byte_level::utf8_stream.
    std::string_view token_bytes(int32_t id) const;
    // Concatenated bytes of `ids`. Throws magnetar::Error naming an id outside the vocabulary.
    std::string decode(std::span<const int32_t> ids) const;

    int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
    bool valid(int32_t id) const { return id >= 0 && id < n_vocab(); }
    const std::string& token_text(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
    token_kind kind(int32_t id) const {
        return static_cast<token_kind>(types_.at(static_cast<size_t>(id)));
    }
    // True for the tokens encode_chat() recognises and encode() never produces.
    bool is_special(int32_t id) const;
    // Id of the token with this exact stored string (the later id if it repeats), or -1.
    int32_t find_token(std::string_view text) const;
    const special_ids& specials() const { return specials_; }
    const std::string& pre_name() const { return pre_.name(); }
    size_t n_special() const { return special_list_.size(); }

    // Tokens BPE may emit (every token that is not special) and the merge list, for the
    // reference merge loop in tests.
    const token_map& bpe_vocab() const { return bpe_vocab_; }
    const bpe_merges& merges() const { return *bpe_; }
    const pre_tokenizer& pre() const { return pre_; }

  private:
    struct encode_state;
    void encode_plain(std::string_view text, encode_state& st, std::vector<int32_t>& out) const;
    // Longest special literal starting at text[pos]: its id and length, or {-1, 0}.
    std::pair<int32_t, size_t> match_special(std::string_view text, size_t pos) const;

    struct trie_node {
        int32_t id = -1;
        std::vector<std::pair<unsigned char, int32_t>> next;  // byte -> node index
    };

    std::vector<std::string> tokens_;
    std::vector<int32_t> types_;
    token_map all_ids_;    // every token
    token_map bpe_vocab_;  // tokens BPE may emit
    std::vector<bool> special_;
    std::vector<int32_t> special_list_;
    std::vector<trie_node> trie_;  // special literals; node 0 is the root
    bool special_first_byte_[256] = {};
    std::string decoded_;              // token_bytes of every id, concatenated
    std::vector<size_t> decoded_off_;  // n_vocab + 1 offsets into decoded_
    special_ids specials_;
    pre_tokenizer pre_;
    std::unique_ptr<bpe_merges> bpe_;
};

}  // namespace magnetar
