// The DeepSeek V3/V4 split regexes: PCRE2 programs, the Unicode classes read from PCRE2, and
// the direct matcher that applies the same regexes without a regex engine on the hot path.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <array>
#include <atomic>
#include <map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "tokenizer/byte_level.h"

namespace magnetar {

namespace {

// ECMAScript's \s (the reference runs these regexes in JavaScript).
// clang-format off
#define MAGNETAR_JS_SPACE \
    "\\t\\n\\x0B\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
    "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"

// tokenizer.json "pre_tokenizer": a Sequence of three Split (behavior Isolated) regexes, then
// ByteLevel without its own regex. Transcribed to PCRE2 syntax; \s and \S spelled out.
constexpr std::array<const char*, 3> kDeepSeekV3Patterns = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
    "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*"
    "|[" MAGNETAR_JS_SPACE "]*[\\r\\n]+"
    "|[" MAGNETAR_JS_SPACE "]+(?![^" MAGNETAR_JS_SPACE "])"
    "|[" MAGNETAR_JS_SPACE "]+",
};
// clang-format on

#undef MAGNETAR_JS_SPACE

// ---------------------------------------------------------------------------------------------
// PCRE2 wrappers
// ---------------------------------------------------------------------------------------------

struct code_deleter {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct match_data_deleter {
    void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
using code_ptr = std::unique_ptr<pcre2_code, code_deleter>;
using match_data_ptr = std::unique_ptr<pcre2_match_data, match_data_deleter>;

std::string pcre2_message(int code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof(msg));
    return reinterpret_cast<const char*>(msg);
}

// Compiles with UTF + UCP; *jit is cleared when JIT compilation is unavailable (the
// interpreter then gives the same results, slower).
code_ptr compile(const char* pattern, bool* jit) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    code_ptr c(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off,
                             nullptr));
    if (!c) {
        throw Error(strfmt("pre-tokenizer: regex /%s/ does not compile at offset %zu: %s", pattern,
                           static_cast<size_t>(err_off), pcre2_message(err).c_str()));
    }
    if (pcre2_jit_compile(c.get(), PCRE2_JIT_COMPLETE) != 0) *jit = false;
    return c;
}

// Next match of `re` in s[0..n) at or after `from`; false if none.
bool find_match(const pcre2_code* re, bool jit, const char* s, size_t n, size_t from,
                pcre2_match_data* md, size_t* ms, size_t* me) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s);
    const int rc = jit ? pcre2_jit_match(re, subject, n, from, 0, md, nullptr)
                       : pcre2_match(re, subject, n, from, 0, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
        throw Error(strfmt("pre-tokenizer: regex match failed on a %zu-byte piece: %s", n,
                           pcre2_message(rc).c_str()));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return true;
}

// ---------------------------------------------------------------------------------------------
// Unicode classes, read from PCRE2 once per process: each property class is matched over a
// buffer holding every Unicode scalar value, so the tables say exactly what the regexes' \p{..}
// items say, with the same Unicode version.
// ---------------------------------------------------------------------------------------------

enum : uint8_t {
    kLetter = 1,  // \p{L}
    kMark = 2,    // \p{M}
    kPunct = 4,   // \p{P} or \p{S}
    kNumber = 8,  // \p{N}
    kSpace = 16,  // ECMAScript \s
};

class unicode_classes {
  public:
    static const unicode_classes& get() {
        static const unicode_classes t;
        return t;
    }
    uint8_t of(uint32_t cp) const {
        return blocks_[(static_cast<size_t>(index_[cp >> 8]) << 8) | (cp & 0xFF)];
    }

  private:
    unicode_classes() {
        std::vector<uint8_t> flat(0x110000, 0);
        std::string all(4 * 0x110000, '\0');  // every scalar value, UTF-8
        size_t len = 0;
        for (uint32_t cp = 0; cp < 0x110000; ++cp) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            len += put_utf8(&all[len], cp);
        }
        all.resize(len);
        const std::pair<const char*, uint8_t> classes[] = {{"\\p{L}+", kLetter},
                                                           {"\\p{M}+", kMark},
                                                           {"[\\p{P}\\p{S}]+", kPunct},
                                                           {"\\p{N}+", kNumber}};
        for (const auto& [pattern, flag] : classes) {
            bool jit = true;
            const code_ptr re = compile(pattern, &jit);
            const match_data_ptr md(pcre2_match_data_create_from_pattern(re.get(), nullptr));
            size_t ms = 0, me = 0, at = 0;
            while (at < all.size() &&
                   find_match(re.get(), jit, all.data(), all.size(), at, md.get(), &ms, &me)) {
                const auto* u = reinterpret_cast<const unsigned char*>(all.data());
                for (size_t i = ms; i < me;) {
                    uint32_t cp = 0;
                    i += byte_level::utf8_decode(u + i, all.size() - i, &cp);
                    flat[cp] |= flag;
                }
                at = me;
            }
        }
        for (uint32_t cp : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0xA0u, 0x1680u, 0x2028u,
                            0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) {
            flat[cp] |= kSpace;
        }
        for (uint32_t cp = 0x2000; cp <= 0x200A; ++cp) flat[cp] |= kSpace;

