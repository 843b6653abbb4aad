// Vocabulary set-up, special-token matching, the encode entry points and decoding.
#include "tokenizer/tokenizer.h"

#include <climits>
#include <cstdint>
#include <iterator>
#include <utility>

#include "core/error.h"
#include "core/format.h"
#include "gguf/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/piece_cache.h"

namespace magnetar {

namespace {

// The tokens the engine cannot work without (spec protocol.md §1.1), in special_ids order.
constexpr const char* kRequiredSpecials[] = {
    "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>",
    "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
    "<\uFF5CUser\uFF5C>",
    "<\uFF5CAssistant\uFF5C>",
    "<think>",
    "</think>",
    "\uFF5CDSML\uFF5C",
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------------------------

tokenizer::tokenizer(std::vector<std::string> tokens, std::vector<int32_t> types,
                     const std::vector<std::string>& merges, std::string_view pre)
    : tokens_(std::move(tokens)), types_(std::move(types)), pre_(pre) {
    if (tokens_.empty()) throw Error("tokenizer: the vocabulary is empty");
    if (tokens_.size() > static_cast<size_t>(INT32_MAX / 2)) {
        throw Error(strfmt("tokenizer: vocabulary of %zu tokens is too large", tokens_.size()));
    }
    if (types_.empty()) {
        types_.assign(tokens_.size(), static_cast<int32_t>(token_kind::normal));
    } else if (types_.size() != tokens_.size()) {
        throw Error(
            strfmt("tokenizer: %zu token types for %zu tokens", types_.size(), tokens_.size()));
    }
    const int32_t n = n_vocab();
    all_ids_.reserve(tokens_.size());
    for (int32_t id = 0; id < n; ++id) all_ids_[tokens_[static_cast<size_t>(id)]] = id;

    int32_t* required_ids[] = {&specials_.bos,       &specials_.eos,   &specials_.user,
                               &specials_.assistant, &specials_.think, &specials_.think_end,
                               &specials_.dsml};
    special_.assign(tokens_.size(), false);
    for (size_t k = 0; k < std::size(kRequiredSpecials); ++k) {
        const int32_t id = find_token(kRequiredSpecials[k]);
        if (id < 0) {
            throw Error(
                strfmt("tokenizer: required special token \"%s\" is missing from the "
                       "vocabulary",
                       kRequiredSpecials[k]));
        }
        *required_ids[k] = id;
        special_[static_cast<size_t>(id)] = true;
    }
    for (int32_t id = 0; id < n; ++id) {
        const auto kind = static_cast<token_kind>(types_[static_cast<size_t>(id)]);
        if (kind == token_kind::control || kind == token_kind::user_defined) {
            special_[static_cast<size_t>(id)] = true;
        }
    }

    // Special literals go into a byte trie; when a string repeats, the id that all_ids_ holds
    // (the later one) is the one matched.
    trie_.emplace_back();
    for (int32_t id = 0; id < n; ++id) {
        const std::string& s = tokens_[static_cast<size_t>(id)];
        if (!special_[static_cast<size_t>(id)]) {
            if (all_ids_.at(s) == id) bpe_vocab_.emplace(s, id);
            continue;
        }
        special_list_.push_back(id);
        if (s.empty() || all_ids_.at(s) != id) continue;
        int32_t node = 0;
        for (unsigned char c : s) {
            int32_t child = -1;
            for (const auto& [b, idx] : trie_[static_cast<size_t>(node)].next) {
                if (b == c) child = idx;
            }
            if (child < 0) {
                child = static_cast<int32_t>(trie_.size());
                trie_[static_cast<size_t>(node)].next.emplace_back(c, child);
                trie_.emplace_back();
            }
            node = child;
        }
        trie_[static_cast<size_t>(node)].id = id;
        special_first_byte_[static_cast<unsigned char>(s[0])] = true;
    }

    bpe_ = std::make_unique<bpe_merges>(bpe_vocab_, n, merges);

    decoded_off_.reserve(tokens_.size() + 1);
    for (const std::string& s : tokens_) {
        decoded_off_.push_back(decoded_.size());
        if (!byte_level::decode(s, decoded_)) decoded_ += s;
    }
    decoded_off_.push_back(decoded_.size());
}

tokenizer::~tokenizer() = default;

namespace {

const gguf::value& require_key(const gguf::reader& r, const char* key) {
    const gguf::value* v = r.find(key);
    if (!v) throw Error(strfmt("%s: missing tokenizer key %s", r.path().c_str(), key));
    return *v;
}

std::string require_string(const gguf::reader& r, const char* key) {
    const gguf::value& v = require_key(r, key);
    if (v.type != gguf::value_type::string) {
        throw Error(strfmt("%s: key %s: expected a string, got %s", r.path().c_str(), key,
                           gguf::value_type_name(v.type)));
    }
    return v.s;
}

std::vector<std::string> string_array(const gguf::reader& r, const char* key,
                                      const gguf::value& v) {
    if (v.type != gguf::value_type::array || v.elem_type != gguf::value_type::string) {
        throw Error(
            strfmt("%s: key %s: expected an array of strings, got %s", r.path().c_str(), key,
                   v.type == gguf::value_type::array
                       ? strfmt("an array of %s", gguf::value_type_name(v.elem_type)).c_str()
                       : gguf::value_type_name(v.type)));
    }
    std::vector<std::string> out;
    out.reserve(v.arr.size());
    for (const auto& item : v.arr) out.push_back(item.s);
    return out;
}

}  // namespace

std::unique_ptr<tokenizer> tokenizer::from_gguf(const gguf::reader& r) {
    const std::string model = require_string(r, "tokenizer.ggml.model");
    if (model != "gpt2") {
        throw Error(
            strfmt("%s: key tokenizer.ggml.model: expected \"gpt2\" (byte-level BPE), got "
                   "\"%s\"",
                   r.path().c_str(), model.c_str()));
    }
    const std::string pre = require_string(r, "tokenizer.ggml.pre");
    if (pre != "deepseek-v3" && pre != "joyai-llm") {
        throw Error(
            strfmt("%s: key tokenizer.ggml.pre: expected \"deepseek-v3\" or \"joyai-llm\", "
                   "got \"%s\"",
                   r.path().c_str(), pre.c_str()));
    }
    std::vector<std::string> tokens =
        string_array(r, "tokenizer.ggml.tokens", require_key(r, "tokenizer.ggml.tokens"));
    std::vector<std::string> merges =
        string_array(r, "tokenizer.ggml.merges", require_key(r, "tokenizer.ggml.merges"));
    std::vector<int32_t> types;
    if (const gguf::value* tv = r.find("tokenizer.ggml.token_type")) {
        const bool int_array =
            tv->type == gguf::value_type::array &&
            (tv->elem_type == gguf::value_type::i32 || tv->elem_type == gguf::value_type::u32);
        if (!int_array) {
            throw Error(
                strfmt("%s: key tokenizer.ggml.token_type: expected an array of i32, got %s",
                       r.path().c_str(), gguf::value_type_name(tv->type)));
        }
        if (tv->arr.size() != tokens.size()) {
            throw Error(
                strfmt("%s: key tokenizer.ggml.token_type: expected %zu entries (one per "
                       "token), got %zu",
                       r.path().c_str(), tokens.size(), tv->arr.size()));
        }
        types.reserve(tv->arr.size());
        for (const auto& item : tv->arr) {
            types.push_back(
                static_cast<int32_t>(item.elem_type == gguf::value_type::u32 ? item.u : item.i));
        }
    }
    try {
        return std::make_unique<tokenizer>(std::move(tokens), std::move(types), merges, pre);
    } catch (const Error& e) {
        throw Error(r.path() + ": " + e.what());
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

// Per-call state: BPE buffers and the piece memo. Living on the caller's stack keeps the
// tokenizer immutable and thread-safe.
struct tokenizer::encode_state final : pre_tokenizer::sink {
    explicit encode_state(const bpe_merges& b) : bpe(b) {}

    void piece(const char* s, size_t n) override {
        const std::string_view p(s, n);
        if (n <= 2 || n > piece_cache::kMaxPiece) {  // one or two bytes: cheaper than the memo
            bpe.encode_piece(p, scratch, *out);
            return;
        }
        const uint64_t h = piece_cache::hash(p);
        if (const auto ids = cache.find(p, h); !ids.empty()) {
            out->insert(out->end(), ids.begin(), ids.end());
            return;
        }
        const size_t before = out->size();
        bpe.encode_piece(p, scratch, *out);
        cache.insert(p, h, std::span<const int32_t>(*out).subspan(before));
    }

    const bpe_merges& bpe;
    std::vector<int32_t>* out = nullptr;
    bpe_merges::scratch scratch;
    piece_cache cache;
};

void tokenizer::encode_plain(std::string_view text, encode_state& st,
                             std::vector<int32_t>& out) const {
    st.out = &out;
    pre_.split(text, st);
}

std::pair<int32_t, size_t> tokenizer::match_special(std::string_view text, size_t pos) const {
    int32_t node = 0;
    std::pair<int32_t, size_t> best{-1, 0};
    for (size_t i = pos; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        int32_t child = -1;
        for (const auto& [b, idx] : trie_[static_cast<size_t>(node)].next) {
            if (b == c) {
                child = idx;
                break;
            }
        }
        if (child < 0) break;
        node = child;
        if (trie_[static_cast<size_t>(node)].id >= 0) {
            best = {trie_[static_cast<size_t>(node)].id, i + 1 - pos};  // keep the longest
        }
    }
    return best;
}

void tokenizer::encode_append(std::string_view text, bool specials,
                              std::vector<int32_t>& out) const {
    encode_state st(*bpe_);
    if (!specials) {
        encode_plain(text, st, out);
        return;
    }
    size_t start = 0;  // first byte not yet tokenized
    for (size_t pos = 0; pos < text.size(); ++pos) {
        if (!special_first_byte_[static_cast<unsigned char>(text[pos])]) continue;
        const auto [id, len] = match_special(text, pos);
        if (id < 0) continue;
        encode_plain(text.substr(start, pos - start), st, out);
        out.push_back(id);
        start = pos + len;
        pos = start - 1;
    }
    encode_plain(text.substr(start), st, out);
}

std::vector<int32_t> tokenizer::encode(std::string_view text) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 1);
    encode_append(text, false, out);
    return out;
}

std::vector<int32_t> tokenizer::encode_chat(std::string_view text) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 1);
    encode_append(text, true, out);
    return out;
}

// ---------------------------------------------------------------------------------------------
// Lookup and decoding
// ---------------------------------------------------------------------------------------------

bool tokenizer::is_special(int32_t id) const {
    return valid(id) && special_[static_cast<size_t>(id)];
}

int32_t tokenizer::find_token(std::string_view text) const {
    auto it = all_ids_.find(text);
    return it == all_ids_.end() ? -1 : it->second;
}

std::string_view tokenizer::token_bytes(int32_t id) const {
    if (!valid(id)) {
        throw Error(strfmt("token id %d is outside the vocabulary (0..%d)", id, n_vocab() - 1));
    }
    const size_t b = decoded_off_[static_cast<size_t>(id)];
    return std::string_view(decoded_).substr(b, decoded_off_[static_cast<size_t>(id) + 1] - b);
}

std::string tokenizer::decode(std::span<const int32_t> ids) const {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
}

}  // namespace magnetar
