// Request validation: see request_schema.h.
#include "server/request_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace magnetar::server {

// ---------------------------------------------------------------------------------------------
// Parsing under limits
// ---------------------------------------------------------------------------------------------

namespace {

// Builds the DOM from nlohmann's (iterative) SAX parser. Appends object members directly
// (ordered_json's own insert searches the object linearly, quadratic for many keys) and keeps
// a key index per open object so a duplicate key replaces the earlier value (last wins).
class bounded_builder {
  public:
    using number_integer_t = json::number_integer_t;
    using number_unsigned_t = json::number_unsigned_t;
    using number_float_t = json::number_float_t;
    using string_t = json::string_t;
    using binary_t = json::binary_t;

    bool null() { return insert(json(nullptr)) != nullptr; }
    bool boolean(bool v) { return insert(json(v)) != nullptr; }
    bool number_integer(number_integer_t v) { return insert(json(v)) != nullptr; }
    bool number_unsigned(number_unsigned_t v) { return insert(json(v)) != nullptr; }
    bool number_float(number_float_t v, const string_t&) { return insert(json(v)) != nullptr; }
    bool string(string_t& v) { return insert(json(std::move(v))) != nullptr; }
    bool binary(binary_t& v) { return insert(json::binary(std::move(v))) != nullptr; }
    bool key(string_t& k) {
        key_ = std::move(k);
        return true;
    }
    bool start_object(size_t) { return open(json::object()); }
    bool end_object() { return close(); }
    bool start_array(size_t) { return open(json::array()); }
    bool end_array() { return close(); }
    bool parse_error(size_t position, const std::string&, const json::exception&) {
        if (error_.empty()) error_ = "syntax error at byte " + std::to_string(position);
        return false;
    }

    json root;
    std::string error_;

  private:
    struct frame {
        json* node;
        std::unordered_map<std::string, size_t> index;  // objects: key -> member position
    };

    json* insert(json v) {
        if (++n_values_ > k_max_json_values) {
            error_ = "more than " + std::to_string(k_max_json_values) + " values";
            return nullptr;
        }
        if (stack_.empty()) {
            root = std::move(v);
            return &root;
        }
        frame& f = stack_.back();
        if (f.node->is_array()) {
            auto& a = f.node->get_ref<json::array_t&>();
            a.push_back(std::move(v));
            return &a.back();
        }
        auto& o = f.node->get_ref<json::object_t&>();
        auto [it, fresh] = f.index.try_emplace(key_, o.size());
        if (!fresh) {
            auto slot = o.begin() + static_cast<std::ptrdiff_t>(it->second);
            slot->second = std::move(v);
            return &slot->second;
        }
        o.emplace_back(key_, std::move(v));  // the vector's append: no linear key search
        return &o.back().second;
    }
    bool open(json container) {
        if (stack_.size() >= static_cast<size_t>(k_max_json_depth)) {
            error_ = "nesting deeper than " + std::to_string(k_max_json_depth);
            return false;
        }
        json* node = insert(std::move(container));
        if (!node) return false;
        stack_.push_back(frame{node, {}});
        return true;
    }
    bool close() {
        if (!stack_.empty()) stack_.pop_back();
        return true;
    }

    std::vector<frame> stack_;
    std::string key_;
    size_t n_values_ = 0;
};

}  // namespace

json parse_request_json(const std::string& body) {
    bounded_builder b;
    const bool ok = json::sax_parse(body, &b, json::input_format_t::json, true);
    if (!ok) {
        throw api_error(400, b.error_.empty() ? std::string("invalid JSON request")
                                              : "invalid JSON request: " + b.error_);
    }
    if (!b.root.is_object()) {
        throw api_error(400, "invalid JSON request: the body must be an object");
    }
    return std::move(b.root);
}

// ---------------------------------------------------------------------------------------------
// Schema rules
// ---------------------------------------------------------------------------------------------

