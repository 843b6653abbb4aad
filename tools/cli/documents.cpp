// The JSONL documents of `magnetar render` and `magnetar score cases` (documents.h).
#include "cli/documents.h"

#include <fstream>
#include <iostream>

#include "chat/message.h"
#include "chat/renderer.h"
#include "core/error.h"
#include "core/format.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/trusted_specials.h"

namespace magnetar::cli {

using json = nlohmann::ordered_json;

std::string string_field(const json& obj, const char* key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return {};
    if (!it->is_string()) throw Error(strfmt("%s: \"%s\" must be a string", where.c_str(), key));
    return it->get<std::string>();
}

// {"name", "arguments"} or the OpenAI shape {"function": {"name", "arguments"}}; arguments
// may be an object (serialised here) or the JSON text of one.
namespace {

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

}  // namespace

json parse_json_line(const std::string& line, const std::string& where) {
    json j;
    try {
        j = json::parse(line);
    } catch (const json::exception& e) {
        throw Error(strfmt("%s: not JSON: %s", where.c_str(), e.what()));
    }
    if (!j.is_object()) throw Error(where + ": a document must be a JSON object");
    return j;
}

document parse_document(const json& j, const std::string& where) {
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

void for_each_line(const std::string& path,
                   const std::function<void(const std::string&, const std::string&)>& fn) {
    std::ifstream file;
    std::istream* in = &std::cin;
    if (path != "-") {
        file.open(path, std::ios::binary);
        if (!file) throw Error(strfmt("%s: cannot open", path.c_str()));
        in = &file;
    }
    const std::string name = path == "-" ? "<stdin>" : path;
    std::string line;
    size_t line_no = 0;
    while (std::getline(*in, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        fn(line, strfmt("%s:%zu", name.c_str(), line_no));
    }
    if (in->bad()) throw Error(strfmt("%s: read failed", name.c_str()));
}

}  // namespace magnetar::cli
