// One request's generation: see decode_stream.h.
#include "server/decode_stream.h"

#include <algorithm>
#include <chrono>

#include "chat/dsml.h"
#include "chat/tool_id.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::server {

namespace {

chat::stream_options stream_options_of(const gen_request& r, chat::replay_map& replay) {
    chat::stream_options so;
    so.thinking = r.thinking;
    so.detect_tool_calls = r.tools;
    const chat::id_style style = r.id_style;
    so.make_id = [&replay, style] {
        std::string id;
        do {
            id = chat::make_tool_id(style);
        } while (replay.contains(id));
        return id;
    };
    return so;
}

}  // namespace

decode_stream::decode_stream(const stream_env& env, Session& s, job& j, gen_result* res)
    : env_(env),
      s_(s),
      j_(j),
      r_(j.req),
      res_(res),
      eos_(env.tok.specials().eos),
      smp_(j.req.sampling, static_cast<size_t>(s.n_vocab())),
      proj_(stream_options_of(j.req, env.replay)),
      speculate_(env.mtp_draft >= 2 && !j.req.forced_output && !j.req.forced_call) {
    for (const auto& st : r_.stops) max_stop_ = std::max(max_stop_, st.size());
    hold_ = max_stop_ > 0 ? max_stop_ - 1 : 0;
    if (r_.forced_output) env_.tok.encode_append(*r_.forced_output, true, forced_);
    // tool_choice: the tool-call block's opening, the markers as template text and the tool's
    // name as client text (never a control token).
    if (r_.forced_call) {
        env_.tok.encode_append(r_.forced_call->before, true, call_start_);
        env_.tok.encode_append(r_.forced_call->name, false, call_start_);
        env_.tok.encode_append(r_.forced_call->after, true, call_start_);
    }
    real_.raw = &res_->raw;
    real_.think_end = r_.thinking ? std::string::npos : size_t{0};
    sim_.raw = &sim_raw_;
    eo_.cancel = [this] { return j_.cancel.load() || (env_.abort && env_.abort->load()); };
    const int64_t every = env_.continued_every;
    if (every > 0)
        next_continued_ = (std::max(env_.continued_from, s_.n_past()) / every + 1) * every;
}

// Sampling parameters of the next token: greedy on DSML structure (visible text only), without
// penalties there (a tool call's syntax repeats itself by design).
sampling_params decode_stream::params_of(view& v) const {
    sampling_params p = r_.sampling;
    if (r_.tools && r_.kind == gen_kind::chat && v.think_end != std::string::npos) {
        if (syntax_is_greedy(v.tracker.update(std::string_view(*v.raw).substr(v.think_end)))) {
            p.temperature = 0.0f;
            p.repeat_penalty = 1.0f;
            p.presence_penalty = p.frequency_penalty = 0.0f;
        }
    }
    return p;
}

decode_stream::taken decode_stream::take(view& v, int32_t tok, int64_t n_past) const {
    taken t;
    ++v.n_gen;
    std::string& text = *v.raw;
    const size_t before = text.size();
    text += env_.tok.token_bytes(tok);
    if (v.think_end == std::string::npos) {
        const size_t from = before >= 8 ? before - 8 : 0;
        const size_t e = text.find("</think>", from);
        if (e != std::string::npos) v.think_end = e + 8;
    }
    // Stop sequences: the earliest match in the raw text (reasoning included).
    if (max_stop_ > 0 && v.stop_from != std::string::npos) {
        const size_t from = std::max(before >= max_stop_ ? before - max_stop_ + 1 : 0, v.stop_from);
        size_t best = std::string::npos;
        for (const auto& st : r_.stops) {
            const size_t m = text.find(st, from);
            if (m != std::string::npos && m < best) best = m;
        }
        if (best != std::string::npos) {
            text.resize(best);
            t.stopped = true;
        }
    }
    if (!t.stopped && r_.tools && r_.kind == gen_kind::chat && v.think_end != std::string::npos) {
        t.tool_done =
            v.tracker.update(std::string_view(text).substr(v.think_end)) == syntax_state::done;
    }
    t.last = t.stopped || t.tool_done || v.n_gen >= r_.max_tokens || n_past >= s_.n_ctx();
    // The token that closes a tool block enters the KV (the next request continues it); a token
    // that ends the generation for any other reason does not.
    t.evaluate = !t.stopped && (!t.last || t.tool_done);
    return t;
}

