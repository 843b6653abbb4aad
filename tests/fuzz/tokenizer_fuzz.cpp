// libFuzzer target: the tokenizer on arbitrary bytes, with the DeepSeek vocabulary from the
// reference package's tokenizer.json (found as the tests find it; $MAGNETAR_TOKENIZER_JSON
// overrides).
//
// Checks on every input, each a contract of src/tokenizer:
//   - decode(encode(x)) == x for both entry points, ill-formed UTF-8 included;
//   - the plain-text entry point never yields a special token;
//   - the pre-tokenizer's direct matcher splits exactly as PCRE2 alone does;
//   - the fast merge loop equals the reference loop on every piece;
//   - utf8_stream, fed token by token, reassembles the decoded bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gen-model/vocab.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace magnetar;

const tokenizer* g_tok = nullptr;
const pre_tokenizer* g_pcre2 = nullptr;
const bpe_reference* g_ref = nullptr;

[[noreturn]] void fail(const char* what, std::string_view input) {
    std::fprintf(stderr, "tokenizer_fuzz: %s (input of %zu bytes)\n", what, input.size());
    std::abort();
}

struct collect final : pre_tokenizer::sink {
    std::vector<std::string_view> pieces;
    void piece(const char* s, size_t n) override { pieces.emplace_back(s, n); }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const std::string path = genmodel::find_tokenizer_json();
    if (path.empty()) {
        std::fprintf(stderr,
                     "tokenizer_fuzz: tokenizer.json not found; run scripts/setup.sh or set "
                     "MAGNETAR_TOKENIZER_JSON\n");
        std::abort();
    }
    static const genmodel::vocab v = genmodel::load_deepseek_vocab(path);
    static const tokenizer tok(v.tokens, v.types, v.merges, "deepseek-v3");
    static const pre_tokenizer pcre2_only("deepseek-v3", false);
    static const bpe_reference ref(tok.bpe_vocab(), v.merges);
    g_tok = &tok;
    g_pcre2 = &pcre2_only;
    g_ref = &ref;
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const tokenizer& tok = *g_tok;

    const std::vector<int32_t> plain = tok.encode(text);
    if (tok.decode(plain) != text) fail("plain: decode(encode(x)) != x", text);
    for (int32_t id : plain) {
        if (tok.is_special(id)) fail("plain text produced a special token", text);
    }
    if (tok.decode(tok.encode_chat(text)) != text) fail("chat: decode(encode(x)) != x", text);

    collect fast, slow;
    tok.pre().split(text, fast);
    g_pcre2->split(text, slow);
    if (fast.pieces != slow.pieces) fail("direct matcher and PCRE2 split differently", text);

    bpe_merges::scratch scratch;
    for (std::string_view piece : fast.pieces) {
        if (piece.size() > 24) continue;  // the reference loop is quadratic and slow unoptimized
        std::vector<int32_t> ids;
        tok.merges().encode_piece(piece, scratch, ids);
        if (ids != g_ref->encode_piece(piece))
            fail("fast merge loop differs from the reference", text);
    }

    byte_level::utf8_stream stream;
    std::string streamed;
    for (int32_t id : plain) streamed += stream.push(tok.token_bytes(id));
    streamed += stream.flush();
    if (streamed != text) fail("utf8_stream lost or changed bytes", text);
    return 0;
}
