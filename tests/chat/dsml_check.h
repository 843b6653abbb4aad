// Shared by the DSML tests and the DSML fuzz target: runs the streaming projection over a
// split of the input, and checks it against the authoritative parse where the protocol says
// the two must agree. Header-only so the fuzz target can use it without the test library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "chat/dsml.h"
#include "chat/dsml_internal.h"
#include "chat/dsml_stream.h"
#include "chat/json_text.h"

namespace magnetar::chat::check {

// Everything a stream produced, with deltas concatenated per kind.
struct stream_outcome {
    std::string reasoning;
    std::string content;
    std::vector<streamed_call> calls;
    std::vector<stream_event> events;
    bool failed = false;
    bool done = false;
    std::string error;
};

// Feeds `text` cut at the given ascending offsets, then finishes. Ids are deterministic so
// two runs over different splits are comparable.
inline stream_outcome run_stream(std::string_view text, bool thinking,
                                 const std::vector<size_t>& cuts) {
    stream_options o;
    o.thinking = thinking;
    int counter = 0;
    o.make_id = [&counter] { return "call_" + std::to_string(counter++); };
    dsml_stream s(o);
    stream_outcome r;
    size_t prev = 0;
    for (size_t cut : cuts) {
        s.feed(text.substr(prev, cut - prev), &r.events);
        prev = cut;
    }
    s.feed(text.substr(prev), &r.events);
    s.finish(&r.events);
    for (const auto& e : r.events) {
        if (e.kind == stream_event_kind::reasoning) r.reasoning += e.text;
        if (e.kind == stream_event_kind::text) r.content += e.text;
    }
    r.calls = s.calls();
    r.failed = s.failed();
    r.done = s.tool_block_done();
    r.error = s.error();
    return r;
}

inline size_t count_of(std::string_view s, std::string_view needle) {
    size_t n = 0;
    for (size_t p = s.find(needle); p != std::string_view::npos; p = s.find(needle, p + 1)) ++n;
    return n;
}

// Whether the protocol promises that the stream and the final parse agree on `text`: one
// reasoning end at most (the final parse searches after the last one, the stream after the
// first), at most one tool block opener of any variant (the final parse prefers variants in
// a fixed order, the stream takes the earliest), and without thinking no think markers at
// all (the final parse splits reasoning out of plain text, a stream cannot take text back).
inline bool comparable(std::string_view text, bool thinking) {
    size_t openers = 0;
    for (dsml_variant v : {dsml_variant::full, dsml_variant::short_form, dsml_variant::plain}) {
        openers += count_of(text, detail::tags_for(v).open_tc);
    }
    if (openers > 1) return false;
    if (thinking) return count_of(text, "</think>") <= 1;
    return count_of(text, "<think>") == 0 && count_of(text, "</think>") == 0;
}

// A parameter tag without a string attribute inside `raw_dsml` (the stream stops there, the
// final parse recovers).
inline bool has_param_without_string(std::string_view raw_dsml, dsml_variant v) {
    const auto& tags = detail::tags_for(v);
    for (size_t p = raw_dsml.find(tags.open_param); p != std::string_view::npos;
         p = raw_dsml.find(tags.open_param, p + 1)) {
        size_t attrs_at = p + tags.open_param.size();
        size_t gt = raw_dsml.find('>', attrs_at);
        if (gt == std::string_view::npos) return true;
        detail::attr_list attrs;
        if (!detail::parse_attrs(raw_dsml.substr(attrs_at, gt - attrs_at), &attrs) ||
            !detail::find_attr(attrs, "string")) {
            return true;
        }
    }
    return false;
}

// Streamed arguments pass JSON values through as written while the final parse minifies
// them; whenever the streamed text is valid JSON the two must be the same JSON value.
inline bool same_json(const std::string& streamed, const std::string& parsed) {
    auto js = nlohmann::ordered_json::parse(streamed, nullptr, false);
    if (js.is_discarded()) return true;  // invalid as streamed: nothing promised
    auto jp = nlohmann::ordered_json::parse(parsed, nullptr, false);
    return !jp.is_discarded() && js == jp;
}

// Structural invariants of any event sequence: per call, the header comes first, then its
// argument deltas (which concatenate to its arguments), then its end; calls in index order;
// nothing after an error.
inline std::string check_events(const stream_outcome& s) {
    std::vector<std::string> args(s.calls.size());
    size_t started = 0;
    bool open = false;
    bool errored = false;
    for (const auto& e : s.events) {
        if (errored) return "event after tool_error";
        switch (e.kind) {
            case stream_event_kind::reasoning:
            case stream_event_kind::text:
                if (open || started) return "text after a tool call started";
                if (e.text.empty()) return "empty text delta";
                break;
            case stream_event_kind::tool_call_start:
                if (open || e.index != started) return "tool header out of order";
                open = true;
                ++started;
                break;
            case stream_event_kind::tool_call_arguments:
                if (!open || e.index + 1 != started) return "argument delta outside its call";
                if (e.text.empty()) return "empty argument delta";
                args[e.index] += e.text;
                break;
            case stream_event_kind::tool_call_end:
                if (!open || e.index + 1 != started) return "tool end out of order";
                open = false;
                break;
            case stream_event_kind::tool_error:
                errored = true;
                break;
        }
    }
    if (started != s.calls.size()) return "call count differs from headers";
    for (size_t i = 0; i < s.calls.size(); ++i) {
        if (args[i] != s.calls[i].arguments) return "argument deltas differ from the call";
        for (size_t j = 0; j < i; ++j) {
            if (s.calls[i].id == s.calls[j].id) return "duplicate call id";
        }
    }
    return {};
}

// Empty when the stream agrees with the final parse as far as the protocol promises.
inline std::string check_against_parse(std::string_view text, bool thinking, const parse_result& p,
                                       const stream_outcome& s) {
    if (std::string err = check_events(s); !err.empty()) return err;
    if (!comparable(text, thinking)) return {};
    switch (p.status) {
        case parse_status::no_tool_calls:
            if (!s.calls.empty() || s.failed) return "stream saw a tool block the parse did not";
            if (s.content != p.content) return "content differs (no calls)";
            if (s.reasoning != p.reasoning.value_or("")) return "reasoning differs (no calls)";
            return {};
        case parse_status::malformed:
        case parse_status::unterminated:
            if (!s.failed) return "parse failed but the stream did not";
            return {};
        case parse_status::ok:
            break;
    }
    if (s.failed) {
        if (has_param_without_string(p.raw_dsml, p.variant)) return {};
        return "stream failed on a block the parse accepted: " + s.error;
    }
    if (!s.done) return "stream did not finish the block";
    if (s.content != p.content) return "content differs";
    if (s.reasoning != p.reasoning.value_or("")) return "reasoning differs";
    if (s.calls.size() != p.calls.size()) return "call count differs";
    for (size_t i = 0; i < s.calls.size(); ++i) {
        if (!s.calls[i].complete) return "incomplete streamed call";
        if (s.calls[i].name != p.calls[i].name) return "call name differs";
        if (!same_json(s.calls[i].arguments, p.calls[i].arguments)) return "arguments differ";
    }
    return {};
}

}  // namespace magnetar::chat::check

