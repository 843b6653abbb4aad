// Tokenizer unit tests: byte alphabet, UTF-8 streaming, pre-tokenizer splits, the fast merge
// loop against its reference twin, special tokens, decoding and loading from GGUF metadata.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_fixture.h"

namespace magnetar {
namespace {

using test::deepseek_tokenizer;
using test::deepseek_vocab;
using test::escape_bytes;

const std::string kBos = "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>";
const std::string kEos = "<\uFF5Cend\u2581of\u2581sentence\uFF5C>";
const std::string kUser = "<\uFF5CUser\uFF5C>";
const std::string kAssistant = "<\uFF5CAssistant\uFF5C>";
const std::string kDsml = "\uFF5CDSML\uFF5C";

// ---------------------------------------------------------------------------------------------
// Byte alphabet and UTF-8
// ---------------------------------------------------------------------------------------------

TEST(ByteLevel, TableMatchesSpec) {
    EXPECT_EQ(byte_level::byte_to_cp(' '), 0x120u);
    EXPECT_EQ(byte_level::byte_to_cp('\n'), 0x10Au);
    EXPECT_EQ(byte_level::byte_to_cp('\t'), 0x109u);
    EXPECT_EQ(byte_level::byte_to_cp(0x00), 0x100u);
    EXPECT_EQ(byte_level::byte_to_cp(0x7F), 0x121u);
    EXPECT_EQ(byte_level::byte_to_cp(0xAD), 0x143u);
    EXPECT_EQ(byte_level::byte_to_cp('A'), static_cast<uint32_t>('A'));
    EXPECT_EQ(byte_level::byte_to_cp(0xE9), 0xE9u);
    std::vector<bool> seen(0x200, false);
    for (int b = 0; b < 256; ++b) {
        const uint32_t cp = byte_level::byte_to_cp(static_cast<uint8_t>(b));
        ASSERT_LT(cp, 0x200u);
        EXPECT_FALSE(seen[cp]) << "code point used twice: " << cp;
        seen[cp] = true;
    }
    EXPECT_EQ(byte_level::encode(" hello"), "\xC4\xA0hello");  // "Ġhello"
}

TEST(ByteLevel, DecodeInvertsEncode) {
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    std::string back;
    ASSERT_TRUE(byte_level::decode(byte_level::encode(all), back));
    EXPECT_EQ(back, all);
    std::string out = "keep";
    EXPECT_FALSE(byte_level::decode(kUser, out));  // U+FF5C is outside the alphabet
    EXPECT_EQ(out, "keep");
    EXPECT_FALSE(byte_level::decode("\xC4", out));  // truncated
}

TEST(ByteLevel, Utf8Validation) {
    EXPECT_TRUE(byte_level::is_valid_utf8("plain \xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80"));
    for (const char* bad : {"\xC0\x80", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF5",
                            "\x80", "\xC3", "\xE4\xB8", "\xFF"}) {
        EXPECT_FALSE(byte_level::is_valid_utf8(bad)) << escape_bytes(bad);
    }
}

TEST(Utf8Stream, HoldsBackPartialCharacters) {
    byte_level::utf8_stream s;
    const std::string smile = "\xF0\x9F\x98\x80";
    EXPECT_EQ(s.push("a" + smile.substr(0, 1)), "a");
    EXPECT_EQ(s.push(smile.substr(1, 2)), "");
    EXPECT_TRUE(s.has_pending());
    EXPECT_EQ(s.push(smile.substr(3) + "b"), smile + "b");
    EXPECT_FALSE(s.has_pending());
    EXPECT_EQ(s.push("\xE4\xB8"), "");
    EXPECT_EQ(s.flush(), "\xE4\xB8");  // raw mode passes an unfinished tail through at the end
}

TEST(Utf8Stream, InvalidBytesAreNotHeldBack) {
    byte_level::utf8_stream raw;
    EXPECT_EQ(raw.push("x\xFF"), "x\xFF");
    EXPECT_EQ(raw.push("\xE4\x41"), "\xE4\x41");  // a lead byte followed by a non-continuation
    byte_level::utf8_stream rep(true);
    EXPECT_EQ(rep.push("x\xFF"), "x\xEF\xBF\xBD");
    EXPECT_EQ(rep.push("\xE0\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(rep.push("\xE4\xB8"), "");
    EXPECT_EQ(rep.flush(), "\xEF\xBF\xBD");  // one replacement for the maximal subpart
}

TEST(Utf8Stream, RandomChunkingPreservesBytes) {
    std::mt19937 rng(7);
    for (int round = 0; round < 200; ++round) {
        std::string input;
        const int n = static_cast<int>(rng() % 64);
        for (int i = 0; i < n; ++i) {
            // Mostly well-formed text with some stray bytes.
            const char* bits[] = {"a",    "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xFF",
                                  "\x80", " "};
            input += bits[rng() % 7];
        }
        byte_level::utf8_stream raw, rep(true);
        std::string out_raw, out_rep;
        size_t pos = 0;
        while (pos < input.size()) {
            const size_t len = std::min<size_t>(input.size() - pos, 1 + rng() % 5);
            const std::string chunk = input.substr(pos, len);
            const std::string r = raw.push(chunk);
            out_raw += r;
            out_rep += rep.push(chunk);
            pos += len;
        }
        out_raw += raw.flush();
        out_rep += rep.flush();
        EXPECT_EQ(out_raw, input);
        EXPECT_TRUE(byte_level::is_valid_utf8(out_rep)) << escape_bytes(out_rep);
    }
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizer
// ---------------------------------------------------------------------------------------------

// Pieces of `text`, by default from the direct matcher, else from PCRE2 alone.
std::vector<std::string> split(std::string_view text, bool fast_path = true) {
    struct collect final : pre_tokenizer::sink {
        std::vector<std::string> pieces;
        void piece(const char* s, size_t n) override { pieces.emplace_back(s, n); }
    } c;
    static const pre_tokenizer fast("deepseek-v3", true);
    static const pre_tokenizer pcre2_only("deepseek-v3", false);
    (fast_path ? fast : pcre2_only).split(text, c);
    return c.pieces;
}

using pieces = std::vector<std::string>;

// Expected pieces come from the reference's pre-tokenizer (the official regexes with
// ECMAScript semantics). The spec's ds4-scanner examples agree except where noted.
TEST(PreTokenizer, OfficialSplits) {
    EXPECT_EQ(split("Hello world"), (pieces{"Hello", " world"}));
    EXPECT_EQ(split("    int x = 10;\n"), (pieces{"   ", " int", " x", " =", " ", "10", ";\n"}));
    EXPECT_EQ(split("foo(bar);\n\n  baz"), (pieces{"foo", "(bar", ");\n\n", " ", " baz"}));
    EXPECT_EQ(split("12345 abc"), (pieces{"123", "45", " abc"}));
    EXPECT_EQ(split("  \n\n  x"), (pieces{"  \n\n", " ", " x"}));
    EXPECT_EQ(split(">;\n}"), (pieces{">;\n", "}"}));
    EXPECT_EQ(split("x  \t y"), (pieces{"x", "  \t", " y"}));
    EXPECT_EQ(split("it's"), (pieces{"it", "'s"}));
    EXPECT_EQ(split("don't STOP"), (pieces{"don", "'t", " STOP"}));
    EXPECT_EQ(split("caf\xC3\xA9 \xE2\x80\x94 ok"),
              (pieces{"caf\xC3\xA9", " \xE2\x80\x94", " ok"}));
    // ds4 differs on the next two: Latin glued to CJK, and non-ASCII punctuation as a letter.
    EXPECT_EQ(split("abc\xE4\xB8\x80\xE4\xBA\x8C def"),
              (pieces{"abc", "\xE4\xB8\x80\xE4\xBA\x8C", " def"}));
    EXPECT_EQ(split("\xE2\x80\x94word"), (pieces{"\xE2\x80\x94", "word"}));
    EXPECT_EQ(split("  \r\n\t end"), (pieces{"  \r\n", "\t", " end"}));
    EXPECT_EQ(split("$x.y"), (pieces{"$x", ".y"}));
    EXPECT_EQ(split("a  "), (pieces{"a", "  "}));
}

TEST(PreTokenizer, UnicodeClassesFollowTheReference) {
    const std::string nbsp = "\u00A0", nel = "\u0085", ideographic_space = "\u3000";
    const std::string bom = "\uFEFF", zwsp = "\u200B", acute = "\u0301";
    // Non-ASCII digits are \p{N}: three per piece.
    EXPECT_EQ(split("\u0663\u0664\u0665\u0666ab"), (pieces{"\u0663\u0664\u0665", "\u0666", "ab"}));
    // Half-width katakana are outside the CJK/kana split class.
    EXPECT_EQ(split("\uFF76\uFF80\u6F22\u5B57\u304B"),
              (pieces{"\uFF76\uFF80", "\u6F22\u5B57\u304B"}));
    // ECMAScript whitespace: NBSP, U+3000 and U+FEFF are \s; U+0085 and U+200B are not.
    EXPECT_EQ(split("a" + nbsp + nbsp + "b"), (pieces{"a", nbsp, nbsp + "b"}));
    EXPECT_EQ(split("x" + bom + " y"), (pieces{"x", bom, " y"}));
    EXPECT_EQ(split(nbsp + nel + "x"), (pieces{nbsp, nel + "x"}));
    EXPECT_EQ(split("a" + zwsp + "b"), (pieces{"a", zwsp + "b"}));
    EXPECT_EQ(split(ideographic_space + ideographic_space + "x"),
              (pieces{ideographic_space, ideographic_space + "x"}));
    // Combining marks join letters, and a leading non-letter.
    EXPECT_EQ(split("1" + acute + "a"), (pieces{"1", acute + "a"}));
    EXPECT_EQ(split("e" + acute + acute + " " + acute), (pieces{"e" + acute + acute, " " + acute}));
}

// The direct matcher against PCRE2 on random mixtures of the characters where the regexes'
// alternatives meet: ASCII classes, Unicode whitespace (ECMAScript's and others), marks, CJK
// and kana edges, non-ASCII digits, punctuation and symbols, emoji, and ill-formed bytes.
TEST(PreTokenizer, DirectMatcherAgreesWithPcre2) {
    const std::vector<std::string> atoms = {
        "a",
        "Z",
        "q",
        "'",
        "\"",
        "-",
        "!",
        "$",
        "<",
        "_",
        "`",
        "~",
        "0",
        "7",
        " ",
        "  ",
        "\t",
        "\n",
        "\r",
        "\r\n",
        "\x0B",
        "\x0C",
        std::string(1, '\0'),
        "\x01",
        "\x7F",
        "\xC2\xA0",          // U+00A0
        "\xC2\x85",          // U+0085 (not ECMAScript whitespace)
        "\xE3\x80\x80",      // U+3000
        "\xE2\x80\xA8",      // U+2028
        "\xEF\xBB\xBF",      // U+FEFF
        "\xE2\x80\x8B",      // U+200B
        "\xE2\x80\x83",      // U+2003
        "\xCC\x81",          // U+0301 combining acute
        "\xE0\xA4\x95",      // Devanagari KA
        "\xE0\xA5\x8D",      // Devanagari virama (Mn)
        "\xC3\xA9",          // é
        "\xD0\x96",          // Ж
        "\xE4\xB8\x80",      // U+4E00, first of the CJK range
        "\xE9\xBE\xA5",      // U+9FA5, last of it
        "\xE9\xBE\xA6",      // U+9FA6, just outside
        "\xE3\x81\x80",      // U+3040
        "\xE3\x83\xBF",      // U+30FF
        "\xEF\xBD\xB6",      // half-width katakana
        "\xD9\xA3",          // Arabic-Indic digit
        "\xEF\xBC\x91",      // full-width digit
        "\xC2\xBD",          // ½ (No)
        "\xE2\x85\xA0",      // Ⅰ (Nl)
        "\xE2\x80\x94",      // em dash (Pd)
        "\xE2\x80\x9C",      // left double quote (Pi)
        "\xE2\x82\xAC",      // € (Sc)
        "\xCB\x86",          // modifier letter (Lm)
        "\xF0\x9F\x98\x80",  // emoji (So)
        "\xF0\x9F\x8F\xBD",  // skin tone modifier (Sk)
        "\xE2\x80\x8D",      // ZWJ (Cf)
        "\xEE\x80\x80",      // private use
        "\xF0\xA0\x80\x80",  // CJK extension B (letter outside the split range)
        "\xFF",
        "\x80",
        "\xC3",
        "\xE4\xB8",
        "\xED\xA0\x80",
        "\xC0\x80",
    };
    std::mt19937 rng(99);
    for (int round = 0; round < 30000; ++round) {
        std::string text;
        const int n = static_cast<int>(rng() % 12);
        for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
        ASSERT_EQ(split(text, true), split(text, false)) << "text: " << escape_bytes(text);
    }
}

TEST(PreTokenizer, PiecesCoverInvalidUtf8) {
    const std::string text = "ab\xFF\xFE  cd\xE4\xB8 12\xC0\x80\n\x80x";
    std::string joined;
    for (const auto& p : split(text)) {
        EXPECT_FALSE(p.empty());
        joined += p;
    }
    EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, LongRunsDoNotOverflow) {
    for (const std::string& run : {std::string(1 << 20, 'a'), std::string(1 << 20, ' '),
                                   std::string(1 << 18, '!'), std::string(1 << 19, '\n')}) {
        size_t total = 0;
        for (const auto& p : split(run + "x")) total += p.size();
        EXPECT_EQ(total, run.size() + 1);
    }
}

TEST(PreTokenizer, RejectsOtherNames) {
    EXPECT_NO_THROW(pre_tokenizer("joyai-llm"));
    try {
        pre_tokenizer p("qwen2");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("qwen2"), std::string::npos) << e.what();
    }
}

// ---------------------------------------------------------------------------------------------
// BPE: the heap merge loop against the spec's quadratic loop
// ---------------------------------------------------------------------------------------------

TEST(Bpe, DeepSeekMergeTableIsConsistent) {
    const auto& tok = deepseek_tokenizer();
    EXPECT_EQ(tok.merges().n_merges(), deepseek_vocab().merges.size());
    EXPECT_EQ(tok.merges().n_synthetic(), 0u) << "merge strings outside the vocabulary";
}

TEST(Bpe, FastMatchesReference) {
    const auto& tok = deepseek_tokenizer();
    const bpe_reference ref(tok.bpe_vocab(), deepseek_vocab().merges);
    std::mt19937 rng(1234);
    std::vector<std::string> inputs = {"hello",
                                       " world",
                                       "aaaaaaaaaaaaaaaaaaaa",
                                       "ababababab",
                                       "\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97",
                                       "    ",
                                       "\n\n\n\n",
                                       std::string(300, '='),
                                       "internationalization"};
    const char* alphabet = "abcdefghijklmnopqrstuvwxyz     etaoin\n";
    for (int i = 0; i < 400; ++i) {
        std::string s;
        const int n = 1 + static_cast<int>(rng() % 40);
        for (int k = 0; k < n; ++k) {
            s.push_back(i % 3 == 0 ? static_cast<char>(rng() & 0xFF) : alphabet[rng() % 38]);
        }
        inputs.push_back(s);
    }
    bpe_merges::scratch scratch;
    for (const auto& in : inputs) {
        std::vector<int32_t> fast;
        tok.merges().encode_piece(in, scratch, fast);
        EXPECT_EQ(fast, ref.encode_piece(in)) << "piece: " << escape_bytes(in);
    }
}

// A toy vocabulary exercising ties, duplicates and merges whose result is not a token.
TEST(Bpe, ToyTableEdgeCases) {
    token_map vocab;
    int32_t next_id = 0;
    for (int b = 0; b < 256; ++b)
        vocab.emplace(std::string(byte_level::byte_to_utf8(static_cast<uint8_t>(b))), next_id++);
    vocab.emplace("ab", next_id++);
    vocab.emplace("abab", next_id++);
    vocab.emplace("bc", next_id++);
    // "a b" repeated: the later rank (3) wins, so "b c" (rank 2) goes first in "abc".
    // "x y" makes "xy", which is not in the vocabulary: emitted as its bytes.
    const std::vector<std::string> merges = {"a b", "ab ab", "b c", "a b", "x y"};
    const bpe_merges fast(vocab, next_id, merges);
    const bpe_reference ref(vocab, merges);
    EXPECT_EQ(fast.n_synthetic(), 1u);
    bpe_merges::scratch scratch;
    for (const std::string in : {"abc", "abab", "aaa", "xyz", "ababab", "abcabc", "xy", "a"}) {
        std::vector<int32_t> out;
        fast.encode_piece(in, scratch, out);
        EXPECT_EQ(out, ref.encode_piece(in)) << in;
    }
    std::vector<int32_t> out;
    fast.encode_piece("abc", scratch, out);
    EXPECT_EQ(out, (std::vector<int32_t>{vocab.at("a"), vocab.at("bc")}));
    out.clear();
    fast.encode_piece("xy", scratch, out);
    EXPECT_EQ(out, (std::vector<int32_t>{vocab.at("x"), vocab.at("y")}));
    EXPECT_THROW(bpe_merges(vocab, next_id, {"nospace"}), Error);
}

// ---------------------------------------------------------------------------------------------
// Specials and entry points
// ---------------------------------------------------------------------------------------------

TEST(Tokenizer, RequiredSpecialIds) {
    const auto& s = deepseek_tokenizer().specials();
    EXPECT_EQ(s.bos, 0);
    EXPECT_EQ(s.eos, 1);
    EXPECT_EQ(s.user, 128803);
    EXPECT_EQ(s.assistant, 128804);
    EXPECT_EQ(s.think, 128821);
    EXPECT_EQ(s.think_end, 128822);
    EXPECT_EQ(s.dsml, 128825);
    EXPECT_EQ(deepseek_tokenizer().n_vocab(), 129280);
}

TEST(Tokenizer, MissingSpecialIsNamed) {
    auto v = deepseek_vocab();
    v.tokens[128822] = "<unused-close-think>";
    try {
        tokenizer t(v.tokens, v.types, v.merges);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("</think>"), std::string::npos) << e.what();
    }
    EXPECT_THROW(tokenizer(v.tokens, std::vector<int32_t>(3, 1), v.merges), Error);
}

TEST(Tokenizer, AdaLovelacePromptIs21Tokens) {
    // spec protocol.md §1.9: the official API reports 21 prompt tokens, 17 for the user text.
    const std::string user = "Rispondi in italiano con una frase: chi era Ada Lovelace?";
    const auto& tok = deepseek_tokenizer();
    const auto ids = tok.encode_chat(kBos + kUser + user + kAssistant + "</think>");
    EXPECT_EQ(ids.size(), 21u);
    EXPECT_EQ(tok.encode(user).size(), 17u);
    EXPECT_EQ(ids.front(), tok.specials().bos);
    EXPECT_EQ(ids.back(), tok.specials().think_end);
}

TEST(Tokenizer, PlainTextNeverYieldsSpecials) {
    const auto& tok = deepseek_tokenizer();
    std::string all;
    size_t n_literals = 0;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        if (!tok.is_special(id)) continue;
        all += tok.token_text(id) + (id % 3 == 0 ? " " : "");
        ++n_literals;
    }
    EXPECT_GT(n_literals, 800u);
    const auto plain = tok.encode(all);
    for (int32_t id : plain) ASSERT_FALSE(tok.is_special(id)) << "special id " << id;
    EXPECT_EQ(tok.decode(plain), all);
    const auto chat = tok.encode_chat(all);
    size_t n_special = 0;
    for (int32_t id : chat) n_special += tok.is_special(id) ? 1 : 0;
    EXPECT_EQ(n_special, n_literals);
    EXPECT_EQ(tok.decode(chat), all);
}

TEST(Tokenizer, ChatEntryMatchesLongestLiteral) {
    const auto& tok = deepseek_tokenizer();
    const auto ids = tok.encode_chat("<" + kDsml + "tool_calls>\n</" + kDsml + "parameter>");
    ASSERT_GE(ids.size(), 4u);
    EXPECT_EQ(tok.token_text(ids[0]), "<");
    EXPECT_EQ(ids[1], tok.specials().dsml);
    const auto tail = tok.encode_chat("</" + kDsml + "x");
    EXPECT_EQ(tok.token_text(tail[0]), "</");
    EXPECT_EQ(tail[1], tok.specials().dsml);
    // "<｜tool▁calls▁begin｜>" must not stop at a shorter literal.
    const std::string calls = "<\uFF5Ctool\u2581calls\u2581begin\uFF5C>";
    EXPECT_EQ(tok.encode_chat(calls), (std::vector<int32_t>{tok.find_token(calls)}));
}

TEST(Tokenizer, EmbeddedNulIsText) {
    const auto& tok = deepseek_tokenizer();
    const std::string text("a\0b\0\0c", 6);
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
    EXPECT_EQ(tok.decode(tok.encode_chat(text)), text);
}

TEST(Tokenizer, DecodeRules) {
    const auto& tok = deepseek_tokenizer();
    EXPECT_EQ(tok.token_bytes(tok.specials().user), kUser);
    EXPECT_EQ(tok.token_bytes(tok.specials().think), "<think>");
    EXPECT_EQ(tok.token_bytes(tok.find_token("\xC4\xA0"
                                             "world")),
              " world");
    EXPECT_THROW(tok.token_bytes(-1), Error);
    EXPECT_THROW(tok.token_bytes(tok.n_vocab()), Error);
    const std::vector<int32_t> bad = {0, 200000};
    EXPECT_THROW(tok.decode(bad), Error);
    // A four-byte character split over tokens decodes to partial UTF-8 per token.
    const auto ids = tok.encode("\xF0\x9F\xAB\x80");
    std::string joined;
    for (int32_t id : ids) joined += tok.token_bytes(id);
    EXPECT_EQ(joined, "\xF0\x9F\xAB\x80");
}

TEST(Tokenizer, ThreadSafeEncoding) {
    const auto& tok = deepseek_tokenizer();
    std::string text;
    for (int i = 0; i < 200; ++i)
        text += "Thread " + std::to_string(i) + " says hello, \xE4\xB8\x96\xE7\x95\x8C! ";
    const auto expected = tok.encode(text);
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back(
            [&, t] { ok[t] = tok.encode(text) == expected && tok.encode_chat(text) == expected; });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]);
}