token_info decode_stream::info_of(std::span<const float> row, int32_t id) const {
    token_info ti;
    ti.id = id;
    if (r_.top_logprobs < 0) return ti;
    ti.logprob = token_logprob_of(row, id);
    if (r_.top_logprobs > 0) top_logprobs(row, r_.top_logprobs, ti.top);
    return ti;
}

void decode_stream::emit(size_t upto) {
    const std::string& raw = res_->raw;
    if (upto <= fed_) return;
    const std::string_view piece(raw.data() + fed_, upto - fed_);
    fed_ = upto;
    if (r_.kind == gen_kind::completion) {
        gen_event e;
        e.delta.kind = chat::stream_event_kind::text;
        e.delta.text = std::string(piece);
        j_.push(std::move(e));
        return;
    }
    events_.clear();
    proj_.feed(piece, &events_);
    for (auto& ev : events_) {
        gen_event e;
        e.delta = std::move(ev);
        j_.push(std::move(e));
    }
}

status decode_stream::speculate(int32_t tok) {
    sim_raw_ = res_->raw;
    sim_.think_end = real_.think_end;
    sim_.tracker = real_.tracker;
    sim_.n_gen = real_.n_gen;
    sim_end_ = sim_refuse_ = false;
    sim_pos_ = s_.n_past() + 1;
    chosen_.clear();
    speculation_options spo;
    spo.n_draft = env_.mtp_draft - 1;
    spo.min_margin = env_.mtp_margin;
    spo.keep = [this](int32_t) { return !sim_refuse_; };
    spo.max_keep = std::max<int64_t>(0, r_.max_tokens - real_.n_gen - 1);
    const token_chooser choose = [this](std::span<const float> row) {
        const sampling_params p = params_of(sim_);
        const int32_t c = smp_.sample(row, p);
        // The penalties' history runs ahead with the look-ahead: every choice is taken by the
        // stream, in order, unless the generation ends first.
        smp_.accept(c);
        chosen_.push_back({c, info_of(row, c), false});
        sim_refuse_ = sim_end_;
        if (!sim_end_) {
            if (c == eos_) {
                sim_refuse_ = sim_end_ = true;
            } else {
                const taken t = take(sim_, c, sim_pos_);
                if (t.last) sim_end_ = true;
                if (!t.evaluate) sim_refuse_ = true;
            }
        }
        ++sim_pos_;
        return c;
    };
    speculation_result sr;
    const status st = s_.eval_speculative(tok, spo, choose, &sr);
    if (!st.ok()) return st;
    for (size_t i = 0; i < chosen_.size(); ++i) {
        chosen_[i].in_kv = static_cast<int64_t>(i) < sr.kept;
        ahead_.push_back(std::move(chosen_[i]));
    }
    if (!sr.drafts.empty()) {
        env_.stats.spec_steps++;
        env_.stats.spec_drafted += sr.drafts.size();
        env_.stats.spec_kept += static_cast<uint64_t>(sr.kept);
        ++res_->usage.spec_steps;
        res_->usage.spec_drafted += static_cast<int64_t>(sr.drafts.size());
        res_->usage.spec_kept += sr.kept;
    }
    return st;
}

