// Canonical DSML rendering: see dsml.h.
#include <nlohmann/json.hpp>

#include "chat/chat_tokens.h"
#include "chat/dsml.h"
#include "chat/json_text.h"
#include "core/error.h"

namespace magnetar::chat {

namespace {

constexpr std::string_view kParamClose = "</｜DSML｜parameter>";
// The same closer spelled with a JSON escape, so a JSON value can carry it inside a string
// without ending the parameter.
constexpr std::string_view kParamCloseJson = "\\u003c/｜DSML｜parameter>";

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (true) {
        size_t hit = s.find(from, pos);
        if (hit == std::string_view::npos) break;
        out.append(s.substr(pos, hit - pos));
        out.append(to);
        pos = hit + from.size();
    }
    out.append(s.substr(pos));
    return out;
}

// The block being written, and where client text lies in it.
struct block_writer {
    std::string out;
    std::vector<std::pair<size_t, size_t>>* spans = nullptr;
    void client(std::string_view text) {
        if (spans && !text.empty()) spans->emplace_back(out.size(), out.size() + text.size());
        out += text;
    }
};

void append_param(block_writer& w, std::string_view key, bool is_string, std::string_view value) {
    w.out += "<｜DSML｜parameter name=\"";
    w.client(attr_escape(key));
    w.out += is_string ? "\" string=\"true\">" : "\" string=\"false\">";
    w.client(value);
    w.out += kParamClose;
}

// Parameters of one call, joined by "\n" (official encode_arguments_to_dsml).
void render_params(block_writer& w, std::string_view arguments) {
    auto args = nlohmann::ordered_json::parse(arguments, nullptr, /*allow_exceptions=*/false);
    if (args.is_object()) {
        const size_t out_size = w.out.size();
        const size_t spans_size = w.spans ? w.spans->size() : 0;
        try {
            bool first = true;
            for (const auto& [key, value] : args.items()) {
                if (!first) w.out += '\n';
                first = false;
                if (value.is_string()) {
                    append_param(w, key, true,
                                 escape_param_close(value.get_ref<const std::string&>()));
                } else {
                    append_param(
                        w, key, false,
                        replace_all(python_json_dumps(value), kParamClose, kParamCloseJson));
                }
            }
            return;
        } catch (const Error&) {
            // Too deeply nested to re-serialise: fall through to the raw-text form.
            w.out.resize(out_size);
            if (w.spans) w.spans->resize(spans_size);
        }
    }
    append_param(w, "arguments", true, escape_param_close(arguments));
}

}  // namespace

std::string_view dsml_infix(dsml_variant v) {
    switch (v) {
        case dsml_variant::full:
            return kDsml;
        case dsml_variant::short_form:
            return "DSML｜";
        case dsml_variant::plain:
            return "";
    }
    return kDsml;
}

std::string escape_param_close(std::string_view value) {
    return replace_all(value, kParamClose, "&lt;/｜DSML｜parameter>");
}

std::string render_tool_calls(const std::vector<tool_call>& calls,
                              std::vector<std::pair<size_t, size_t>>* client_spans) {
    if (client_spans) client_spans->clear();
    if (calls.empty()) return {};
    block_writer w;
    w.spans = client_spans;
    w.out = "\n\n<｜DSML｜tool_calls>\n";
    for (size_t i = 0; i < calls.size(); ++i) {
        if (i) w.out += '\n';
        w.out += "<｜DSML｜invoke name=\"";
        w.client(attr_escape(calls[i].name));
        w.out += "\">\n";
        render_params(w, calls[i].arguments);
        w.out += "\n</｜DSML｜invoke>";
    }
    w.out += "\n</｜DSML｜tool_calls>";
    return std::move(w.out);
}

forced_call_start forced_tool_call_start(std::string_view name) {
    forced_call_start f;
    f.before = "\n\n<｜DSML｜tool_calls>\n";
    if (!name.empty()) {
        f.before += "<｜DSML｜invoke name=\"";
        f.name = attr_escape(name);
        f.after = "\">\n";
    }
    return f;
}

std::string dsml_block(const message& assistant) {
    if (assistant.tool_calls.empty()) return {};
    if (assistant.raw_dsml) return *assistant.raw_dsml;
    return render_tool_calls(assistant.tool_calls);
}

}  // namespace magnetar::chat