        // Two-level table: identical 256-entry blocks are stored once (~100 KiB instead of 1 MiB).
        std::map<std::string, uint16_t> seen;
        index_.resize(0x1100);
        for (size_t b = 0; b < index_.size(); ++b) {
            std::string block(reinterpret_cast<const char*>(&flat[b << 8]), 256);
            auto [it, fresh] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
            if (fresh) blocks_.insert(blocks_.end(), block.begin(), block.end());
            index_[b] = it->second;
        }
    }

    static size_t put_utf8(char* out, uint32_t cp) {
        if (cp < 0x80) {
            out[0] = static_cast<char>(cp);
            return 1;
        }
        if (cp < 0x800) {
            out[0] = static_cast<char>(0xC0 | (cp >> 6));
            out[1] = static_cast<char>(0x80 | (cp & 0x3F));
            return 2;
        }
        if (cp < 0x10000) {
            out[0] = static_cast<char>(0xE0 | (cp >> 12));
            out[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out[2] = static_cast<char>(0x80 | (cp & 0x3F));
            return 3;
        }
        out[0] = static_cast<char>(0xF0 | (cp >> 18));
        out[1] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out[2] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out[3] = static_cast<char>(0x80 | (cp & 0x3F));
        return 4;
    }

    std::vector<uint16_t> index_;  // cp >> 8 -> block
    std::vector<uint8_t> blocks_;
};

// ---------------------------------------------------------------------------------------------
// Direct matcher: the three regexes written out as code over the class tables. At each position
// it says whether a match starts there and where it ends, exactly as the backtracking regex
// would. Whenever ill-formed UTF-8 is involved it answers `unsure` and PCRE2 decides (an
// ill-formed byte matches no regex item, which the code below need not model). The PCRE2-only
// path is the reference it is tested and fuzzed against.
// ---------------------------------------------------------------------------------------------

// match: a match is s[p..*me). none: no match starts before *me (> p). unsure: ask PCRE2.
enum class fast { match, none, unsure };

struct ch {
    uint32_t cp;
    uint32_t len;  // 0: ill-formed UTF-8 at this position
    uint8_t cls;
};

// Classes of the ASCII characters, which need no table lookup.
constexpr std::array<uint8_t, 128> kAsciiClass = [] {
    std::array<uint8_t, 128> t{};
    for (int c = 0; c < 128; ++c) {
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) t[c] = kLetter;
        if ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
            (c >= 0x7B && c <= 0x7E)) {
            t[c] = kPunct;
        }
        if (c >= '0' && c <= '9') t[c] = kNumber;
        if (c == ' ' || (c >= 0x09 && c <= 0x0D)) t[c] = kSpace;
    }
    return t;
}();

// Set by the first pre_tokenizer constructed with the fast path, before any matcher runs.
std::atomic<const unicode_classes*> g_classes{nullptr};

inline bool cont(unsigned char b) {
    return (b & 0xC0) == 0x80;
}

