// The agent loop: see agent.h.
#include "agent/agent.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "chat/chat_tokens.h"
#include "chat/dsml.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::agent {

namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

const tokenizer& vocab_of(const Engine& e) {
    if (!e.vocab()) throw Error("the agent needs a model with a tokenizer");
    return *e.vocab();
}

void ok_or_throw(const status& st) {
    if (!st.ok()) throw Error(st.message());
}

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

constexpr const char* kSummaryRequest =
    "The context is nearly full, so the conversation will be compacted. Write a summary that "
    "lets you continue the work without the earlier messages: the task and what the user "
    "asked for, decisions made, files read or changed and what matters in them, commands run "
    "and their outcomes, and what is left to do. Do not call a tool.";

}  // namespace

std::string result_header(const std::string& name, const nlohmann::ordered_json& args, bool ok,
                          size_t index, size_t count) {
    std::string head = "[";
    if (count > 1) head += std::to_string(index + 1) + "/" + std::to_string(count) + " ";
    head += name;
    std::string pairs;
    for (const auto& [k, v] : args.items()) {
        std::string s = v.is_string() ? v.get<std::string>() : v.dump();
        for (char& c : s)
            if (c == '\n' || c == '\r' || c == '\t') c = ' ';
        if (s.size() > 60) s = s.substr(0, 57) + "...";
        pairs += (pairs.empty() ? "" : ", ") + k + "=" + s;
    }
    if (!pairs.empty()) head += " " + pairs;
    return head + (ok ? ": ok]\n" : ": error]\n");
}

agent::agent(const Engine& engine, agent_tools& tools, agent_options opts)
    : engine_(engine),
      tools_(tools),
      opts_(std::move(opts)),
      t_(fresh_conversation()),
      sampler_(opts_.sampling, engine.info().n_vocab) {
    if (opts_.reserve <= 0) opts_.reserve = opts_.n_ctx / 4;
    if (opts_.summary_tokens <= 0) opts_.summary_tokens = std::max<int64_t>(64, opts_.n_ctx / 8);
    if (static_cast<int64_t>(t_.tokens().size()) + opts_.reserve >= opts_.n_ctx) {
        throw Error("the agent's system prompt and tool contract take " +
                    std::to_string(t_.tokens().size()) + " tokens: a context of " +
                    std::to_string(opts_.n_ctx) + " leaves too little room (raise -c)");
    }
    session_options so;
    so.n_ctx = opts_.n_ctx;
    so.chunk_size = opts_.chunk;
    ok_or_throw(engine.create_session(so, &session_));
}

agent::~agent() = default;

transcript agent::fresh_conversation() const {
    return transcript(vocab_of(engine_),
                      agent_preamble(tools_.space().root().string()) +
                          (opts_.system.empty() ? "" : "\n\n" + opts_.system),
                      opts_.mode, static_cast<uint64_t>(opts_.n_ctx));
}

void agent::set_conversation(transcript t) {
    t_ = std::move(t);
}

bool agent::room_for(int64_t need) const {
    return static_cast<int64_t>(t_.tokens().size()) + need <= opts_.n_ctx;
}

status agent::catch_up(const eval_options& eo) {
    const auto t0 = clock_type::now();
    last_ = {};
    const std::vector<int32_t>& want = t_.tokens();
    const int64_t base = static_cast<int64_t>(t_.base_tokens());
    // The system prompt's end is kept as a checkpoint, so that a new conversation or a
    // compacted one goes back to it instead of evaluating it again.
    const std::vector<int64_t> held = session_->checkpoint_positions();
    if (std::find(held.begin(), held.end(), base) == held.end() &&
        session_->common_prefix(want) < base) {
        sync_result sr;
        const status st = session_->sync(std::span(want).first(static_cast<size_t>(base)), eo, &sr);
        last_.prefilled += sr.evaluated;
        if (!st.ok()) {
            last_.prefill_s = seconds_since(t0);
            return st;
        }
        ok_or_throw(session_->checkpoint());
    }
    sync_result sr;
    const status st = session_->sync(want, eo, &sr);
    last_.prefilled += sr.evaluated;
    last_.prefill_s = seconds_since(t0);
    return st;
}

void agent::sync(const agent_events& ev) {
    eval_options eo;
    eo.progress = ev.prefill;
    eo.cancel = ev.cancel;
    ok_or_throw(catch_up(eo));
}

