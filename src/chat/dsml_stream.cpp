// Streaming projection: see dsml_stream.h. All state lives in the phase / block state and
// the unprojected tail buf_; each step either consumes a prefix of buf_ (emitting events) or
// reports that it needs more bytes, so any split of the input reaches the same states.
#include "chat/dsml_stream.h"

#include <algorithm>

#include "chat/chat_tokens.h"
#include "chat/dsml_internal.h"
#include "chat/json_text.h"
#include "chat/tool_id.h"

namespace magnetar::chat {

namespace {

using detail::is_ascii_ws;

constexpr dsml_variant kVariants[] = {dsml_variant::full, dsml_variant::short_form,
                                      dsml_variant::plain};

bool starts_with(std::string_view s, std::string_view prefix) {
    return s.substr(0, prefix.size()) == prefix;
}

// `s` is a non-empty proper prefix of `marker` (more bytes could still complete it).
bool is_partial(std::string_view s, std::string_view marker) {
    return !s.empty() && s.size() < marker.size() && starts_with(marker, s);
}

}  // namespace

const char* stream_event_kind_name(stream_event_kind k) {
    switch (k) {
        case stream_event_kind::reasoning:
            return "reasoning";
        case stream_event_kind::text:
            return "text";
        case stream_event_kind::tool_call_start:
            return "tool_call_start";
        case stream_event_kind::tool_call_arguments:
            return "tool_call_arguments";
        case stream_event_kind::tool_call_end:
            return "tool_call_end";
        case stream_event_kind::tool_error:
            return "tool_error";
    }
    return "?";
}

dsml_stream::dsml_stream(stream_options options) : options_(std::move(options)) {
    if (!options_.make_id) options_.make_id = [] { return make_tool_id(id_style::openai); };
}

std::vector<stream_event> dsml_stream::feed(std::string_view bytes) {
    std::vector<stream_event> out;
    feed(bytes, &out);
    return out;
}

std::vector<stream_event> dsml_stream::finish() {
    std::vector<stream_event> out;
    finish(&out);
    return out;
}

void dsml_stream::feed(std::string_view bytes, std::vector<stream_event>* out) {
    if (finishing_) return;
    if (phase_ == phase::done || phase_ == phase::error) return;  // the rest is ignored
    buf_.append(bytes);
    while (step(out)) {
    }
}

void dsml_stream::finish(std::vector<stream_event>* out) {
    if (finishing_) return;
    finishing_ = true;
    while (step(out)) {
    }
    switch (phase_) {
        case phase::start:
        case phase::reasoning:
            emit_text(stream_event_kind::reasoning, buf_, out);
            break;
        case phase::content:
            emit_text(stream_event_kind::text, buf_, out);
            break;
        case phase::tool_block:
            fail("unterminated tool call", out);
            break;
        case phase::done:
        case phase::error:
            break;
    }
    buf_.clear();
}

bool dsml_stream::step(std::vector<stream_event>* out) {
    switch (phase_) {
        case phase::start:
            return step_start();
        case phase::reasoning:
            return step_reasoning(out);
        case phase::content:
            return step_content(out);
        case phase::tool_block:
            switch (state_) {
                case block_state::between_invokes:
                    return step_between_invokes(out);
                case block_state::between_params:
                    return step_between_params(out);
                case block_state::param_value:
                    return step_param_value(out);
            }
            return false;
        case phase::done:
        case phase::error:
            buf_.clear();
            return false;
    }
    return false;
}

// A leading <think> is dropped (the authoritative split does the same) and starts reasoning
// even when thinking is off.
bool dsml_stream::step_start() {
    if (!finishing_ && is_partial(buf_, kThinkStart)) return false;
    if (buf_.empty() && !finishing_) return false;
    if (starts_with(buf_, kThinkStart)) {
        buf_.erase(0, kThinkStart.size());
        phase_ = phase::reasoning;
    } else {
        phase_ = options_.thinking ? phase::reasoning : phase::content;
    }
    return true;
}

bool dsml_stream::step_reasoning(std::vector<stream_event>* out) {
    size_t end = buf_.find(kThinkEnd);
    if (end != std::string::npos) {
        emit_text(stream_event_kind::reasoning, std::string_view(buf_).substr(0, end), out);
        buf_.erase(0, end + kThinkEnd.size());
        phase_ = phase::content;
        return true;
    }
    if (finishing_) return false;
    std::string_view b(buf_);
    size_t n = b.size() - partial_marker_suffix(b, kThinkEnd);
    n -= incomplete_utf8_suffix(b.substr(0, n));
    emit_text(stream_event_kind::reasoning, b.substr(0, n), out);
    buf_.erase(0, n);
    return false;
}

bool dsml_stream::step_content(std::vector<stream_event>* out) {
    std::string_view b(buf_);
    if (options_.detect_tool_calls) {
        size_t best = std::string::npos;
        dsml_variant best_variant = dsml_variant::full;
        for (dsml_variant v : kVariants) {
            size_t p = b.find(detail::tags_for(v).open_tc);
            if (p < best) {
                best = p;
                best_variant = v;
            }
        }
        if (best != std::string::npos) {
            // Whitespace before the block is the separator, never content.
            size_t n = best;
            while (n > 0 && is_ascii_ws(b[n - 1])) --n;
            emit_text(stream_event_kind::text, b.substr(0, n), out);
            buf_.erase(0, best + detail::tags_for(best_variant).open_tc.size());
            variant_ = best_variant;
            phase_ = phase::tool_block;
            state_ = block_state::between_invokes;
            block_started_ = true;
            return true;
        }
    }
    if (finishing_) return false;
    size_t n = b.size();
    if (options_.detect_tool_calls) {
        size_t hold = 0;
        for (dsml_variant v : kVariants) {
            hold = std::max(hold, partial_marker_suffix(b, detail::tags_for(v).open_tc));
        }
        n -= hold;
        while (n > 0 && is_ascii_ws(b[n - 1])) --n;
    }
    n -= incomplete_utf8_suffix(b.substr(0, n));
    emit_text(stream_event_kind::text, b.substr(0, n), out);
    buf_.erase(0, n);
    return false;
}

// Reads the opening tag `open` (already known to start buf_) up to its '>': its attributes
// and the index of the '>'. need_more while the tag is still arriving (a long tag is scanned
// once, resuming at gt_scan_); failed after reporting a malformed tag.
dsml_stream::tag_read dsml_stream::read_open_tag(std::string_view open, const char* what,
                                                 detail::attr_list* attrs, size_t* gt,
                                                 std::vector<stream_event>* out) {
    std::string_view b(buf_);
    if (b.size() == open.size()) return tag_read::need_more;
    if (!detail::tag_name_ends(b[open.size()])) {
        fail(std::string("unexpected text after the ") + what + " tag name", out);
        return tag_read::failed;
    }
    const size_t end = b.find('>', std::max(open.size(), gt_scan_));
    if (end == std::string_view::npos) {
        gt_scan_ = b.size();
        return tag_read::need_more;
    }
    gt_scan_ = 0;
    if (!detail::parse_attrs(b.substr(open.size(), end - open.size()), attrs)) {
        fail(std::string("bad attributes in the ") + what + " tag", out);
        return tag_read::failed;
    }
    *gt = end;
    return tag_read::ok;
}

bool dsml_stream::step_between_invokes(std::vector<stream_event>* out) {
    const auto& tags = detail::tags_for(variant_);
    size_t ws = 0;
    while (ws < buf_.size() && is_ascii_ws(buf_[ws])) ++ws;
    buf_.erase(0, ws);
    std::string_view b(buf_);
    if (b.empty()) return false;
    if (starts_with(b, tags.close_tc)) {
        buf_.clear();
        phase_ = phase::done;
        return false;
    }
    if (starts_with(b, tags.open_invoke)) {
        detail::attr_list attrs;
        size_t gt = 0;
        const tag_read r = read_open_tag(tags.open_invoke, "invoke", &attrs, &gt, out);
        if (r != tag_read::ok) return false;
        const std::string* name = detail::find_attr(attrs, "name");
        if (!name) return fail("invoke tag without a name attribute", out);
        streamed_call call;
        call.id = fresh_id();
        call.name = *name;
        calls_.push_back(call);
        stream_event ev;
        ev.kind = stream_event_kind::tool_call_start;
        ev.index = calls_.size() - 1;
        ev.id = call.id;
        ev.name = call.name;
        out->push_back(std::move(ev));
        emit_arguments("{", out);
        buf_.erase(0, gt + 1);
        state_ = block_state::between_params;
        first_param_ = true;
        return true;
    }
    if (is_partial(b, tags.open_invoke) || is_partial(b, tags.close_tc)) return false;
    return fail("expected an invoke tag or the closing tool_calls tag", out);
}

bool dsml_stream::step_between_params(std::vector<stream_event>* out) {
    const auto& tags = detail::tags_for(variant_);
    size_t ws = 0;
    while (ws < buf_.size() && is_ascii_ws(buf_[ws])) ++ws;
    buf_.erase(0, ws);
    std::string_view b(buf_);
    if (b.empty()) return false;
    if (starts_with(b, tags.close_invoke)) {
        emit_arguments("}", out);
        calls_.back().complete = true;
        stream_event ev;
        ev.kind = stream_event_kind::tool_call_end;
        ev.index = calls_.size() - 1;
        out->push_back(std::move(ev));
        buf_.erase(0, tags.close_invoke.size());
        state_ = block_state::between_invokes;
        return true;
    }
    if (starts_with(b, tags.open_param)) {
        detail::attr_list attrs;
        size_t gt = 0;
        const tag_read r = read_open_tag(tags.open_param, "parameter", &attrs, &gt, out);
        if (r != tag_read::ok) return false;
        const std::string* key = detail::find_attr(attrs, "name");
        const std::string* str = detail::find_attr(attrs, "string");
        // Without the string attribute the value's encoding is unknown until the end (it may
        // be nested parameters); the projection stops and the final parse decides.
        if (!key || !str) return fail("parameter tag without name or string attribute", out);
        value_is_string_ = *str == "true";
        value_has_bytes_ = false;
        std::string head = first_param_ ? "" : ",";
        head += json_quote(*key);
        head += ':';
        if (value_is_string_) head += '"';
        emit_arguments(head, out);
        first_param_ = false;
        buf_.erase(0, gt + 1);
        state_ = block_state::param_value;
        return true;
    }
    if (is_partial(b, tags.open_param) || is_partial(b, tags.close_invoke)) return false;
    return fail("expected a parameter tag or the closing invoke tag", out);
}

bool dsml_stream::step_param_value(std::vector<stream_event>* out) {
    const auto& tags = detail::tags_for(variant_);
    std::string_view b(buf_);
    size_t end = b.find(tags.close_param);
    if (end != std::string_view::npos) {
        emit_value(b.substr(0, end), out);
        if (value_is_string_) {
            emit_arguments("\"", out);
        } else if (!value_has_bytes_) {
            emit_arguments("null", out);  // an empty JSON value reads as null, as in the parse
        }
        buf_.erase(0, end + tags.close_param.size());
        state_ = block_state::between_params;
        return true;
    }
    size_t n = b.size() - partial_marker_suffix(b, tags.close_param);
    if (value_is_string_) n -= partial_entity_suffix(b.substr(0, n));
    n -= incomplete_utf8_suffix(b.substr(0, n));
    emit_value(b.substr(0, n), out);
    buf_.erase(0, n);
    return false;
}

void dsml_stream::emit_text(stream_event_kind kind, std::string_view s,
                            std::vector<stream_event>* out) {
    if (s.empty()) return;
    stream_event ev;
    ev.kind = kind;
    ev.text = std::string(s);
    out->push_back(std::move(ev));
}

void dsml_stream::emit_arguments(std::string_view s, std::vector<stream_event>* out) {
    if (s.empty()) return;
    calls_.back().arguments.append(s);
    stream_event ev;
    ev.kind = stream_event_kind::tool_call_arguments;
    ev.index = calls_.size() - 1;
    ev.text = std::string(s);
    out->push_back(std::move(ev));
}

void dsml_stream::emit_value(std::string_view raw, std::vector<stream_event>* out) {
    if (raw.empty()) return;
    if (value_is_string_) {
        std::string body;
        append_json_string_body(body, entity_unescape(raw));
        emit_arguments(body, out);
        return;
    }
    for (char c : raw) {
        if (!is_ascii_ws(c)) value_has_bytes_ = true;
    }
    emit_arguments(raw, out);
}

bool dsml_stream::fail(std::string msg, std::vector<stream_event>* out) {
    phase_ = phase::error;
    error_ = msg;
    buf_.clear();
    stream_event ev;
    ev.kind = stream_event_kind::tool_error;
    ev.text = std::move(msg);
    ev.index = calls_.size();
    out->push_back(std::move(ev));
    return false;
}

std::string dsml_stream::fresh_id() {
    auto clashes = [&](const std::string& id) {
        if (id.empty()) return true;
        for (const auto& c : calls_) {
            if (c.id == id) return true;
        }
        return false;
    };
    std::string id = options_.make_id();
    for (int attempt = 0; clashes(id) && attempt < 64; ++attempt) id = options_.make_id();
    if (clashes(id)) id = make_tool_id(id_style::openai);
    return id;
}

void adopt_stream_ids(std::vector<parsed_tool_call>* calls,
                      const std::vector<streamed_call>& streamed) {
    for (size_t i = 0; i < calls->size() && i < streamed.size(); ++i) {
        parsed_tool_call& c = (*calls)[i];
        if (c.id.empty() && c.name == streamed[i].name) c.id = streamed[i].id;
    }
}

}  // namespace magnetar::chat