// The character at s[i]. Inline twin of byte_level::utf8_decode for the hot loop; the same
// well-formedness rules (no overlongs, surrogates or code points past U+10FFFF).
inline ch char_at(const unsigned char* s, size_t n, size_t i) {
    const unsigned char b0 = s[i];
    if (b0 < 0x80) return {b0, 1, kAsciiClass[b0]};
    const size_t left = n - i;
    uint32_t cp = 0, len = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF && left >= 2 && cont(s[i + 1])) {
        cp = (static_cast<uint32_t>(b0 & 0x1F) << 6) | (s[i + 1] & 0x3F);
        len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF && left >= 3 && cont(s[i + 1]) && cont(s[i + 2])) {
        cp = (static_cast<uint32_t>(b0 & 0x0F) << 12) |
             (static_cast<uint32_t>(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
        if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) len = 3;
    } else if (b0 >= 0xF0 && b0 <= 0xF4 && left >= 4 && cont(s[i + 1]) && cont(s[i + 2]) &&
               cont(s[i + 3])) {
        cp = (static_cast<uint32_t>(b0 & 0x07) << 18) |
             (static_cast<uint32_t>(s[i + 1] & 0x3F) << 12) |
             (static_cast<uint32_t>(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
        if (cp >= 0x10000 && cp <= 0x10FFFF) len = 4;
    }
    if (len == 0) return {0, 0, 0};
    return {cp, len, g_classes.load(std::memory_order_acquire)->of(cp)};
}

inline bool ascii_letter(unsigned char c) {
    return c < 0x80 && (kAsciiClass[c] & kLetter);
}
// The leading class of the third regex's first alternative: ASCII punctuation and symbols.
inline bool ascii_punct(uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}
inline bool newline(uint32_t c) {
    return c == '\r' || c == '\n';
}
inline bool cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF);
}

// Regex 1, \p{N}{1,3}.
fast match_numbers(const unsigned char* s, size_t n, size_t p, size_t* me) {
    ch c = char_at(s, n, p);
    if (c.len == 0) return fast::unsure;
    if (!(c.cls & kNumber)) {
        size_t i = p + c.len;
        while (i < n) {  // skip ahead to the next possible start
            if (s[i] < 0x80) {
                if (kAsciiClass[s[i]] & kNumber) break;
                ++i;
                continue;
            }
            c = char_at(s, n, i);
            if (c.len == 0 || (c.cls & kNumber)) break;
            i += c.len;
        }
        *me = i;
        return fast::none;
    }
    size_t e = p + c.len;
    for (int k = 1; k < 3 && e < n; ++k) {
        c = char_at(s, n, e);
        if (c.len == 0) return fast::unsure;
        if (!(c.cls & kNumber)) break;
        e += c.len;
    }
    *me = e;
    return fast::match;
}

// Regex 2, [\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+.
fast match_cjk(const unsigned char* s, size_t n, size_t p, size_t* me) {
    const bool in = [&] {
        ch c = char_at(s, n, p);
        return c.len != 0 && cjk(c.cp);
    }();
    size_t i = p;
    while (i < n) {
        if (s[i] < 0x80) {  // never CJK
            if (in) break;
            ++i;
            continue;
        }
        const ch c = char_at(s, n, i);
        if (c.len == 0) {
            if (i == p) return fast::unsure;
            break;
        }
        if (cjk(c.cp) != in) break;
        i += c.len;
    }
    *me = i;
    return in ? fast::match : fast::none;
}

// Run of characters having any of `cls` from s[i]; stops at ill-formed UTF-8 with `unsure`.
fast class_run(const unsigned char* s, size_t n, size_t i, uint8_t cls, size_t* me) {
    while (i < n) {
        const ch c = char_at(s, n, i);
        if (c.len == 0) return fast::unsure;
        if (!(c.cls & cls)) break;
        i += c.len;
    }
    *me = i;
    return fast::match;
}

// [\p{P}\p{S}]+[\r\n]* from s[i], the first character after the run's first one.
fast punct_run(const unsigned char* s, size_t n, size_t i, size_t* me) {
    if (class_run(s, n, i, kPunct, &i) == fast::unsure) return fast::unsure;
    while (i < n && newline(s[i])) ++i;
    *me = i;
    return fast::match;
}

