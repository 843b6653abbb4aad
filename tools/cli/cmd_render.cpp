// `magnetar render`: documents (plain text or chat conversations, one JSON object per line) to
// the exact token ids the engine sees, through the project's chat template and control-token
// guard. It is how training and evaluation corpora become token files, and how a conversation's
// rendered prompt can be inspected.
//
// Owns: the command (input, output formats, summary). Does not own: the document shape and its
// rendering (documents.h), the template (src/chat/renderer), tokenization (src/tokenizer).
#include <bit>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/documents.h"
#include "cli/tokenizer_source.h"
#include "core/error.h"
#include "core/format.h"
#include "tokenizer/trusted_specials.h"

namespace magnetar::cli {

namespace {

struct render_args {
    tokenizer_source src;
    std::string file = "-";
    std::string output;
    bool text = false;
    bool json_ids = false;
    bool quiet = false;
};

int render(const render_args& a) {
    const auto tok = load_tokenizer(a.src);
    const special_literals lits(*tok);
    std::FILE* out = nullptr;
    if (!a.output.empty()) {
        out = std::fopen(a.output.c_str(), "wb");
        if (!out) throw Error(strfmt("%s: cannot create", a.output.c_str()));
    }
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(
        out, [](std::FILE* f) { return f ? std::fclose(f) : 0; });
    size_t n_docs = 0, n_tokens = 0;
    std::set<int32_t> distinct;
    for_each_line(a.file, [&](const std::string& line, const std::string& where) {
        const document d = parse_document(parse_json_line(line, where), where);
        if (a.text) {
            std::fwrite(d.text.data(), 1, d.text.size(), stdout);
            std::fputc('\n', stdout);
            ++n_docs;
            return;
        }
        const std::vector<int32_t> ids = tokenize_document(*tok, lits, d);
        if (out) {
            // Little-endian int32, documents back to back (each starts with BOS).
            static_assert(std::endian::native == std::endian::little);
            if (std::fwrite(ids.data(), sizeof(int32_t), ids.size(), out) != ids.size()) {
                throw Error(strfmt("%s: write failed", a.output.c_str()));
            }
        } else {
            std::string s = a.json_ids ? "[" : "";
            for (size_t i = 0; i < ids.size(); ++i) {
                if (i > 0) s += a.json_ids ? ", " : " ";
                s += std::to_string(ids[i]);
            }
            s += a.json_ids ? "]\n" : "\n";
            std::fwrite(s.data(), 1, s.size(), stdout);
        }
        distinct.insert(ids.begin(), ids.end());
        ++n_docs;
        n_tokens += ids.size();
    });
    if (out && (std::fflush(out) != 0 || std::ferror(out))) {
        throw Error(strfmt("%s: write failed", a.output.c_str()));
    }
    if (!a.quiet && !a.text) {
        std::fprintf(stderr, "%zu documents, %zu tokens, %zu distinct ids%s%s\n", n_docs, n_tokens,
                     distinct.size(), out ? " -> " : "", a.output.c_str());
    }
    return 0;
}

action setup_render(CLI::App& sub) {
    auto a = std::make_shared<render_args>();
    add_tokenizer_options(sub, a->src);
    sub.add_option("-f,--file", a->file, "JSONL documents ('-': standard input)")
        ->capture_default_str();
    auto* out = sub.add_option("-o,--output", a->output,
                               "Write the ids as little-endian int32, documents back to back");
    auto* text = sub.add_flag("--text", a->text, "Print the rendered text instead of ids");
    text->excludes(out);
    sub.add_flag("--json", a->json_ids, "Print each document's ids as a JSON array")
        ->excludes(out)
        ->excludes(text);
    sub.add_flag("-q,--quiet", a->quiet, "No summary line on stderr");
    sub.footer(
        "One JSON object per line: {\"text\": ...} is BOS + the text + EOS (plain "
        "tokenization); {\"messages\": [...], \"tools\": [...], \"mode\": "
        "\"think\"|\"nothink\"|\"max\"} is rendered with the chat template (tool calls as "
        "{\"name\", \"arguments\"} or the OpenAI shape) and tokenized with control tokens only "
        "where the template put them; a conversation that does not end with an assistant "
        "message gets the generation prompt. Prints one line of ids per document.");
    return [a]() { return render(*a); };
}

}  // namespace

MAGNETAR_COMMAND(render, "render",
                 "Render JSONL documents (text or chats) through the chat template to token ids",
                 setup_render);

}  // namespace magnetar::cli
