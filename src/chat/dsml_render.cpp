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

void append_param(std::string& out, std::string_view key, bool is_string, std::string_view value) {
    out += "<｜DSML｜parameter name=\"";
    out += attr_escape(key);
    out += is_string ? "\" string=\"true\">" : "\" string=\"false\">";
    out += value;
    out += kParamClose;
}

// Parameters of one call, joined by "\n" (official encode_arguments_to_dsml).
std::string render_params(std::string_view arguments) {
    auto args = nlohmann::ordered_json::parse(arguments, nullptr, /*allow_exceptions=*/false);
    if (args.is_object()) {
        try {
            std::string out;
            bool first = true;
            for (const auto& [key, value] : args.items()) {
                if (!first) out += '\n';
                first = false;
                if (value.is_string()) {
                    append_param(out, key, true,
                                 escape_param_close(value.get_ref<const std::string&>()));
                } else {
                    append_param(
                        out, key, false,
                        replace_all(python_json_dumps(value), kParamClose, kParamCloseJson));
                }
            }
            return out;
        } catch (const Error&) {
            // Too deeply nested to re-serialise: fall through to the raw-text form.
        }
    }
    std::string out;
    append_param(out, "arguments", true, escape_param_close(arguments));
    return out;
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

std::string render_tool_calls(const std::vector<tool_call>& calls) {
    if (calls.empty()) return {};
    std::string out = "\n\n<｜DSML｜tool_calls>\n";
    for (size_t i = 0; i < calls.size(); ++i) {
        if (i) out += '\n';
        out += "<｜DSML｜invoke name=\"";
        out += attr_escape(calls[i].name);
        out += "\">\n";
        out += render_params(calls[i].arguments);
        out += "\n</｜DSML｜invoke>";
    }
    out += "\n</｜DSML｜tool_calls>";
    return out;
}

std::string dsml_block(const message& assistant) {
    if (assistant.tool_calls.empty()) return {};
    if (assistant.raw_dsml) return *assistant.raw_dsml;
    return render_tool_calls(assistant.tool_calls);
}

}  // namespace magnetar::chat
