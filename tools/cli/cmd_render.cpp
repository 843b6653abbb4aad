// `magnetar render`: documents (plain text or chat conversations, one JSON object per line) to
// the exact token ids the engine sees, through the project's chat template and control-token
// guard. It is how training and evaluation corpora become token files, and how a conversation's
// rendered prompt can be inspected.
//
// Owns: the JSONL document shape (docs/cli.md "render") and its conversion to chat::message.
// Does not own: the template (src/chat/renderer), tokenization (src/tokenizer).
#include <bit>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "chat/message.h"
#include "chat/renderer.h"
#include "cli/command.h"
#include "cli/tokenizer_source.h"
#include "core/error.h"
#include "core/format.h"
#include "tokenizer/trusted_specials.h"

namespace magnetar::cli {

namespace {

using json = nlohmann::ordered_json;

struct render_args {
    tokenizer_source src;
    std::string file = "-";
    std::string output;
    bool text = false;
    bool json_ids = false;
    bool quiet = false;
};

// One document, ready to tokenize: the rendered text and the client spans (empty for plain
// text, which is tokenized without control tokens apart from BOS and EOS).
struct document {
    std::string text;
    std::vector<std::pair<size_t, size_t>> client_spans;
    bool chat = false;
};

std::string string_field(const json& obj, const char* key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return {};
    if (!it->is_string()) throw Error(strfmt("%s: \"%s\" must be a string", where.c_str(), key));
    return it->get<std::string>();
}

// {"name", "arguments"} or the OpenAI shape {"function": {"name", "arguments"}}; arguments
// may be an object (serialised here) or the JSON text of one.
chat::tool_call parse_tool_call(const json& j, const std::string& where) {
    if (!j.is_object()) throw Error(where + ": a tool call must be an object");
    const json& f = j.contains("function") ? j["function"] : j;
    if (!f.is_object()) throw Error(where + ": \"function\" must be an object");
    chat::tool_call call;
    call.id = string_field(j, "id", where);
    call.name = string_field(f, "name", where);
    if (call.name.empty()) throw Error(where + ": a tool call needs a \"name\"");
    auto args = f.find("arguments");
    if (args == f.end() || args->is_null()) {
        call.arguments = "{}";
    } else if (args->is_string()) {
        call.arguments = args->get<std::string>();
    } else if (args->is_object()) {
        call.arguments = args->dump();
    } else {
        throw Error(where + ": \"arguments\" must be an object or a JSON string");
    }
    return call;
}

chat::message parse_message(const json& j, const std::string& where) {
    if (!j.is_object()) throw Error(where + ": a message must be an object");
    chat::message m;
    const std::string role = string_field(j, "role", where);
    auto r = chat::role_from_string(role);
    if (!r) throw Error(strfmt("%s: unknown role '%s'", where.c_str(), role.c_str()));
    m.role = *r;
    m.content = string_field(j, "content", where);
    m.reasoning_content = string_field(j, "reasoning_content", where);
    m.tool_call_id = string_field(j, "tool_call_id", where);
    m.name = string_field(j, "name", where);
    if (auto calls = j.find("tool_calls"); calls != j.end() && !calls->is_null()) {
        if (!calls->is_array()) throw Error(where + ": \"tool_calls\" must be an array");
        for (size_t i = 0; i < calls->size(); ++i) {
            m.tool_calls.push_back(
                parse_tool_call((*calls)[i], strfmt("%s tool_calls[%zu]", where.c_str(), i)));
        }
    }
    return m;
}

chat::think_mode parse_mode(const std::string& s, const std::string& where) {
    if (s.empty() || s == "think") return chat::think_mode::think;
    if (s == "nothink") return chat::think_mode::nothink;
    if (s == "max") return chat::think_mode::think_max;
    throw Error(strfmt("%s: mode '%s' (expected think, nothink or max)", where.c_str(), s.c_str()));
}

// {"text": ...} -> BOS + text + EOS; {"messages": [...], "tools": [...], "mode": ...} -> the
// rendered conversation, with the generation prompt when it does not end with an assistant.
document parse_document(const std::string& line, const std::string& where) {
    json j;
    try {
        j = json::parse(line);
    } catch (const json::exception& e) {
        throw Error(strfmt("%s: not JSON: %s", where.c_str(), e.what()));
    }
    if (!j.is_object()) throw Error(where + ": a document must be a JSON object");
    document d;
    if (j.contains("text")) {
        if (j.contains("messages"))
            throw Error(where + ": give \"text\" or \"messages\", not both");
        d.text = string_field(j, "text", where);
        return d;
    }
    auto msgs = j.find("messages");
    if (msgs == j.end() || !msgs->is_array() || msgs->empty()) {
        throw Error(where + ": a document needs \"text\" or a non-empty \"messages\" array");
    }
    std::vector<chat::message> messages;
    for (size_t i = 0; i < msgs->size(); ++i) {
        messages.push_back(parse_message((*msgs)[i], strfmt("%s messages[%zu]", where.c_str(), i)));
    }
    chat::tool_list tools;
    if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
        if (!t->is_array()) throw Error(where + ": \"tools\" must be an array");
        for (const auto& tool : *t) tools.push_back(tool);
    }
    chat::render_options opt;
    opt.mode = parse_mode(string_field(j, "mode", where), where);
    opt.n_ctx = 1u << 20;  // a corpus document is rendered as written: max stays max
    opt.add_generation_prompt = messages.back().role != chat::role::assistant;
    opt.client_spans = &d.client_spans;
    d.text = chat::render_chat(messages, tools, opt);
    d.chat = true;
    return d;
}

std::vector<int32_t> tokenize_document(const tokenizer& tok, const special_literals& lits,
                                       const document& d) {
    std::vector<int32_t> ids;
    if (!d.chat) {
        ids.push_back(tok.specials().bos);
        tok.encode_append(d.text, false, ids);
        ids.push_back(tok.specials().eos);
        return ids;
    }
    encode_trusted(tok, d.text, specials_outside(lits, d.text, d.client_spans), 0, ids);
    return ids;
}

int render(const render_args& a) {
    const auto tok = load_tokenizer(a.src);
    const special_literals lits(*tok);
    std::ifstream file;
    std::istream* in = &std::cin;
    if (a.file != "-") {
        file.open(a.file, std::ios::binary);
        if (!file) throw Error(strfmt("%s: cannot open", a.file.c_str()));
        in = &file;
    }
    std::FILE* out = nullptr;
    if (!a.output.empty()) {
        out = std::fopen(a.output.c_str(), "wb");
        if (!out) throw Error(strfmt("%s: cannot create", a.output.c_str()));
    }
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(
        out, [](std::FILE* f) { return f ? std::fclose(f) : 0; });
    const std::string name = a.file == "-" ? "<stdin>" : a.file;
    std::string line;
    size_t n_docs = 0, n_tokens = 0, line_no = 0;
    std::set<int32_t> distinct;
    while (std::getline(*in, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const document d = parse_document(line, strfmt("%s:%zu", name.c_str(), line_no));
        if (a.text) {
            std::fwrite(d.text.data(), 1, d.text.size(), stdout);
            std::fputc('\n', stdout);
            ++n_docs;
            continue;
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
    }
    if (in->bad()) throw Error(strfmt("%s: read failed", name.c_str()));
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
