// The GPT-2 byte-level alphabet and the UTF-8 functions the tokenizer needs.
//
// Owns: the byte <-> code point table (spec protocol.md §1.3) that token strings are stored
// in, the mapping of a token string back to raw bytes, UTF-8 validation, and utf8_stream, which
// turns the byte pieces of a token stream into text without ever splitting a character.
// Does not own: vocabularies or merges (tokenizer.h, bpe.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace magnetar::byte_level {

// The code point byte b is written as in token strings: printable bytes map to themselves,
// the other 68 to U+0100 + n in ascending byte order (space -> U+0120 'Ġ').
uint32_t byte_to_cp(uint8_t b);
// UTF-8 of byte_to_cp(b): one or two bytes.
std::string_view byte_to_utf8(uint8_t b);
// Raw bytes -> token-string form (every byte becomes one alphabet character).
std::string encode(std::string_view bytes);
// Token-string form -> raw bytes. Returns false, leaving `out` as it was, when the string is
// not valid UTF-8 or holds a character outside the alphabet (added tokens such as
// "<｜User｜>"); the HF ByteLevel decoder then emits the string verbatim, and so do we.
bool decode(std::string_view token, std::string& out);

// Length of the well-formed UTF-8 sequence starting at s[0] (1..4), or 0 when s[0..n) does not
// start with one (stray continuation byte, overlong form, surrogate, > U+10FFFF, truncated).
size_t utf8_sequence_len(const unsigned char* s, size_t n);
// Decodes the well-formed sequence at s[0] into *cp and returns its length, or 0 as above.
size_t utf8_decode(const unsigned char* s, size_t n, uint32_t* cp);
bool is_valid_utf8(std::string_view s);

// Assembles decoded token bytes into text for streaming front ends. push() returns the longest
// prefix of everything pushed so far that cannot change any more: complete characters, plus
// bytes that can never become part of a valid character. A trailing prefix of a character that
// may still be completed by the next token (at most 3 bytes) is held back until the next
// push() or flush(). With replace_invalid, every ill-formed subsequence is replaced by U+FFFD
// (one per maximal subpart, as WHATWG TextDecoder does), so the output is always valid UTF-8;
// otherwise bytes pass through unchanged and the concatenated output equals the input.
class utf8_stream {
  public:
    explicit utf8_stream(bool replace_invalid = false) : replace_invalid_(replace_invalid) {}

    std::string push(std::string_view bytes);
    // Everything still held back (an unfinished character at the end of the stream).
    std::string flush();
    bool has_pending() const { return !pending_.empty(); }

  private:
    std::string emit(std::string_view bytes) const;

    bool replace_invalid_;
    std::string pending_;
};

}  // namespace magnetar::byte_level