namespace {

enum kind : unsigned {
    k_null = 1,
    k_bool = 2,
    k_int = 4,  // an integer, or a float with an integral value
    k_num = 8,  // any finite number
    k_str = 16,
    k_arr = 32,
    k_obj = 64,
};

struct rule;

struct member {
    const char* name;
    const rule* r;
    bool required = false;
};

// One value of an object's tag member (`role` / `type`): the rule of the object's members,
// or a refusal (a known but unsupported kind, e.g. image parts). "*" matches any value,
// "*suffix" any value ending in suffix.
struct variant {
    const char* value;
    const rule* r = nullptr;
    const char* refusal = nullptr;
};

// The schema of one JSON value. A null member counts as absent; elsewhere null is accepted
// only where `kinds` has k_null.
struct rule {
    unsigned kinds = 0;
    const char* what = nullptr;  // overrides the generated "must be ..." description
    const char* noun = nullptr;  // "role": unknown values are `unknown role "x"`
    // numbers
    double lo = -std::numeric_limits<double>::infinity();
    double hi = std::numeric_limits<double>::infinity();
    bool lo_open = false, hi_open = false;
    // strings
    size_t min_len = 0, max_len = SIZE_MAX;
    bool tool_name = false;
    std::vector<std::string> one_of;
    // arrays
    const rule* items = nullptr;
    size_t min_items = 0, max_items = SIZE_MAX;
    // objects
    std::vector<member> members;
    const char* tag = nullptr;          // the member whose value selects a variant
    const char* tag_default = nullptr;  // its value when absent (nullptr: required)
    std::vector<variant> variants;
    bool closed = false;  // members not listed are refused (the server's own extensions)
};

[[noreturn]] void fail(const std::string& path, const std::string& message) {
    api_error e(400, path + ": " + message);
    e.param = path;
    throw e;
}

[[noreturn]] void missing(const std::string& path) {
    api_error e(400, "missing " + path);
    e.param = path;
    throw e;
}

std::string quote_value(std::string_view s) {
    constexpr size_t k_max = 64;
    std::string out = "\"";
    out += s.substr(0, k_max);
    if (s.size() > k_max) out += "...";
    out += '"';
    return out;
}

std::string number_text(double d) {
    if (std::floor(d) == d && std::fabs(d) < 1e15) {
        return std::to_string(static_cast<int64_t>(d));
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", d);
    return buf;
}

std::string describe(const rule& r) {
    if (r.what) return r.what;
    std::vector<std::string> names;
    if (r.kinds & k_bool) names.push_back("a boolean");
    if (r.kinds & k_num)
        names.push_back("a number");
    else if (r.kinds & k_int)
        names.push_back("an integer");
    if (r.kinds & k_str) names.push_back("a string");
    if (r.kinds & k_arr) names.push_back("an array");
    if (r.kinds & k_obj) names.push_back("an object");
    std::string out;
    for (size_t i = 0; i < names.size(); ++i) {
        if (i) out += i + 1 == names.size() ? " or " : ", ";
        out += names[i];
    }
    if ((r.kinds & (k_num | k_int)) && (std::isfinite(r.lo) || std::isfinite(r.hi))) {
        if (r.lo == r.hi) return out + " equal to " + number_text(r.lo);
        out += " in ";
        out += r.lo_open ? "(" : "[";
        out += std::isfinite(r.lo) ? number_text(r.lo) : "-inf";
        out += ", ";
        out += std::isfinite(r.hi) ? number_text(r.hi) : "inf";
        out += r.hi_open ? ")" : "]";
    }
    return out;
}

unsigned kind_of(const json& v) {
    switch (v.type()) {
        case json::value_t::null:
            return k_null;
        case json::value_t::boolean:
            return k_bool;
        case json::value_t::number_integer:
        case json::value_t::number_unsigned:
            return k_int | k_num;
        case json::value_t::number_float: {
            const double d = v.get<double>();
            if (!std::isfinite(d)) return 0;
            return std::floor(d) == d ? (k_int | k_num) : k_num;
        }
        case json::value_t::string:
            return k_str;
        case json::value_t::array:
            return k_arr;
        case json::value_t::object:
            return k_obj;
        case json::value_t::binary:
        case json::value_t::discarded:
            return 0;
    }
    return 0;
}

// Tool names: printable, no whitespace. Names holding '<' or '>' (even a spelled control
// literal such as "f<think>") are valid: they render as escaped, plain client text.
bool is_tool_name(std::string_view s) {
    if (s.empty() || s.size() > k_max_tool_name_bytes) return false;
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (u <= 0x20 || u == 0x7f) return false;
    }
    return true;
}

const variant* find_variant(const rule& r, std::string_view value) {
    for (const auto& v : r.variants) {
        const std::string_view key = v.value;
        if (key == value) return &v;
        if (!key.empty() && key[0] == '*') {
            const std::string_view suffix = key.substr(1);
            if (value.size() > suffix.size() &&
                value.compare(value.size() - suffix.size(), suffix.size(), suffix) == 0) {
                return &v;
            }
        }
    }
    return nullptr;
}

std::string member_path(const std::string& path, const char* name) {
    return path.empty() ? std::string(name) : path + "." + name;
}

void check(const rule& r, const json& v, const std::string& path);

void check_members(const rule& r, const json& v, const std::string& path) {
    for (const auto& m : r.members) {
        auto it = v.find(m.name);
        if (it == v.end() || it->is_null()) {
            if (m.required) missing(member_path(path, m.name));
            continue;
        }
        check(*m.r, *it, member_path(path, m.name));
    }
    if (!r.closed) return;
    for (auto it = v.begin(); it != v.end(); ++it) {
        const bool known = std::any_of(r.members.begin(), r.members.end(),
                                       [&](const member& m) { return it.key() == m.name; });
        if (!known) fail(member_path(path, it.key().c_str()), "unknown member");
    }
}

void check(const rule& r, const json& v, const std::string& path) {
    const unsigned k = kind_of(v);
    if (!(k & r.kinds)) fail(path, "must be " + describe(r));
    if (k & (k_int | k_num)) {
        if ((r.kinds & (k_int | k_num)) == k_int && !(k & k_int)) {
            fail(path, "must be " + describe(r));
        }
        const double d = v.get<double>();
        if (d < r.lo || d > r.hi || (r.lo_open && d == r.lo) || (r.hi_open && d == r.hi)) {
            fail(path, "must be " + describe(r));
        }
        return;
    }
    if (k == k_str) {
        const auto& s = v.get_ref<const std::string&>();
        if (s.size() < r.min_len) fail(path, "must not be empty");
        if (s.size() > r.max_len) {
            fail(path, "must be at most " + std::to_string(r.max_len) + " bytes");
        }
        if (r.tool_name && !is_tool_name(s)) {
            fail(path, "must be 1 to " + std::to_string(k_max_tool_name_bytes) +
                           " bytes without spaces or control characters");
        }
        if (!r.one_of.empty()) {
            bool found = false;
            for (const auto& o : r.one_of) found = found || o == s;
            if (!found) {
                std::string expected;
                for (const auto& o : r.one_of) expected += (expected.empty() ? "" : ", ") + o;
                fail(path, std::string("unknown ") + (r.noun ? r.noun : "value") + " " +
                               quote_value(s) + " (expected one of: " + expected + ")");
            }
        }
        return;
    }
    if (k == k_arr) {
        if (v.size() < r.min_items) {
            if (r.min_items == 1) fail(path, "must not be empty");
            fail(path, "must have at least " + std::to_string(r.min_items) + " items");
        }
        if (v.size() > r.max_items) {
            fail(path, "must have at most " + std::to_string(r.max_items) +
                           (r.max_items == 1 ? " item" : " items"));
        }
        if (r.items) {
            for (size_t i = 0; i < v.size(); ++i) {
                check(*r.items, v[i], path + "[" + std::to_string(i) + "]");
            }
        }
        return;
    }
    if (k == k_obj) {
        check_members(r, v, path);
        if (!r.tag) return;
        const std::string tag_path = member_path(path, r.tag);
        std::string value;
        auto it = v.find(r.tag);
        if (it == v.end() || it->is_null()) {
            if (!r.tag_default) missing(tag_path);
            value = r.tag_default;
        } else if (!it->is_string()) {
            fail(tag_path, "must be a string");
        } else {
            value = it->get<std::string>();
        }
        const variant* var = find_variant(r, value);
        if (!var)
            fail(tag_path,
                 std::string("unknown ") + (r.noun ? r.noun : r.tag) + " " + quote_value(value));
        if (var->refusal) fail(path, var->refusal);
        if (var->r) check_members(*var->r, v, path);
    }
}

// ---------------------------------------------------------------------------------------------
// The tables
// ---------------------------------------------------------------------------------------------

rule of(unsigned kinds) {
    rule r;
    r.kinds = kinds;
    return r;
}

rule number(double lo, double hi, bool lo_open = false, bool hi_open = false) {
    rule r = of(k_num);
    r.lo = lo;
    r.hi = hi;
    r.lo_open = lo_open;
    r.hi_open = hi_open;
    return r;
}

rule integer(double lo, double hi) {
    rule r = of(k_int);
    r.lo = lo;
    r.hi = hi;
    return r;
}

rule one_of(std::vector<std::string> values, const char* noun = nullptr) {
    rule r = of(k_str);
    r.one_of = std::move(values);
    r.noun = noun;
    return r;
}

rule array_of(const rule& items, size_t min_items = 0, size_t max_items = SIZE_MAX) {
    rule r = of(k_arr);
    r.items = &items;
    r.min_items = min_items;
    r.max_items = max_items;
    return r;
}

rule object(std::vector<member> members) {
    rule r = of(k_obj);
    r.members = std::move(members);
    return r;
}

rule tagged(unsigned kinds, const char* tag, const char* tag_default, const char* noun,
            std::vector<variant> variants) {
    rule r = of(kinds);
    r.tag = tag;
    r.tag_default = tag_default;
    r.noun = noun;
    r.variants = std::move(variants);
    return r;
}

rule with_kinds(rule r, unsigned extra) {
    r.kinds |= extra;
    return r;
}

constexpr const char* k_no_image = "image content is not supported: the model is text-only";
constexpr const char* k_no_audio = "audio content is not supported: the model is text-only";
constexpr const char* k_no_file = "file content is not supported: the model is text-only";
constexpr const char* k_no_document = "document content is not supported: the model is text-only";

// Every rule, built once; members point at earlier members.
struct schemas {
    // Shared
    rule any_str = of(k_str), any_bool = of(k_bool), any_obj = of(k_obj), any_int = of(k_int);
    rule any_value = of(k_null | k_bool | k_int | k_num | k_str | k_arr | k_obj);
    rule empty_obj = object({});
    rule temperature = number(0, 2);
    rule top_p = number(0, 1, true, false);
    rule top_k = integer(0, static_cast<double>(k_max_top_k));
    rule min_p = number(0, 1, false, true);
    rule max_tokens = integer(1, static_cast<double>(k_max_tokens_limit));
    rule n_one = [] {
        rule r = integer(1, 1);
        r.what = "1 (only n = 1 is supported)";
        return r;
    }();
    rule logprobs_k = integer(0, 20);
    rule nonneg_int = integer(0, std::numeric_limits<double>::infinity());
    rule penalty = number(-2, 2);
    rule steering_scale = number(-100, 100);
    rule steering = [this] {
        rule r = object({{"ffn", &steering_scale}, {"attn", &steering_scale}});
        r.closed = true;
        return r;
    }();
    rule stop_string = [] {
        rule r = of(k_str);
        r.min_len = 1;
        r.max_len = k_max_stop_bytes;
        return r;
    }();
    rule stop = [this] {
        rule r = stop_string;
        r.kinds |= k_arr;
        r.items = &stop_string;
        r.max_items = k_max_stop_sequences;
        return r;
    }();
    rule stop_list = array_of(stop_string, 0, k_max_stop_sequences);
    rule stream_options = object({{"include_usage", &any_bool}});
    rule tool_name = [] {
        rule r = of(k_str);
        r.tool_name = true;
        return r;
    }();
    rule thinking =
        with_kinds(object({{"type", &any_str}, {"budget_tokens", &nonneg_int}}), k_bool);
    rule output_config = object({{"effort", &any_str}});
    rule str_list = array_of(any_str);