chat::message agent::reply(const agent_events& ev, int64_t max_tokens, bool* interrupted) {
    *interrupted = false;
    eval_options eo;
    eo.progress = ev.prefill;
    eo.cancel = ev.cancel;
    const status st = catch_up(eo);
    if (st.code() == status_code::cancelled) {
        *interrupted = true;
        return t_.add_reply({}, "");
    }
    ok_or_throw(st);
    if (ev.trace) {
        ev.trace({{"event", "prefill"},
                  {"tokens", last_.prefilled},
                  {"n_past", session_->n_past()},
                  {"seconds", last_.prefill_s}});
    }

    const int32_t eos = vocab_of(engine_).specials().eos;
    chat::stream_options so;
    so.thinking = t_.thinking();
    chat::dsml_stream stream(so);
    std::vector<chat::stream_event> events;
    std::vector<int32_t> tokens;
    std::string bytes;
    eval_options step;
    step.cancel = ev.cancel;
    const auto t1 = clock_type::now();
    sampler_.clear_history();
    const bool greedy = opts_.sampling.temperature <= 0 && !has_penalties(opts_.sampling);
    while (static_cast<int64_t>(tokens.size()) < max_tokens) {
        if (ev.cancel && ev.cancel()) {
            *interrupted = true;
            break;
        }
        const int32_t id = greedy ? session_->argmax() : session_->sample(sampler_);
        sampler_.accept(id);
        if (id == eos) break;
        tokens.push_back(id);
        if (ev.token) ev.token(static_cast<int64_t>(tokens.size()), seconds_since(t1));
        const std::string b = engine_.token_bytes(id);
        bytes += b;
        events.clear();
        stream.feed(b, &events);
        if (ev.stream)
            for (const chat::stream_event& e : events) ev.stream(e);
        // The block is closed: what the model would write after it is not part of the reply.
        if (stream.tool_block_done()) break;
        if (static_cast<int64_t>(tokens.size()) >= max_tokens) break;
        const status es = session_->eval({&id, 1}, step);
        if (es.code() == status_code::cancelled) {
            *interrupted = true;
            break;
        }
        ok_or_throw(es);
    }
    events.clear();
    stream.finish(&events);
    if (ev.stream)
        for (const chat::stream_event& e : events) ev.stream(e);
    last_.generated = static_cast<int64_t>(tokens.size());
    last_.decode_s = seconds_since(t1);
    chat::message m = t_.add_reply(tokens, bytes);
    if (ev.trace) {
        ev.trace({{"event", "reply"},
                  {"tokens", tokens.size()},
                  {"seconds", last_.decode_s},
                  {"text", bytes},
                  {"interrupted", *interrupted}});
    }
    return m;
}

turn_result agent::turn(const std::string& user_text, const agent_events& ev) {
    turn_result r;
    // A round interrupted after its results went in leaves an opening without a reply: it is
    // closed by an empty one, so the results stay in the conversation.
    if (t_.awaiting_reply()) t_.add_reply({}, "");
    // Room for the message itself and a reply; compaction first when there is not.
    if (!room_for(opts_.reserve)) r.compacted = compact_now(ev, false) || r.compacted;
    t_.add_user(user_text);
    if (ev.trace) ev.trace({{"event", "user"}, {"text", user_text}});
    if (!room_for(std::min<int64_t>(opts_.reserve, 64))) {
        throw Error("the message does not fit the context (" + std::to_string(t_.tokens().size()) +
                    " of " + std::to_string(opts_.n_ctx) + " tokens)");
    }
    while (true) {
        // Keep room for </think> and EOS after the reply.
        const int64_t free = opts_.n_ctx - static_cast<int64_t>(t_.tokens().size()) - 3;
        const int64_t budget = std::min<int64_t>(opts_.max_reply_tokens, free);
        bool interrupted = false;
        const chat::message m = reply(ev, budget, &interrupted);
        ++r.steps;
        r.total.prefilled += last_.prefilled;
        r.total.generated += last_.generated;
        r.total.prefill_s += last_.prefill_s;
        r.total.decode_s += last_.decode_s;
        r.answer = m.content;
        if (interrupted) {
            r.interrupted = true;
            return r;
        }
        if (last_.generated >= budget && budget < opts_.max_reply_tokens && ev.note) {
            ev.note("the reply reached the end of the context");
        }
        std::vector<std::string> results;
        if (m.tool_calls.empty()) {
            // A block that opened but did not parse: say so to the model, once per step.
            const chat::parse_result p =
                chat::parse_tool_calls(m.content + m.raw_dsml.value_or(""), false);
            if (p.status != chat::parse_status::malformed &&
                p.status != chat::parse_status::unterminated) {
                return r;
            }
            const std::string why = "[error] the tool call block could not be read (" +
                                    std::string(chat::parse_status_name(p.status)) + ": " +
                                    p.error + "); write the whole block again";
            if (ev.note) ev.note(why);
            results.push_back(why);
        } else {
            run_calls(m, ev, &r, &results);
        }
        if (r.steps >= opts_.max_steps) {
            r.step_limit = true;
            if (ev.note) {
                ev.note("stopped after " + std::to_string(r.steps) +
                        " steps (--max-steps); the results were not sent");
            }
            return r;
        }
        // The results and the next reply need room; compact before adding them.
        int64_t result_tokens = 0;
        for (const std::string& s : results) {
            std::vector<int32_t> ids;
            ok_or_throw(engine_.tokenize(s, false, &ids));
            result_tokens += static_cast<int64_t>(ids.size()) + 4;
        }
        if (!room_for(result_tokens + opts_.reserve)) {
            r.compacted = compact_now(ev, true) || r.compacted;
            if (!room_for(result_tokens + 64)) {
                throw Error("the tool results (" + std::to_string(result_tokens) +
                            " tokens) do not fit the context even after compaction");
            }
        }
        t_.add_tool_results(results);
        if (ev.trace) ev.trace({{"event", "tool_results"}, {"results", results}});
        if (ev.cancel && ev.cancel()) {
            r.interrupted = true;
            return r;
        }
    }
}

