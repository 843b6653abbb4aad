// libFuzzer target: the chat renderer and the server's prompt builder on arbitrary
// conversations, with the DeepSeek vocabulary from the reference package's tokenizer.json
// (found as the tests find it; $MAGNETAR_TOKENIZER_JSON overrides).
//
// The input is cut into a conversation (roles, contents, reasoning, tool calls with names and
// argument texts, tool results, tool schemas and a response format given as JSON texts). The
// contracts checked on every input:
//   - rendering and tokenization never crash, and throw only magnetar::Error (schemas nested
//     too deeply);
//   - the tokens decode to the rendered text byte for byte;
//   - client text never adds, removes or moves a control token: the control tokens of the
//     prompt are exactly those of the same conversation with every special literal in client
//     strings replaced by a byte that is in no literal (the template's own);
//   - the prompt's own tokens are accepted as a cached prefix of it, at every length, and the
//     neutralised conversation's tokens are refused unless they are equal.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "gen-model/vocab.h"
#include "server/prompt.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace magnetar;
using json = nlohmann::ordered_json;

const tokenizer* g_tok = nullptr;
const special_literals* g_lits = nullptr;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "render_fuzz: %s\n", what);
    std::abort();
}

// Every special literal of `s` replaced by one \x01 byte (in no literal, so no new one forms).
std::string neutral(const std::string& s) {
    std::string out;
    size_t pos = 0;
    for (const trusted_special& sp : g_lits->find(s)) {
        out.append(s, pos, sp.offset - pos);
        out += '\x01';
        pos = sp.offset + sp.len;
    }
    out.append(s, pos);
    return out;
}

json neutral_json(const json& v) {
    if (v.is_string()) return neutral(v.get<std::string>());
    if (v.is_array()) {
        json out = json::array();
        for (const auto& e : v) out.push_back(neutral_json(e));
        return out;
    }
    if (v.is_object()) {
        json out = json::object();
        for (const auto& [k, e] : v.items()) out[neutral(k)] = neutral_json(e);
        return out;
    }
    return v;
}

// A JSON value from fuzzed text, or a string when it does not parse (the server parses
// request bodies, so only valid JSON reaches the renderer).
json json_from(const std::string& text) {
    json v = json::parse(text, nullptr, false);
    if (v.is_discarded()) return json(std::string("x"));
    return v;
}

struct conversation {
    std::vector<chat::message> messages;
    chat::tool_list tools;
    chat::render_options options;
};

conversation read(FuzzedDataProvider& in) {
    conversation c;
    const chat::role roles[] = {chat::role::system, chat::role::developer,
                                chat::role::user,   chat::role::assistant,
                                chat::role::tool,   chat::role::latest_reminder};
    const int n = in.ConsumeIntegralInRange(0, 6);
    for (int i = 0; i < n; ++i) {
        chat::message m;
        m.role = roles[in.ConsumeIntegralInRange(0, 5)];
        m.content = in.ConsumeRandomLengthString(256);
        if (m.role == chat::role::assistant) {
            m.reasoning_content = in.ConsumeRandomLengthString(64);
            const int calls = in.ConsumeIntegralInRange(0, 2);
            for (int k = 0; k < calls; ++k) {
                chat::tool_call tc;
                tc.id = in.ConsumeRandomLengthString(16);
                tc.name = in.ConsumeRandomLengthString(32);
                tc.arguments = in.ConsumeRandomLengthString(128);
                m.tool_calls.push_back(std::move(tc));
            }
        }
        if (m.role == chat::role::tool) m.tool_call_id = in.ConsumeRandomLengthString(16);
        c.messages.push_back(std::move(m));
    }
    const int n_tools = in.ConsumeIntegralInRange(0, 2);
    for (int i = 0; i < n_tools; ++i)
        c.tools.push_back(json_from(in.ConsumeRandomLengthString(128)));
    if (in.ConsumeBool()) c.options.response_format = json_from(in.ConsumeRandomLengthString(64));
    c.options.mode = static_cast<chat::think_mode>(in.ConsumeIntegralInRange(0, 2));
    c.options.n_ctx = in.ConsumeBool() ? 1u << 20 : 4096;
    c.options.add_generation_prompt = in.ConsumeBool();
    return c;
}