    // Chat Completions
    rule text_part = object({{"text", &any_str, true}});
    rule refusal_part = object({{"refusal", &any_str, true}});
    rule chat_part = tagged(k_str | k_obj, "type", nullptr, "content part type",
                            {{"text", &text_part},
                             {"refusal", &refusal_part},
                             {"image_url", nullptr, k_no_image},
                             {"input_image", nullptr, k_no_image},
                             {"input_audio", nullptr, k_no_audio},
                             {"file", nullptr, k_no_file}});
    rule chat_content = with_kinds(array_of(chat_part), k_str | k_null);
    rule call_arguments = of(k_str | k_obj);
    rule chat_call_function =
        object({{"name", &any_str, true}, {"arguments", &call_arguments, true}});
    rule function_type = one_of({"function"}, "tool type");
    rule chat_tool_call = object(
        {{"id", &any_str}, {"type", &function_type}, {"function", &chat_call_function, true}});
    rule chat_tool_calls = array_of(chat_tool_call);
    rule chat_message_body = object({{"content", &chat_content},
                                     {"reasoning_content", &chat_content},
                                     {"tool_calls", &chat_tool_calls},
                                     {"tool_call_id", &any_str},
                                     {"name", &any_str},
                                     {"refusal", &any_str}});
    rule chat_message = tagged(k_obj, "role", "user", "role",
                               {{"system", &chat_message_body},
                                {"developer", &chat_message_body},
                                {"user", &chat_message_body},
                                {"assistant", &chat_message_body},
                                {"tool", &chat_message_body},
                                {"function", &chat_message_body},
                                {"latest_reminder", &chat_message_body}});
    rule chat_messages = array_of(chat_message, 1);
    rule chat_function = object({{"name", &tool_name, true},
                                 {"description", &any_str},
                                 {"parameters", &any_obj},
                                 {"strict", &any_bool}});
    rule chat_tool = object({{"type", &function_type}, {"function", &chat_function, true}});
    rule chat_tools = array_of(chat_tool);
    rule chat_choice_function = object({{"name", &any_str, true}});
    rule chat_tool_choice = [this] {
        rule r = one_of({"none", "auto", "required"}, "tool_choice");
        r.kinds |= k_obj;
        r.members = {{"type", &any_str, true}, {"function", &chat_choice_function}};
        return r;
    }();
    rule format_type = one_of({"text", "json_object", "json_schema"}, "response_format type");
    rule response_format = object({{"type", &format_type, true}, {"json_schema", &any_obj}});
    rule chat_body = object({{"messages", &chat_messages, true},
                             {"model", &any_str},
                             {"max_tokens", &max_tokens},
                             {"max_completion_tokens", &max_tokens},
                             {"temperature", &temperature},
                             {"top_p", &top_p},
                             {"top_k", &top_k},
                             {"min_p", &min_p},
                             {"seed", &any_int},
                             {"n", &n_one},
                             {"stop", &stop},
                             {"logprobs", &any_bool},
                             {"top_logprobs", &logprobs_k},
                             {"stream", &any_bool},
                             {"stream_options", &stream_options},
                             {"tools", &chat_tools},
                             {"tool_choice", &chat_tool_choice},
                             {"parallel_tool_calls", &any_bool},
                             {"response_format", &response_format},
                             {"reasoning_effort", &any_str},
                             {"thinking", &thinking},
                             {"think", &any_bool},
                             {"output_config", &output_config},
                             {"frequency_penalty", &penalty},
                             {"presence_penalty", &penalty},
                             {"logit_bias", &any_obj},
                             {"user", &any_str},
                             {"metadata", &any_obj},
                             {"x_magnetar_forced_output", &any_str},
                             {"x_magnetar_steering", &steering}});