// ---------------------------------------------------------------------------------------------
// Loading from GGUF metadata
// ---------------------------------------------------------------------------------------------

// Minimal GGUF v3 image with metadata only (no tensors), built by hand so that this test does
// not depend on the writer.
class gguf_image {
  public:
    void str(const std::string& key, const std::string& v) {
        header_kv(key, gguf::value_type::string);
        put_string(v);
    }
    void str_array(const std::string& key, const std::vector<std::string>& v) {
        header_kv(key, gguf::value_type::array);
        put_u32(static_cast<uint32_t>(gguf::value_type::string));
        put_u64(v.size());
        for (const auto& s : v) put_string(s);
    }
    void i32_array(const std::string& key, const std::vector<int32_t>& v) {
        header_kv(key, gguf::value_type::array);
        put_u32(static_cast<uint32_t>(gguf::value_type::i32));
        put_u64(v.size());
        for (int32_t x : v) put_u32(static_cast<uint32_t>(x));
    }
    std::vector<uint8_t> bytes() const {
        std::vector<uint8_t> out;
        auto raw = [&](const void* p, size_t n) {
            out.insert(out.end(), static_cast<const uint8_t*>(p),
                       static_cast<const uint8_t*>(p) + n);
        };
        const uint32_t magic = gguf::kMagic, version = 3;
        const uint64_t n_tensors = 0;
        raw(&magic, 4);
        raw(&version, 4);
        raw(&n_tensors, 8);
        raw(&n_kv_, 8);
        out.insert(out.end(), body_.begin(), body_.end());
        return out;
    }