namespace magnetar::chat::check {

// One fuzz input: byte 0 picks thinking mode and seeds the split positions, the rest is the
// generated text. Runs the final parse, the stream over several splits (one feed, pseudo-random
// cuts, byte by byte for short inputs) and a render -> parse round trip of the parsed calls.
// Returns a description of the first broken promise, or empty.
inline std::string fuzz_one(const uint8_t* data, size_t size) {
    if (size == 0) return {};
    const bool thinking = (data[0] & 1) != 0;
    uint32_t seed = data[0];
    std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

    parse_result p = parse_tool_calls(text, thinking);
    if (p.status == parse_status::ok) {
        std::vector<tool_call> calls;
        for (const auto& c : p.calls) {
            (void)compact_json_object(c.arguments);
            calls.push_back({c.id, c.name, c.arguments});
        }
        parse_result again = parse_tool_calls(render_tool_calls(calls), false);
        if (calls.empty()) {
            if (again.status != parse_status::no_tool_calls) return "empty render parsed";
        } else {
            if (again.status != parse_status::ok)
                return "rendered calls do not parse: " + again.error;
            if (again.calls.size() != calls.size()) return "round trip changed the call count";
            for (size_t i = 0; i < calls.size(); ++i) {
                if (again.calls[i].name != calls[i].name) return "round trip changed a name";
            }
        }
    }

    stream_outcome whole = run_stream(text, thinking, {});
    if (std::string err = check_against_parse(text, thinking, p, whole); !err.empty()) {
        return "one feed: " + err;
    }
    std::vector<std::vector<size_t>> splits;
    for (int trial = 0; trial < 3; ++trial) {
        std::vector<size_t> cuts;
        size_t pos = 0;
        while (true) {
            seed = seed * 1103515245u + 12345u;
            pos += 1 + (seed >> 16) % 13;
            if (pos >= text.size()) break;
            cuts.push_back(pos);
        }
        splits.push_back(cuts);
    }
    if (text.size() <= 512) {
        std::vector<size_t> cuts;
        for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
        splits.push_back(cuts);
    }
    for (const auto& cuts : splits) {
        stream_outcome s = run_stream(text, thinking, cuts);
        if (s.reasoning != whole.reasoning || s.content != whole.content ||
            s.failed != whole.failed || s.done != whole.done ||
            s.calls.size() != whole.calls.size()) {
            return "split changed the stream result";
        }
        for (size_t i = 0; i < s.calls.size(); ++i) {
            if (s.calls[i].name != whole.calls[i].name ||
                s.calls[i].arguments != whole.calls[i].arguments ||
                s.calls[i].complete != whole.calls[i].complete) {
                return "split changed a streamed call";
            }
        }
        if (std::string err = check_against_parse(text, thinking, p, s); !err.empty()) {
            return "split: " + err;
        }
    }
    return {};
}

}  // namespace magnetar::chat::check