    // Completions
    rule prompt = [this] {
        rule r = array_of(any_str, 1, 1);
        r.kinds |= k_str;
        r.what = "a string or an array of one string";
        return r;
    }();
    rule completions_body = object({{"prompt", &prompt, true},
                                    {"model", &any_str},
                                    {"max_tokens", &max_tokens},
                                    {"temperature", &temperature},
                                    {"top_p", &top_p},
                                    {"top_k", &top_k},
                                    {"min_p", &min_p},
                                    {"seed", &any_int},
                                    {"n", &n_one},
                                    {"best_of", &n_one},
                                    {"stop", &stop},
                                    {"logprobs", &logprobs_k},
                                    {"echo", &any_bool},
                                    {"suffix", &any_str},
                                    {"stream", &any_bool},
                                    {"stream_options", &stream_options},
                                    {"reasoning_effort", &any_str},
                                    {"thinking", &thinking},
                                    {"think", &any_bool},
                                    {"output_config", &output_config},
                                    {"frequency_penalty", &penalty},
                                    {"presence_penalty", &penalty},
                                    {"logit_bias", &any_obj},
                                    {"user", &any_str},
                                    {"x_magnetar_forced_output", &any_str},
                                    {"x_magnetar_steering", &steering}});

    // Responses
    rule resp_part = tagged(k_obj, "type", nullptr, "content part type",
                            {{"input_text", &text_part},
                             {"output_text", &text_part},
                             {"text", &text_part},
                             {"summary_text", &text_part},
                             {"reasoning_text", &text_part},
                             {"input_image", nullptr, k_no_image},
                             {"input_audio", nullptr, k_no_audio},
                             {"input_file", nullptr, k_no_file}});
    rule resp_content = with_kinds(array_of(resp_part), k_str | k_null);
    rule resp_role = one_of({"user", "assistant", "system", "developer"}, "role");
    rule resp_message = object({{"role", &resp_role}, {"content", &resp_content}});
    rule obj_list = array_of(any_obj);
    rule resp_reasoning = object({{"summary", &obj_list}, {"content", &obj_list}});
    rule resp_function_call =
        object({{"name", &any_str, true}, {"call_id", &any_str}, {"namespace", &any_str}});
    rule resp_call_output = object({{"call_id", &any_str, true}});
    rule resp_item_reference = object({{"id", &any_str, true}});
    rule resp_item = tagged(k_obj, "type", "message", "item type",
                            {{"message", &resp_message},
                             {"reasoning", &resp_reasoning},
                             {"function_call", &resp_function_call},
                             {"custom_tool_call", &resp_function_call},
                             {"local_shell_call", &empty_obj},
                             {"tool_search_call", &empty_obj},
                             {"web_search_call", &empty_obj},
                             {"image_generation_call", &empty_obj},
                             {"*_call_output", &resp_call_output},
                             {"tool_search_output", &empty_obj},
                             {"compaction", &empty_obj},
                             {"context_compaction", &empty_obj},
                             {"item_reference", &resp_item_reference}});
    rule resp_input = with_kinds(array_of(resp_item), k_str);
    rule resp_function_tool = object({{"name", &tool_name},
                                      {"description", &any_str},
                                      {"parameters", &any_obj},
                                      {"function", &chat_function},
                                      {"strict", &any_bool}});
    // Hosted tool types (web_search, custom, local_shell, ...) are accepted, not offered.
    rule resp_tool = tagged(k_obj, "type", nullptr, "tool type",
                            {{"function", &resp_function_tool}, {"*", &empty_obj}});
    rule resp_tools = array_of(resp_tool);
    rule str_or_obj = of(k_str | k_obj);  // tool_choice: values checked by the handler
    rule resp_reasoning_cfg = object({{"effort", &any_str}, {"summary", &any_str}});
    rule resp_format = object({{"type", &any_str, true}});
    rule resp_text = object({{"format", &resp_format}, {"verbosity", &any_str}});
    rule responses_body = object({{"input", &resp_input, true},
                                  {"model", &any_str},
                                  {"instructions", &any_str},
                                  {"previous_response_id", &any_str},
                                  {"max_output_tokens", &max_tokens},
                                  {"max_tokens", &max_tokens},
                                  {"temperature", &temperature},
                                  {"top_p", &top_p},
                                  {"seed", &any_int},
                                  {"stream", &any_bool},
                                  {"store", &any_bool},
                                  {"tools", &resp_tools},
                                  {"tool_choice", &str_or_obj},
                                  {"parallel_tool_calls", &any_bool},
                                  {"reasoning", &resp_reasoning_cfg},
                                  {"text", &resp_text},
                                  {"include", &str_list},
                                  {"metadata", &any_obj},
                                  {"truncation", &any_str},
                                  {"user", &any_str},
                                  {"top_logprobs", &logprobs_k},
                                  {"background", &any_bool},
                                  {"thinking", &thinking},
                                  {"x_magnetar_forced_output", &any_str},
                                  {"x_magnetar_steering", &steering}});

