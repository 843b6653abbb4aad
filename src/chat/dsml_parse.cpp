// Authoritative DSML parser: see dsml.h. Recursive descent over the finished text with one
// cursor; every failure records a status, a message and the byte offset.
#include "chat/chat_tokens.h"
#include "chat/dsml.h"
#include "chat/dsml_internal.h"
#include "chat/json_text.h"

namespace magnetar::chat {

namespace detail {

const dsml_tags& tags_for(dsml_variant v) {
    static const dsml_tags tags[3] = {
        [] {
            std::string d(dsml_infix(dsml_variant::full));
            return dsml_tags{"<" + d + "tool_calls>", "</" + d + "tool_calls>",
                             "<" + d + "invoke",      "</" + d + "invoke>",
                             "<" + d + "parameter",   "</" + d + "parameter>"};
        }(),
        [] {
            std::string d(dsml_infix(dsml_variant::short_form));
            return dsml_tags{"<" + d + "tool_calls>", "</" + d + "tool_calls>",
                             "<" + d + "invoke",      "</" + d + "invoke>",
                             "<" + d + "parameter",   "</" + d + "parameter>"};
        }(),
        dsml_tags{"<tool_calls>", "</tool_calls>", "<invoke", "</invoke>", "<parameter",
                  "</parameter>"},
    };
    return tags[static_cast<int>(v)];
}

bool parse_attrs(std::string_view text, attr_list* out) {
    size_t i = 0;
    while (true) {
        while (i < text.size() && is_ascii_ws(text[i])) ++i;
        if (i == text.size()) return true;
        size_t name_begin = i;
        while (i < text.size()) {
            char c = text[i];
            bool name_char = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                             (c >= '0' && c <= '9') || c == '_' || c == '-' || c == ':' || c == '.';
            if (!name_char) break;
            ++i;
        }
        if (i == name_begin) return false;
        std::string_view name = text.substr(name_begin, i - name_begin);
        while (i < text.size() && is_ascii_ws(text[i])) ++i;
        if (i == text.size() || text[i] != '=') return false;
        ++i;
        while (i < text.size() && is_ascii_ws(text[i])) ++i;
        if (i == text.size() || text[i] != '"') return false;
        size_t close = text.find('"', i + 1);
        if (close == std::string_view::npos) return false;
        out->emplace_back(std::string(name), entity_unescape(text.substr(i + 1, close - i - 1)));
        i = close + 1;
    }
}

const std::string* find_attr(const attr_list& attrs, std::string_view name) {
    for (const auto& [k, v] : attrs) {
        if (k == name) return &v;
    }
    return nullptr;
}

}  // namespace detail

namespace {

using detail::is_ascii_ws;

// Nested parameters (a model slip) are followed this deep at most.
constexpr int kMaxParamNesting = 8;

struct start_pattern {
    std::string_view text;
    dsml_variant variant;
};

// Tried in this order; the first pattern that occurs anywhere wins (not the earliest one).
constexpr start_pattern kStartPatterns[] = {
    {"\n\n<｜DSML｜tool_calls>", dsml_variant::full},
    {"<｜DSML｜tool_calls>", dsml_variant::full},
    {"\n\n<DSML｜tool_calls>", dsml_variant::short_form},
    {"<DSML｜tool_calls>", dsml_variant::short_form},
    {"\n\n<tool_calls>", dsml_variant::plain},
    {"<tool_calls>", dsml_variant::plain},
};

std::string build_object(const std::vector<std::pair<std::string, std::string>>& members) {
    std::string out = "{";
    for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += ", ";
        out += json_quote(members[i].first);
        out += ": ";
        out += members[i].second;
    }
    out += '}';
    return out;
}

class block_parser {
  public:
    block_parser(std::string_view text, size_t p, dsml_variant v)
        : text_(text), p_(p), tags_(detail::tags_for(v)) {}