decode_stream::step_result decode_stream::step(bool alone) {
    if (done_) return step_result::done;
    if (real_.n_gen >= r_.max_tokens) {
        finish(finish_reason::length);
        return step_result::done;
    }
    if (eo_.cancel()) {
        finish(finish_reason::cancelled);
        return step_result::done;
    }
    int32_t tok;
    token_info ti;
    bool in_kv = false;
    bool forced_call_token = false;
    if (!ahead_.empty()) {
        tok = ahead_.front().id;
        ti = std::move(ahead_.front().info);
        in_kv = ahead_.front().in_kv;
        ahead_.pop_front();
    } else {
        const sampling_params p = params_of(real_);
        if (call_pos_ < call_start_.size() && real_.think_end != std::string::npos) {
            tok = call_start_[call_pos_++];  // the visible reply opens the tool call
            forced_call_token = true;
        } else if (r_.forced_output) {
            tok = forced_pos_ < forced_.size() ? forced_[forced_pos_++] : eos_;
        } else {
            tok = s_.sample(smp_, p);
        }
        smp_.accept(tok);
        if (r_.top_logprobs >= 0 && tok != eos_) {
            ti.id = tok;
            ti.logprob = s_.logprob_of(tok);
            if (r_.top_logprobs > 0) ti.top = s_.top_logprobs(r_.top_logprobs);
        }
    }
    if (tok == eos_) {
        finish(finish_reason::stop);
        return step_result::done;
    }
    if (res_->first_token_s < 0) {
        res_->first_token_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - j_.created).count();
    }
    if (r_.top_logprobs >= 0) res_->logprobs.push_back(std::move(ti));
    if (real_.think_end == std::string::npos) ++res_->usage.reasoning_tokens;
    if (forced_call_token) real_.stop_from = std::string::npos;
    const taken t = take(real_, tok, s_.n_past());
    const std::string& raw = res_->raw;
    if (forced_call_token) real_.stop_from = raw.size();
    emit(t.stopped || t.tool_done ? raw.size() : (raw.size() > hold_ ? raw.size() - hold_ : 0));
    if (t.stopped) {
        finish(finish_reason::stop);
        return step_result::done;
    }
    if (!t.evaluate || in_kv) return after(t);
    if (speculate_ && alone && ahead_.empty()) {
        pending_t_ = t;
        evaluated(speculate(tok));
        return done_ ? step_result::done : step_result::again;
    }
    pending_ = tok;
    pending_t_ = t;
    return step_result::eval;
}

void decode_stream::evaluated(const status& st) {
    if (!st.ok()) {
        res_->error = st.message();
        finish(st.code() == status_code::cancelled ? finish_reason::cancelled
                                                   : finish_reason::error);
        return;
    }
    // Continued saves go on while a long reply is generated (protocol §6.6): each time the
    // position crosses a multiple of the interval; tried once per crossing, saved or not (a
    // full budget is not retried per token).
    const int64_t every = env_.continued_every;
    if (every > 0 && s_.n_past() >= next_continued_) {
        if (env_.save_continued) env_.save_continued();
        next_continued_ = (s_.n_past() / every + 1) * every;
    }
    after(pending_t_);
}

decode_stream::step_result decode_stream::after(const taken& t) {
    if (t.tool_done) {
        finish(finish_reason::tool_calls);
        return step_result::done;
    }
    if (t.last) {
        finish(finish_reason::length);
        return step_result::done;
    }
    return step_result::again;
}

void decode_stream::fail(const std::string& why) {
    if (done_) return;
    res_->error = why;
    finish(finish_reason::error);
}

void decode_stream::finish(finish_reason finish) {
    if (done_) return;
    done_ = true;
    std::string& raw = res_->raw;
    emit(raw.size());
    if (r_.kind == gen_kind::chat) {
        events_.clear();
        proj_.finish(&events_);
        for (auto& ev : events_) {
            gen_event e;
            e.delta = std::move(ev);
            j_.push(std::move(e));
        }
    }
    res_->usage.completion_tokens = real_.n_gen;

    if (r_.kind == gen_kind::chat) {
        if (r_.tools) {
            chat::parse_result pr = chat::parse_tool_calls(raw, r_.thinking);
            res_->content = pr.content;
            res_->reasoning = pr.reasoning;
            if (pr.status == chat::parse_status::ok && finish != finish_reason::cancelled &&
                finish != finish_reason::error) {
                res_->calls = std::move(pr.calls);
                chat::adopt_stream_ids(&res_->calls, proj_.calls());
                chat::replay_map& replay = env_.replay;
                chat::assign_missing_ids(&res_->calls, r_.id_style, [&replay](std::string_view id) {
                    return replay.contains(id);
                });
                if (env_.exact_replay) {
                    std::vector<std::string> ids;
                    for (const auto& c : res_->calls) ids.push_back(c.id);
                    replay.remember(ids, pr.raw_dsml);
                }
                finish = finish_reason::tool_calls;
            } else if (pr.status == chat::parse_status::unterminated &&
                       finish != finish_reason::cancelled) {
                finish = finish_reason::error;
                res_->error = "unterminated tool call";
            }
        } else {
            chat::split_reasoning(raw, r_.thinking, &res_->reasoning, &res_->content);
        }
    }
    res_->finish = finish;
}

}  // namespace magnetar::server