    // Anthropic Messages
    rule thinking_block = object({{"thinking", &any_str, true}, {"signature", &any_str}});
    rule redacted_block = object({{"data", &any_str}});
    rule tool_use_block =
        object({{"id", &any_str, true}, {"name", &any_str, true}, {"input", &any_obj}});
    rule result_block = tagged(k_str | k_obj, "type", nullptr, "content block type",
                               {{"text", &text_part},
                                {"image", nullptr, k_no_image},
                                {"document", nullptr, k_no_document}});
    rule result_content = with_kinds(array_of(result_block), k_str | k_null);
    rule tool_result_block = object(
        {{"tool_use_id", &any_str, true}, {"content", &result_content}, {"is_error", &any_bool}});
    rule user_block = tagged(k_obj, "type", nullptr, "content block type",
                             {{"text", &text_part},
                              {"tool_result", &tool_result_block},
                              {"image", nullptr, k_no_image},
                              {"document", nullptr, k_no_document}});
    rule assistant_block = tagged(k_obj, "type", nullptr, "content block type",
                                  {{"text", &text_part},
                                   {"thinking", &thinking_block},
                                   {"redacted_thinking", &redacted_block},
                                   {"tool_use", &tool_use_block},
                                   {"server_tool_use", &empty_obj},
                                   {"web_search_tool_result", &empty_obj}});
    rule user_content = with_kinds(array_of(user_block, 1), k_str | k_null);
    rule assistant_content = with_kinds(array_of(assistant_block, 1), k_str | k_null);
    rule user_message = object({{"content", &user_content}});
    rule assistant_message = object({{"content", &assistant_content}});
    rule anthropic_message = tagged(k_obj, "role", "user", "role",
                                    {{"user", &user_message}, {"assistant", &assistant_message}});
    rule anthropic_messages = array_of(anthropic_message, 1);
    rule system_block =
        tagged(k_str | k_obj, "type", nullptr, "system block type", {{"text", &text_part}});
    rule system = with_kinds(array_of(system_block), k_str);
    rule anthropic_temperature = number(0, 1);
    rule anthropic_tool = object({{"name", &tool_name, true},
                                  {"type", &any_str},
                                  {"description", &any_str},
                                  {"input_schema", &any_obj}});
    rule anthropic_tools = array_of(anthropic_tool);
    rule parallel_only = object({{"disable_parallel_tool_use", &any_bool}});
    rule choice_tool = object({{"name", &any_str, true}, {"disable_parallel_tool_use", &any_bool}});
    rule anthropic_tool_choice = tagged(k_obj, "type", nullptr, "tool_choice type",
                                        {{"auto", &parallel_only},
                                         {"any", &parallel_only},
                                         {"tool", &choice_tool},
                                         {"none", &empty_obj}});
    rule messages_body = object({{"messages", &anthropic_messages, true},
                                 {"model", &any_str},
                                 {"max_tokens", &max_tokens, true},
                                 {"system", &system},
                                 {"temperature", &anthropic_temperature},
                                 {"top_p", &top_p},
                                 {"top_k", &top_k},
                                 {"stop_sequences", &stop_list},
                                 {"stream", &any_bool},
                                 {"tools", &anthropic_tools},
                                 {"tool_choice", &anthropic_tool_choice},
                                 {"thinking", &thinking},
                                 {"think", &any_bool},
                                 {"output_config", &output_config},
                                 {"reasoning_effort", &any_str},
                                 {"metadata", &any_obj},
                                 {"service_tier", &any_str},
                                 {"x_magnetar_forced_output", &any_str},
                                 {"x_magnetar_steering", &steering}});
    // count_tokens: the same, max_tokens optional (the real API does not take it).
    rule count_tokens_body = [this] {
        rule r = messages_body;
        for (auto& m : r.members) {
            if (std::string_view(m.name) == "max_tokens") m.required = false;
        }
        return r;
    }();
};

const schemas& all_schemas() {
    static const schemas s;
    return s;
}

}  // namespace

void validate_request(api_endpoint endpoint, const json& body) {
    const schemas& s = all_schemas();
    const rule* r = nullptr;
    switch (endpoint) {
        case api_endpoint::chat_completions:
            r = &s.chat_body;
            break;
        case api_endpoint::completions:
            r = &s.completions_body;
            break;
        case api_endpoint::responses:
            r = &s.responses_body;
            break;
        case api_endpoint::messages:
            r = &s.messages_body;
            break;
        case api_endpoint::count_tokens:
            r = &s.count_tokens_body;
            break;
    }
    if (!body.is_object()) throw api_error(400, "invalid JSON request: the body must be an object");
    check_members(*r, body, "");
}

}  // namespace magnetar::server