  private:
    void header_kv(const std::string& key, gguf::value_type t) {
        ++n_kv_;
        put_string(key);
        put_u32(static_cast<uint32_t>(t));
    }
    void put_u32(uint32_t v) {
        body_.insert(body_.end(), reinterpret_cast<uint8_t*>(&v),
                     reinterpret_cast<uint8_t*>(&v) + 4);
    }
    void put_u64(uint64_t v) {
        body_.insert(body_.end(), reinterpret_cast<uint8_t*>(&v),
                     reinterpret_cast<uint8_t*>(&v) + 8);
    }
    void put_string(const std::string& s) {
        put_u64(s.size());
        body_.insert(body_.end(), s.begin(), s.end());
    }
    uint64_t n_kv_ = 0;
    std::vector<uint8_t> body_;
};

gguf_image vocab_image(const std::string& model, const std::string& pre, bool with_types = true) {
    const auto& v = deepseek_vocab();
    gguf_image img;
    img.str("tokenizer.ggml.model", model);
    if (!pre.empty()) img.str("tokenizer.ggml.pre", pre);
    img.str_array("tokenizer.ggml.tokens", v.tokens);
    if (with_types) img.i32_array("tokenizer.ggml.token_type", v.types);
    img.str_array("tokenizer.ggml.merges", v.merges);
    return img;
}