conversation neutralised(const conversation& c) {
    conversation out = c;
    for (chat::message& m : out.messages) {
        m.content = neutral(m.content);
        m.reasoning_content = neutral(m.reasoning_content);
        m.tool_call_id = neutral(m.tool_call_id);
        for (chat::tool_call& tc : m.tool_calls) {
            tc.id = neutral(tc.id);
            tc.name = neutral(tc.name);
            // Literals inside JSON strings, and in text that is not JSON at all.
            json v = json::parse(tc.arguments, nullptr, false);
            tc.arguments = v.is_discarded() ? neutral(tc.arguments) : neutral_json(v).dump();
        }
    }
    for (json& t : out.tools) t = neutral_json(t);
    if (out.options.response_format)
        *out.options.response_format = neutral_json(*out.options.response_format);
    return out;
}

std::vector<int32_t> controls(const std::vector<int32_t>& ids) {
    std::vector<int32_t> out;
    for (int32_t id : ids)
        if (g_tok->is_special(id)) out.push_back(id);
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const std::string path = genmodel::find_tokenizer_json();
    if (path.empty()) {
        std::fprintf(stderr,
                     "render_fuzz: tokenizer.json not found; run scripts/setup.sh or set "
                     "MAGNETAR_TOKENIZER_JSON\n");
        std::abort();
    }
    static const genmodel::vocab v = genmodel::load_deepseek_vocab(path);
    static const tokenizer tok(v.tokens, v.types, v.merges, "deepseek-v3");
    static const special_literals lits(tok);
    g_tok = &tok;
    g_lits = &lits;
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    const conversation c = read(in);
    server::prompt p, q;
    try {
        p = server::build_chat_prompt(*g_tok, *g_lits, c.messages, c.tools, c.options);
    } catch (const Error&) {
        return 0;  // schemas too deep to serialise: refused with a message
    }
    if (g_tok->decode(p.tokens) != p.text) fail("tokens do not decode to the rendered text");

    const conversation n = neutralised(c);
    try {
        q = server::build_chat_prompt(*g_tok, *g_lits, n.messages, n.tools, n.options);
    } catch (const Error&) {
        return 0;
    }
    if (controls(p.tokens) != controls(q.tokens)) fail("client text changed the control tokens");

    size_t cut = 0;
    if (!server::cached_prefix_matches(*g_tok, p.tokens, p, &cut) || cut != p.text.size())
        fail("a prompt's own tokens are not a cached prefix of it");
    const size_t half = p.tokens.size() / 2;
    if (!server::cached_prefix_matches(*g_tok, std::span(p.tokens).first(half), p, &cut))
        fail("a prefix of a prompt's own tokens is not a cached prefix of it");
    if (q.text == p.text && q.tokens != p.tokens &&
        server::cached_prefix_matches(*g_tok, q.tokens, p, &cut))
        fail("tokens with other control tokens were accepted for the same bytes");

    // The completions template: the whole prompt is client text.
    const std::string user = c.messages.empty() ? std::string() : c.messages[0].content;
    const server::prompt a =
        server::build_completion_prompt(*g_tok, *g_lits, user, c.options.mode, c.options.n_ctx);
    const server::prompt b = server::build_completion_prompt(*g_tok, *g_lits, neutral(user),
                                                             c.options.mode, c.options.n_ctx);
    if (g_tok->decode(a.tokens) != a.text) fail("completion tokens do not decode to the text");
    if (controls(a.tokens) != controls(b.tokens)) fail("completion text changed control tokens");
    return 0;
}