    // Parses invokes up to and including the closing tag.
    bool parse(std::vector<parsed_tool_call>* calls) {
        while (true) {
            skip_ws();
            if (p_ >= text_.size()) return fail_eof("tool block not closed");
            if (at(tags_.close_tc)) {
                p_ += tags_.close_tc.size();
                return true;
            }
            if (!at(tags_.open_invoke)) {
                return fail_unexpected("expected an invoke tag or the closing tool_calls tag");
            }
            parsed_tool_call call;
            if (!parse_invoke(&call)) return false;
            calls->push_back(std::move(call));
        }
    }

    size_t pos() const { return p_; }
    parse_status status() const { return status_; }
    const std::string& error() const { return error_; }
    size_t error_offset() const { return error_offset_; }

  private:
    bool parse_invoke(parsed_tool_call* call) {
        p_ += tags_.open_invoke.size();
        detail::attr_list attrs;
        if (!read_tag(&attrs, "invoke")) return false;
        const std::string* name = detail::find_attr(attrs, "name");
        if (!name) return fail(parse_status::malformed, p_, "invoke tag without a name attribute");
        call->name = *name;
        std::vector<std::pair<std::string, std::string>> args;
        while (true) {
            skip_ws();
            if (p_ >= text_.size()) return fail_eof("invoke not closed");
            if (at(tags_.close_invoke)) {
                p_ += tags_.close_invoke.size();
                break;
            }
            if (!parse_param(0, &args)) return false;
        }
        call->arguments = build_object(args);
        return true;
    }

    bool parse_param(int depth, std::vector<std::pair<std::string, std::string>>* args) {
        if (!at(tags_.open_param)) {
            return fail_unexpected("expected a parameter tag or the closing invoke tag");
        }
        p_ += tags_.open_param.size();
        detail::attr_list attrs;
        if (!read_tag(&attrs, "parameter")) return false;
        const std::string* key = detail::find_attr(attrs, "name");
        if (!key)
            return fail(parse_status::malformed, p_, "parameter tag without a name attribute");
        const std::string* str = detail::find_attr(attrs, "string");

        if (!str) {
            // Recovery for a known slip: parameters written inside a parameter that has no
            // string attribute are collected into a JSON object.
            size_t q = p_;
            while (q < text_.size() && is_ascii_ws(text_[q])) ++q;
            if (text_.substr(q, tags_.open_param.size()) == tags_.open_param) {
                if (depth >= kMaxParamNesting) {
                    return fail(parse_status::malformed, q, "parameters nested too deeply");
                }
                p_ = q;
                std::vector<std::pair<std::string, std::string>> members;
                while (true) {
                    skip_ws();
                    if (!at(tags_.open_param)) break;
                    if (!parse_param(depth + 1, &members)) return false;
                }
                skip_ws();
                if (at(tags_.close_param)) p_ += tags_.close_param.size();
                args->emplace_back(*key, build_object(members));
                return true;
            }
        }

        size_t end = text_.find(tags_.close_param, p_);
        if (end == std::string_view::npos) return fail_eof("parameter value not closed");
        std::string_view value = text_.substr(p_, end - p_);
        p_ = end + tags_.close_param.size();
        if (!str || *str == "true") {
            args->emplace_back(*key, json_quote(entity_unescape(value)));
        } else {
            std::string minified = json_minify(value);
            args->emplace_back(*key, minified.empty() ? std::string("null") : minified);
        }
        return true;
    }

    // After a tag name: attributes up to the next '>'.
    bool read_tag(detail::attr_list* attrs, const char* what) {
        if (p_ >= text_.size()) return fail_eof("tag not finished");
        if (!detail::tag_name_ends(text_[p_])) {
            return fail(parse_status::malformed, p_,
                        std::string("unexpected text after the ") + what + " tag name");
        }
        size_t gt = text_.find('>', p_);
        if (gt == std::string_view::npos) return fail_eof("tag not finished");
        if (!detail::parse_attrs(text_.substr(p_, gt - p_), attrs)) {
            return fail(parse_status::malformed, p_,
                        std::string("bad attributes in the ") + what + " tag");
        }
        p_ = gt + 1;
        return true;
    }

