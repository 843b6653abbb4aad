// `magnetar tokenize` and `magnetar detokenize`: text <-> token ids with a model's tokenizer.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/tokenizer_source.h"
#include "core/error.h"
#include "core/format.h"

namespace magnetar::cli {

namespace {

// Whole file, or standard input for "-".
std::string read_all(const std::string& path) {
    if (path == "-") {
        return std::string(std::istreambuf_iterator<char>(std::cin),
                           std::istreambuf_iterator<char>());
    }
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error(strfmt("%s: cannot open", path.c_str()));
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void write_all(std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
}

// Printable ASCII as is, everything else (and the backslash) as \xNN.
std::string escape(std::string_view s) {
    std::string out;
    for (unsigned char c : s) {
        if (c >= 0x20 && c < 0x7F && c != '\\') {
            out.push_back(static_cast<char>(c));
        } else {
            out += strfmt("\\x%02X", c);
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// tokenize
// ---------------------------------------------------------------------------------------------

struct tokenize_args {
    tokenizer_source src;
    std::string file;
    std::string text;
    CLI::Option* text_opt = nullptr;
    bool specials = false;
    bool json = false;
    bool pieces = false;
};

int tokenize(const tokenize_args& a) {
    const auto tok = load_tokenizer(a.src);
    const std::string text =
        a.text_opt->count() > 0 ? a.text : read_all(a.file.empty() ? "-" : a.file);
    const std::vector<int32_t> ids = a.specials ? tok->encode_chat(text) : tok->encode(text);
    std::string out;
    if (a.pieces) {
        for (int32_t id : ids) out += strfmt("%d\t%s\n", id, escape(tok->token_bytes(id)).c_str());
    } else {
        out = a.json ? "[" : "";
        for (size_t i = 0; i < ids.size(); ++i) {
            if (i > 0) out += a.json ? ", " : " ";
            out += std::to_string(ids[i]);
        }
        out += a.json ? "]\n" : "\n";
    }
    write_all(out);
    return 0;
}

action setup_tokenize(CLI::App& sub) {
    auto a = std::make_shared<tokenize_args>();
    add_tokenizer_options(sub, a->src);
    auto* file =
        sub.add_option("-f,--file", a->file, "Read the text from a file ('-': standard input)");
    a->text_opt =
        sub.add_option("text", a->text, "Text to tokenize (default: --file, else standard input)")
            ->excludes(file);
    sub.add_flag("--specials", a->specials,
                 "Rendered-chat entry point: special token literals such as <\uFF5CUser\uFF5C> "
                 "become their control tokens. Without it the text is plain: literals are split "
                 "into ordinary tokens");
    auto* json = sub.add_flag("--json", a->json, "Print the ids as a JSON array");
    sub.add_flag("--pieces", a->pieces, "Print one token per line: id, tab, its bytes (escaped)")
        ->excludes(json);
    sub.footer("Prints the token ids separated by spaces. No BOS is added.");
    return [a]() { return tokenize(*a); };
}

// ---------------------------------------------------------------------------------------------
// detokenize
// ---------------------------------------------------------------------------------------------

struct detokenize_args {
    tokenizer_source src;
    std::string file;
    std::vector<std::string> ids;
};

// Ids separated by whitespace and/or commas, optionally inside [ ] (a JSON array).
std::vector<int32_t> parse_ids(const std::string& s) {
    std::vector<int32_t> ids;
    std::string cur;
    auto flush = [&] {
        if (cur.empty()) return;
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(cur, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != cur.size() || v < INT32_MIN || v > INT32_MAX) {
            throw Error(strfmt("not a token id: '%s'", cur.c_str()));
        }
        ids.push_back(static_cast<int32_t>(v));
        cur.clear();
    };
    for (char c : s) {
        if (c == '[' || c == ']' || c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            flush();
        } else {
            cur.push_back(c);
        }
    }
    flush();
    return ids;
}

int detokenize(const detokenize_args& a) {
    const auto tok = load_tokenizer(a.src);
    std::string input;
    if (!a.ids.empty()) {
        for (const auto& s : a.ids) input += s + " ";
    } else {
        input = read_all(a.file.empty() ? "-" : a.file);
    }
    write_all(tok->decode(parse_ids(input)));
    return 0;
}

action setup_detokenize(CLI::App& sub) {
    auto a = std::make_shared<detokenize_args>();
    add_tokenizer_options(sub, a->src);
    auto* file =
        sub.add_option("-f,--file", a->file, "Read the ids from a file ('-': standard input)");
    sub.add_option("ids", a->ids, "Token ids (spaces, commas or a JSON array)")->excludes(file);
    sub.footer(
        "Writes the bytes the ids stand for, special tokens as their literal text, with no "
        "newline added.");
    return [a]() { return detokenize(*a); };
}

}  // namespace

MAGNETAR_COMMAND(tokenize, "tokenize", "Text to token ids", setup_tokenize);
MAGNETAR_COMMAND(detokenize, "detokenize", "Token ids to text", setup_detokenize);

}  // namespace magnetar::cli