std::string load_error(const gguf_image& img) {
    const auto bytes = img.bytes();
    try {
        auto r = gguf::reader::open_memory(bytes.data(), bytes.size(), "vocab.gguf");
        tokenizer::from_gguf(*r);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(TokenizerGguf, LoadsTheSameTokenizer) {
    for (const char* pre : {"deepseek-v3", "joyai-llm"}) {
        const auto bytes = vocab_image("gpt2", pre).bytes();
        auto r = gguf::reader::open_memory(bytes.data(), bytes.size(), "vocab.gguf");
        const auto tok = tokenizer::from_gguf(*r);
        EXPECT_EQ(tok->pre_name(), pre);
        EXPECT_EQ(tok->n_vocab(), 129280);
        const std::string text =
            "Hello <think>world</think> 12345 \xE4\xB8\xAD\xE6\x96\x87" + kUser;
        EXPECT_EQ(tok->encode(text), deepseek_tokenizer().encode(text));
        EXPECT_EQ(tok->encode_chat(text), deepseek_tokenizer().encode_chat(text));
    }
}

TEST(TokenizerGguf, ErrorsNameTheProblem) {
    auto has = [](const std::string& msg, const char* what) {
        return msg.find(what) != std::string::npos;
    };
    std::string e = load_error(vocab_image("llama", "deepseek-v3"));
    EXPECT_TRUE(has(e, "tokenizer.ggml.model") && has(e, "llama")) << e;
    e = load_error(vocab_image("gpt2", "qwen2"));
    EXPECT_TRUE(has(e, "tokenizer.ggml.pre") && has(e, "qwen2")) << e;
    e = load_error(vocab_image("gpt2", ""));
    EXPECT_TRUE(has(e, "missing") && has(e, "tokenizer.ggml.pre")) << e;

    gguf_image no_merges;
    no_merges.str("tokenizer.ggml.model", "gpt2");
    no_merges.str("tokenizer.ggml.pre", "deepseek-v3");
    no_merges.str_array("tokenizer.ggml.tokens", deepseek_vocab().tokens);
    e = load_error(no_merges);
    EXPECT_TRUE(has(e, "tokenizer.ggml.merges")) << e;

    gguf_image short_types = vocab_image("gpt2", "deepseek-v3", false);
    short_types.i32_array("tokenizer.ggml.token_type", {1, 1, 1});
    e = load_error(short_types);
    EXPECT_TRUE(has(e, "tokenizer.ggml.token_type")) << e;

    auto v = deepseek_vocab();
    v.tokens[128825] = "DSML";
    gguf_image no_dsml;
    no_dsml.str("tokenizer.ggml.model", "gpt2");
    no_dsml.str("tokenizer.ggml.pre", "joyai-llm");
    no_dsml.str_array("tokenizer.ggml.tokens", v.tokens);
    no_dsml.str_array("tokenizer.ggml.merges", v.merges);
    e = load_error(no_dsml);
    EXPECT_TRUE(has(e, kDsml.c_str()) && has(e, "vocab.gguf")) << e;
}

}  // namespace
}  // namespace magnetar