// Regex 3 at s[p], alternatives in order:
//   A1 [punct][A-Za-z]+   A2 [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+   A3 ' '?[\p{P}\p{S}]+[\r\n]*
//   A4 \s*[\r\n]+        A5 \s+(?!\S)                               A6 \s+
fast match_words(const unsigned char* s, size_t n, size_t p, size_t* me) {
    const ch c = char_at(s, n, p);
    if (c.len == 0) return fast::unsure;
    const size_t next = p + c.len;
    if (ascii_punct(c.cp) && next < n && ascii_letter(s[next])) {  // A1: ASCII letters only
        size_t i = next;
        while (i < n && ascii_letter(s[i])) ++i;
        *me = i;
        return fast::match;
    }
    const ch d = next < n ? char_at(s, n, next) : ch{0, 0, 0};
    if (next < n && d.len == 0) return fast::unsure;
    // A2 with its optional first character (anything but \r, \n, letters, punctuation and
    // symbols), then without it.
    if (!(c.cls & (kLetter | kPunct)) && !newline(c.cp) && (d.cls & (kLetter | kMark))) {
        return class_run(s, n, next, kLetter | kMark, me);
    }
    if (c.cls & (kLetter | kMark)) return class_run(s, n, next, kLetter | kMark, me);
    if (c.cp == ' ' && (d.cls & kPunct)) return punct_run(s, n, next + d.len, me);  // A3
    if (c.cls & kPunct) return punct_run(s, n, next, me);                           // A3
    if (!(c.cls & kSpace)) {
        *me = next;  // starts no match: part of an unmatched stretch
        return fast::none;
    }
    size_t i = p, last = p, after_newline = 0, count = 0;
    while (i < n) {
        const ch w = char_at(s, n, i);
        if (w.len == 0) return fast::unsure;
        if (!(w.cls & kSpace)) break;
        if (newline(w.cp)) after_newline = i + w.len;
        last = i;
        i += w.len;
        ++count;
    }
    if (after_newline != 0) {
        *me = after_newline;  // A4: up to the last newline of the run
    } else if (i == n || count == 1) {
        *me = i;  // A5 at the end of the piece, or A6 for one character before a non-space
    } else {
        *me = last;  // A5: the last whitespace character goes with what follows
    }
    return fast::match;
}

using matcher = fast (*)(const unsigned char*, size_t, size_t, size_t*);
constexpr matcher kMatchers[3] = {match_numbers, match_cjk, match_words};

}  // namespace

// ---------------------------------------------------------------------------------------------
// pre_tokenizer
// ---------------------------------------------------------------------------------------------

struct pre_tokenizer::impl {
    std::array<code_ptr, 3> re;
    bool jit = true;
    bool fast_path = true;

    // Applies regex `level` to s[0..n): matches and the stretches between them go on to the
    // next level, in order; after the last level they are the pieces.
    void split(int level, const char* s, size_t n, pcre2_match_data* md, sink& out) const {
        if (level == 3) {
            out.piece(s, n);
            return;
        }
        const auto* u = reinterpret_cast<const unsigned char*>(s);
        size_t pos = 0;  // start of the unmatched stretch
        size_t at = 0;   // where the search for the next match resumes
        while (at < n) {
            size_t ms = at, me = 0;
            const fast f = fast_path ? kMatchers[level](u, n, at, &me) : fast::unsure;
            if (f == fast::none) {
                at = me;
                continue;
            }
            if (f == fast::unsure && !find_match(re[level].get(), jit, s, n, at, md, &ms, &me))
                break;
            MAGNETAR_ASSERT(me > ms, "no split pattern can match the empty string");
            if (ms > pos) split(level + 1, s + pos, ms - pos, md, out);
            split(level + 1, s + ms, me - ms, md, out);
            pos = at = me;
        }
        if (pos < n) split(level + 1, s + pos, n - pos, md, out);
    }
};

pre_tokenizer::pre_tokenizer(std::string_view name, bool fast_path)
    : name_(name), impl_(std::make_unique<impl>()) {
    if (name != "deepseek-v3" && name != "joyai-llm") {
        throw Error(
            strfmt("tokenizer: unsupported pre-tokenizer \"%.*s\" (expected \"deepseek-v3\" "
                   "or \"joyai-llm\")",
                   static_cast<int>(name.size()), name.data()));
    }
    impl_->fast_path = fast_path;
    for (size_t i = 0; i < kDeepSeekV3Patterns.size(); ++i) {
        impl_->re[i] = compile(kDeepSeekV3Patterns[i], &impl_->jit);
    }
    if (fast_path) g_classes.store(&unicode_classes::get(), std::memory_order_release);
}

pre_tokenizer::~pre_tokenizer() = default;
pre_tokenizer::pre_tokenizer(pre_tokenizer&&) noexcept = default;
pre_tokenizer& pre_tokenizer::operator=(pre_tokenizer&&) noexcept = default;

bool pre_tokenizer::jit() const {
    return impl_->jit;
}

void pre_tokenizer::split(std::string_view text, sink& out) const {
    if (text.empty()) return;
    match_data_ptr md(pcre2_match_data_create_from_pattern(impl_->re[2].get(), nullptr));
    if (!md) throw Error("pre-tokenizer: out of memory");
    impl_->split(0, text.data(), text.size(), md.get(), out);
}

}  // namespace magnetar