    void skip_ws() {
        while (p_ < text_.size() && is_ascii_ws(text_[p_])) ++p_;
    }

    bool at(std::string_view s) const { return text_.substr(p_, s.size()) == s; }

    // Unexpected bytes: the text ending in the middle of any marker of the block is an
    // unterminated block (more bytes could make it valid), anything else is malformed.
    bool fail_unexpected(const char* msg) {
        std::string_view rest = text_.substr(p_);
        for (std::string_view e :
             {std::string_view(tags_.close_tc), std::string_view(tags_.open_invoke),
              std::string_view(tags_.close_invoke), std::string_view(tags_.open_param),
              std::string_view(tags_.close_param)}) {
            if (rest.size() < e.size() && e.substr(0, rest.size()) == rest) {
                return fail_eof("text ends inside a tag");
            }
        }
        return fail(parse_status::malformed, p_, msg);
    }

    bool fail_eof(const char* msg) { return fail(parse_status::unterminated, text_.size(), msg); }

    bool fail(parse_status st, size_t offset, std::string msg) {
        status_ = st;
        error_offset_ = offset;
        error_ = std::move(msg);
        return false;
    }

    std::string_view text_;
    size_t p_;
    const detail::dsml_tags& tags_;
    parse_status status_ = parse_status::ok;
    std::string error_;
    size_t error_offset_ = 0;
};

}  // namespace

const char* parse_status_name(parse_status s) {
    switch (s) {
        case parse_status::no_tool_calls:
            return "no_tool_calls";
        case parse_status::ok:
            return "ok";
        case parse_status::malformed:
            return "malformed";
        case parse_status::unterminated:
            return "unterminated";
    }
    return "?";
}

void split_reasoning(std::string_view text, bool thinking, std::optional<std::string>* reasoning,
                     std::string* content) {
    if (text.substr(0, kThinkStart.size()) == kThinkStart) text.remove_prefix(kThinkStart.size());
    size_t end = text.find(kThinkEnd);
    if (end != std::string_view::npos) {
        *reasoning = std::string(text.substr(0, end));
        *content = std::string(text.substr(end + kThinkEnd.size()));
    } else if (thinking) {
        // The prompt opened <think>: everything so far is reasoning (a generation cut short
        // inside its reasoning has no visible content yet).
        *reasoning = std::string(text);
        content->clear();
    } else {
        reasoning->reset();
        *content = std::string(text);
    }
}

parse_result parse_tool_calls(std::string_view text, bool thinking) {
    parse_result r;
    size_t search_from = 0;
    if (thinking) {
        size_t t = text.rfind(kThinkEnd);
        if (t == std::string_view::npos) {
            split_reasoning(text, thinking, &r.reasoning, &r.content);
            return r;
        }
        search_from = t + kThinkEnd.size();
    }

    const start_pattern* found = nullptr;
    size_t start = std::string_view::npos;
    for (const auto& pat : kStartPatterns) {
        start = text.find(pat.text, search_from);
        if (start != std::string_view::npos) {
            found = &pat;
            break;
        }
    }
    if (!found) {
        split_reasoning(text, thinking, &r.reasoning, &r.content);
        return r;
    }

    r.tool_start = start;
    r.variant = found->variant;
    block_parser parser(text, start + found->text.size(), found->variant);
    std::vector<parsed_tool_call> calls;
    if (!parser.parse(&calls)) {
        r.status = parser.status();
        r.error = parser.error();
        r.error_offset = parser.error_offset();
        r.partial_calls = std::move(calls);
        split_reasoning(text, thinking, &r.reasoning, &r.content);
        return r;
    }

    size_t content_end = start;
    while (content_end > 0 && is_ascii_ws(text[content_end - 1])) --content_end;
    r.status = parse_status::ok;
    r.calls = std::move(calls);
    r.raw_dsml = std::string(text.substr(start, parser.pos() - start));
    split_reasoning(text.substr(0, content_end), thinking, &r.reasoning, &r.content);
    return r;
}

}  // namespace magnetar::chat