void agent::run_calls(const chat::message& m, const agent_events& ev, turn_result* r,
                      std::vector<std::string>* results) {
    const size_t n = m.tool_calls.size();
    for (size_t i = 0; i < n; ++i) {
        const chat::tool_call& c = m.tool_calls[i];
        nlohmann::ordered_json args;
        try {
            args = nlohmann::ordered_json::parse(c.arguments);
        } catch (const std::exception&) {
            args = nlohmann::ordered_json::object();
        }
        if (ev.tool_start) ev.tool_start(c.name, args);
        const tool_result res = tools_.call(c.name, args);
        ++r->calls;
        if (ev.tool_end) ev.tool_end(c.name, res);
        results->push_back(result_header(c.name, args, res.ok, i, n) + res.text);
        if (ev.trace) {
            ev.trace({{"event", "tool"},
                      {"name", c.name},
                      {"arguments", json::parse(args.dump())},
                      {"ok", res.ok},
                      {"result", res.text}});
        }
    }
}

bool agent::compact(const agent_events& ev) {
    return compact_now(ev, false);
}

bool agent::compact_now(const agent_events& ev, bool keep_last_reply) {
    const std::vector<chat::message>& msgs = t_.messages();
    if (msgs.size() < 2 || t_.awaiting_reply()) return false;
    // The tail starts at the latest user message.
    size_t last_user = 0;
    for (size_t i = msgs.size(); i-- > 1;) {
        if (msgs[i].role == chat::role::user) {
            last_user = i;
            break;
        }
    }
    if (last_user == 0) return false;
    if (ev.note)
        ev.note("compacting the conversation (context " + std::to_string(t_.tokens().size()) +
                " of " + std::to_string(opts_.n_ctx) + " tokens)");

    // The summary, as a reply to a request appended to the live transcript (nothing before
    // it is evaluated again). Without room for it, the oldest turns are simply dropped.
    transcript before = t_;
    std::string summary;
    if (room_for(opts_.summary_tokens + 128)) {
        t_.add_user(kSummaryRequest);
        bool interrupted = false;
        agent_events quiet = ev;
        quiet.stream = nullptr;
        const chat::message m = reply(quiet, opts_.summary_tokens, &interrupted);
        if (interrupted) {
            t_ = std::move(before);
            return false;
        }
        summary = m.content;
        const chat::parse_result p = chat::parse_tool_calls(summary, false);
        if (p.tool_start != std::string::npos) summary = p.content;
    }
    if (summary.empty()) summary = "(no summary could be written)";

    std::string head =
        "[The earlier conversation was compacted to fit the context. Summary:]\n" + summary;
    const std::vector<int> jobs = tools_.jobs().running();
    if (!jobs.empty()) {
        head += "\n\n[Shell jobs still running:";
        for (const int id : jobs) head += " " + std::to_string(id);
        head += " (bash_status shows their output)]";
    }

    // The tail: the latest user message, then what followed it when it fits a quarter of the
    // context; otherwise only the reply whose calls are being answered (keep_last_reply).
    const std::vector<chat::message>& old = before.messages();
    std::vector<chat::message> tail(old.begin() + static_cast<long>(last_user), old.end());
    int64_t tail_bytes = 0;
    for (const chat::message& m : tail) {
        tail_bytes += static_cast<int64_t>(m.content.size() + m.reasoning_content.size() +
                                           m.raw_dsml.value_or("").size());
    }
    // About three bytes a token in this vocabulary's English and code.
    if (tail_bytes / 3 > opts_.n_ctx / 4) {
        std::vector<chat::message> keep{tail.front()};
        if (keep_last_reply && tail.size() > 1) keep.push_back(tail.back());
        tail = std::move(keep);
    }
    chat::message first = tail.front();
    const size_t max_user = static_cast<size_t>(opts_.n_ctx / 8) * 3;
    if (first.content.size() > max_user) {
        first.content =
            first.content.substr(0, max_user) + "\n[... the rest of the message was cut]";
    }
    first.content = head + "\n\n[The latest message:]\n" + first.content;
    tail.front() = std::move(first);

    std::vector<chat::message> rebuilt{old.front()};
    rebuilt.insert(rebuilt.end(), tail.begin(), tail.end());
    t_ = transcript::from_messages(vocab_of(engine_), std::move(rebuilt), t_.mode(),
                                   static_cast<uint64_t>(opts_.n_ctx));
    if (ev.trace) {
        ev.trace({{"event", "compact"},
                  {"summary", summary},
                  {"tokens_before", before.tokens().size()},
                  {"tokens_after", t_.tokens().size()}});
    }
    if (ev.note) {
        ev.note("compacted: " + std::to_string(before.tokens().size()) + " -> " +
                std::to_string(t_.tokens().size()) + " tokens");
    }
    return true;
}

}  // namespace magnetar::agent
