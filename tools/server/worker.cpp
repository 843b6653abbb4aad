// The inference worker: see worker.h.
#include "server/worker.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <unordered_map>

#include "core/error.h"
#include "server/syntax_tracker.h"
#include "tokenizer/tokenizer.h"

namespace magnetar::server {

using clock_type = std::chrono::steady_clock;

const char* finish_reason_name(finish_reason f) {
    switch (f) {
        case finish_reason::stop:
            return "stop";
        case finish_reason::length:
            return "length";
        case finish_reason::tool_calls:
            return "tool_calls";
        case finish_reason::error:
            return "error";
        case finish_reason::cancelled:
            return "cancelled";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------------
// job
// ---------------------------------------------------------------------------------------------

void job::push(gen_event e) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        events_.push_back(std::move(e));
    }
    cv_.notify_all();
}

void job::finish(gen_result r) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        result_ = std::move(r);
    }
    cv_.notify_all();
}

bool job::wait(std::chrono::milliseconds timeout, std::vector<gen_event>* out) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return !events_.empty() || result_.has_value(); });
    while (!events_.empty()) {
        out->push_back(std::move(events_.front()));
        events_.pop_front();
    }
    return result_.has_value();
}

// ---------------------------------------------------------------------------------------------
// worker
// ---------------------------------------------------------------------------------------------

worker::worker(const Engine& engine, const worker_options& opts)
    : engine_(engine),
      tok_(*engine.vocab()),
      opts_(opts),
      replay_(chat::replay_limits{opts.replay_max_ids, size_t{512} << 20}) {
    session_options so;
    so.n_ctx = opts.n_ctx;
    so.drafts = opts.mtp_draft >= 2 && engine.info().arch == "deepseek41";
    std::unique_ptr<Session> s;
    const status st = engine.create_session(so, &s);
    if (!st.ok()) throw Error("serve: cannot create the session: " + st.message());
    session_ = std::move(s);
    const session_memory mem = session_->memory();
    stats_.context_size = mem.n_ctx;  // fixed for the worker's life
    stats_.kv_bytes = mem.cache_bytes();
    if (!opts_.disk.dir.empty()) {
        kvstore::store_options ko;
        ko.dir = opts_.disk.dir;
        ko.budget_bytes = opts_.disk.space_mb << 20;
        ko.min_tokens = static_cast<uint32_t>(std::max<int64_t>(opts_.disk.min_tokens, 1));
        ko.reject_different_quant = opts_.disk.reject_different_quant;
        kvstore::model_identity id = kvstore::identity_of_model(engine.info().path);
        if (!engine.info().steering_file.empty()) {
            // Steered state is a different model's state: keep it apart by the directions and
            // the server's scales.
            uint64_t h = engine.info().steering_fingerprint;
            for (const float v : {engine.info().steering_ffn, engine.info().steering_attn}) {
                uint32_t bits = 0;
                std::memcpy(&bits, &v, sizeof bits);
                h = (h ^ bits) * 1099511628211ull;
            }
            id.fingerprint ^= h;
        }
        std::function<void(const std::string&)> log;
        if (opts_.disk.log)
            log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
        disk_ = std::make_unique<kvstore::store>(ko, id, log);
        // Exact replay across restarts: the tool ids saved with the files (protocol §3.7).
        if (opts_.exact_replay) {
            disk_->stored_tools([this](kvstore::tool_map& map) {
                for (const auto& [tool_id, dsml] : map)
                    replay_.remember({tool_id}, dsml, chat::replay_source::disk);
            });
        }
    }
    thread_ = std::thread([this] { loop(); });
}

namespace {

// The exact-replay entries whose block occurs in `text`. The text's blocks are found by their
// markers (each DSML variant), with and without a leading "\n\n" (what a remembered block
// starts with when the model wrote one), and looked up by content: linear in the text and in
// the entries, whatever their number.
kvstore::tool_map tools_in_text(const chat::replay_map& replay, std::string_view text) {
    const std::vector<chat::replay_entry> entries = replay.entries();  // keeps the blocks alive
    std::unordered_map<std::string_view, std::vector<const std::string*>> by_block;
    for (const chat::replay_entry& e : entries) {
        if (e.block && !e.block->empty()) by_block[*e.block].push_back(&e.id);
    }
    kvstore::tool_map out;
    if (by_block.empty()) return out;
    for (const chat::dsml_variant v :
         {chat::dsml_variant::full, chat::dsml_variant::short_form, chat::dsml_variant::plain}) {
        const std::string infix(chat::dsml_infix(v));
        const std::string open = "<" + infix + "tool_calls>", close = "</" + infix + "tool_calls>";
        for (size_t at = text.find(open); at != std::string_view::npos;) {
            const size_t shut = text.find(close, at + open.size());
            if (shut == std::string_view::npos) break;
            const size_t end = shut + close.size();
            for (const size_t begin :
                 {at >= 2 && text.substr(at - 2, 2) == "\n\n" ? at - 2 : at, at}) {
                const auto hit = by_block.find(text.substr(begin, end - begin));
                if (hit == by_block.end()) continue;
                for (const std::string* id : hit->second)
                    out.emplace_back(*id, std::string(hit->first));
                by_block.erase(hit);  // each block once
            }
            at = text.find(open, end);
        }
    }
    return out;
}

}  // namespace

void latency_histogram::observe(double seconds) {
    size_t b = 0;
    while (b < kBuckets && seconds > kBounds[b]) ++b;
    counts[b]++;
    sum_us += static_cast<uint64_t>(std::max(0.0, seconds) * 1e6);
}

int64_t cold_store_len(const disk_cache_options& o, int64_t n) {
    if (n > o.min_tokens + o.boundary_trim) {
        int64_t s = n - o.boundary_trim;
        if (o.boundary_align > 0) s = s / o.boundary_align * o.boundary_align;
        if (s >= o.min_tokens) return s;
    }
    return n;
}

int64_t continued_step(const disk_cache_options& o) {
    if (o.continued_interval <= 0) return 0;
    if (o.boundary_align <= 0) return o.continued_interval;
    return (o.continued_interval + o.boundary_align - 1) / o.boundary_align * o.boundary_align;
}

kvstore::store* worker::disk() const {
    if (!disk_) return nullptr;
    const model_info& info = engine_.info();
    return session_->steering() == steering_scales{info.steering_ffn, info.steering_attn}
               ? disk_.get()
               : nullptr;
}

status worker::apply_steering(const gen_request& r) {
    const model_info& info = engine_.info();
    const steering_scales want =
        r.steering.value_or(steering_scales{info.steering_ffn, info.steering_attn});
    if (want == session_->steering()) return {};
    disk_save_live(kvstore::save_reason::evict);
    disk_last_saved_ = 0;
    return session_->set_steering(want);
}

void worker::disk_save_current(kvstore::save_reason why) {
    const int64_t n = session_->n_past();
    if (!disk() || n < opts_.disk.min_tokens) return;
    const std::string key = tok_.decode(session_->tokens());
    // The tool ids whose sampled DSML the saved text holds: exact replay of those calls then
    // survives a restart (a client replaying the history re-renders the same bytes).
    const kvstore::tool_map tools = tools_in_text(replay_, key);
    if (disk_->save(*session_, key, why, 0, tools.empty() ? nullptr : &tools)) {
        stats_.disk_saves++;
        disk_last_saved_ = std::max(disk_last_saved_, n);
    }
}

void worker::disk_save_live(kvstore::save_reason why) {
    if (!disk() || session_->n_past() < opts_.disk.min_tokens) return;
    if (disk_last_saved_ == session_->n_past()) return;  // already on disk
    disk_save_current(why);
}

bool worker::disk_load(const prompt& in, std::vector<int32_t>* eff, gen_result* res) {
    if (!disk()) return false;
    kvstore::store::hit h;
    // The stored tokens must spell exactly the key text, with their control tokens where this
    // prompt has its trusted ones (a forged turn and a real one have the same bytes).
    const auto accept = [&](std::string_view key_text, std::span<const int32_t> tokens) {
        size_t cut = 0;
        return cached_prefix_matches(tok_, tokens, in, &cut) && cut == key_text.size();
    };
    if (!disk_->load_longest_prefix(in.text, *session_, &h, accept)) return false;
    const auto t = session_->tokens();
    eff->assign(t.begin(), t.end());
    encode_trusted(tok_, in.text, in.specials, h.key_text.size(), *eff);
    for (const auto& [id, dsml] : h.tools) replay_.remember({id}, dsml, chat::replay_source::disk);
    res->cache_path = "disk-text";
    disk_last_saved_ = h.tokens;
    stats_.disk_hits++;
    stats_.disk_loaded_tokens += h.tokens;
    return true;
}

status worker::sync_with_saves(std::span<const int32_t> eff, const eval_options& eo, bool cold,
                               sync_result* sr) {
    const int64_t n = static_cast<int64_t>(eff.size());
    std::vector<int64_t> points;
    if (disk()) {
        const disk_cache_options& d = opts_.disk;
        if (cold && d.cold_max_tokens > 0 && n >= d.min_tokens && n <= d.cold_max_tokens) {
            // The stable tools + system prefix of a new agent session: everything before the
            // last USER token that precedes the first ASSISTANT token.
            const int32_t user = tok_.specials().user, assistant = tok_.specials().assistant;
            int64_t anchor = -1;
            for (int64_t i = 0; i < n && eff[static_cast<size_t>(i)] != assistant; ++i)
                if (eff[static_cast<size_t>(i)] == user) anchor = i;
            points.push_back(anchor >= d.min_tokens ? anchor : cold_store_len(d, n));
        }
        if (const int64_t step = continued_step(d); step > 0) {
            const int64_t from = std::max(disk_last_saved_, session_->common_prefix(eff));
            for (int64_t k = (from / step + 1) * step; k < n; k += step)
                if (k >= d.min_tokens) points.push_back(k);
        }
        std::sort(points.begin(), points.end());
        points.erase(std::unique(points.begin(), points.end()), points.end());
    }
    bool first = true;
    for (const int64_t p : points) {
        if (p <= 0 || p > n) continue;
        sync_result part;
        const status st = session_->sync(eff.first(static_cast<size_t>(p)), eo, &part);
        if (first) sr->reused = part.reused;
        sr->evaluated += part.evaluated;
        first = false;
        if (!st.ok()) return st;
        disk_save_current(p == points.front() && cold ? kvstore::save_reason::cold
                                                      : kvstore::save_reason::continued);
    }
    // Sync all but the last prompt token, checkpoint there, then evaluate the last one: the
    // next turn usually diverges right after the prompt (thinking turns re-render without
    // their reasoning), and the checkpoint lets it resume from there instead of from scratch.
    sync_result part;
    status st;
    if (n >= 2 && session_->common_prefix(eff) < n - 1) {
        st = session_->sync(eff.first(static_cast<size_t>(n - 1)), eo, &part);
        if (st.ok()) {
            const auto cps = session_->checkpoint_positions();
            if (std::find(cps.begin(), cps.end(), session_->n_past()) == cps.end()) {
                (void)session_->checkpoint();
            }
            st = session_->eval(eff.last(1), eo);
            part.evaluated += 1;
        }
    } else {
        st = session_->sync(eff, eo, &part);
    }
    if (first) sr->reused = part.reused;
    sr->evaluated += part.evaluated;
    return st;
}

worker::~worker() {
    stop();
}

worker::submit_result worker::submit(std::shared_ptr<job> j) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) return submit_result::stopping;
        if (queue_.size() >= opts_.queue_size) {
            stats_.queue_rejected++;
            return submit_result::queue_full;
        }
        queue_.push_back(std::move(j));
    }
    cv_.notify_one();
    return submit_result::ok;
}

std::vector<int32_t> worker::last_prompt_tokens() const {
    std::lock_guard<std::mutex> lk(mu_);
    return last_prompt_;
}

size_t worker::queue_depth() const {
    std::lock_guard<std::mutex> lk(mu_);
    return queue_.size();
}

void worker::stop() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_ && !thread_.joinable()) return;
        stopping_ = true;
    }
    abort_ = true;
    cv_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
        // Clean exit: the live session survives the restart (protocol §6.6 "shutdown").
        disk_save_live(kvstore::save_reason::shutdown);
    }
}

void worker::loop() {
    for (;;) {
        std::shared_ptr<job> j;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;  // stopping and drained
            j = std::move(queue_.front());
            queue_.pop_front();
        }
        if (abort_ || j->cancel) {
            gen_result r;
            r.finish = finish_reason::cancelled;
            r.error = abort_ ? "server shutting down" : "client disconnected";
            stats_.jobs_cancelled++;
            j->finish(std::move(r));
            continue;
        }
        stats_.busy = 1;
        run(*j);
        stats_.busy = 0;
    }
}

void worker::run(job& j) {
    gen_result res;
    eval_options eo;
    eo.cancel = [&] { return j.cancel.load() || abort_.load(); };
    eo.progress = [&](int64_t done, int64_t total) {
        gen_event e;
        e.kind = gen_event::type::prefill;
        e.done = done;
        e.total = total;
        j.push(std::move(e));
    };
    const auto t0 = clock_type::now();
    auto t1 = t0;
    bool prompt_done = false;
    try {
        if (opts_.before_job) opts_.before_job();
        const status st = sync_prompt(j, eo, &res);
        t1 = clock_type::now();
        res.prefill_s = std::chrono::duration<double>(t1 - t0).count();
        prompt_done = true;
        if (!st.ok()) {
            res.finish = st.code() == status_code::cancelled ? finish_reason::cancelled
                                                             : finish_reason::error;
            res.error = st.message();
            res.engine_failed_before_output = true;
            res.context_overflow = st.code() == status_code::context_full;
        } else {
            generate(j, eo, &res);
            res.decode_s = std::chrono::duration<double>(clock_type::now() - t1).count();
        }
    } catch (const std::exception& e) {
        // An allocation (or anything else) failing deep in the engine ends this job with an
        // error; the worker and the server go on. The session may have stopped mid-chunk, so
        // it starts over empty rather than trusting a half-written state.
        session_->reset();
        disk_last_saved_ = 0;
        const bool oom = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
        res.finish = finish_reason::error;
        res.error = oom ? "out of memory while serving this request" : e.what();
        res.out_of_memory = oom;
        res.engine_failed_before_output = !prompt_done || res.raw.empty();
        std::fprintf(stderr, "serve: request failed: %s\n", res.error.c_str());
    }

    stats_.jobs++;
    if (res.finish == finish_reason::cancelled) stats_.jobs_cancelled++;
    if (res.finish == finish_reason::error) stats_.jobs_failed++;
    stats_.prompt_tokens += static_cast<uint64_t>(res.usage.prompt_tokens);
    stats_.cached_tokens += static_cast<uint64_t>(res.usage.cached_tokens);
    stats_.prefill_tokens +=
        static_cast<uint64_t>(res.usage.prompt_tokens - res.usage.cached_tokens);
    stats_.generated_tokens += static_cast<uint64_t>(res.usage.completion_tokens);
    (res.usage.cached_tokens > 0 ? stats_.cache_hits : stats_.cache_misses)++;
    stats_.prefill_us += static_cast<uint64_t>(res.prefill_s * 1e6);
    stats_.decode_us += static_cast<uint64_t>(res.decode_s * 1e6);
    if (res.first_token_s >= 0) stats_.time_to_first_token.observe(res.first_token_s);
    stats_.job_duration.observe(
        std::chrono::duration<double>(clock_type::now() - j.created).count());
    const session_memory mem = session_->memory();
    stats_.context_tokens = session_->n_past();
    stats_.kv_bytes = mem.cache_bytes() + mem.checkpoint_bytes;
    j.finish(std::move(res));
}

status worker::sync_prompt(job& j, const eval_options& eo, gen_result* res) {
    const prompt& in = j.req.input;
    if (status st = apply_steering(j.req); !st.ok()) return st;
    std::vector<int32_t> eff = in.tokens;
    const int64_t live = session_->n_past();
    res->cache_path = "cold";
    size_t cut = 0;
    if (live > 0) {
        if (session_->common_prefix(eff) == live) {
            res->cache_path = "memory-token";
        } else if (cached_prefix_matches(tok_, session_->tokens(), in, &cut)) {
            // Rendered-byte prefix with the control tokens in the same places: the live tokens
            // stay authoritative; only the text after the cached byte boundary is tokenized
            // again (BPE may merge across it).
            const auto t = session_->tokens();
            eff.assign(t.begin(), t.end());
            encode_trusted(tok_, in.text, in.specials, cut, eff);
            res->cache_path = "memory-text";
        } else {
            res->cache_path = "checkpoint";
        }
    }
    if (eff.empty()) return {status_code::invalid_argument, "empty prompt"};
    res->usage.prompt_tokens = static_cast<int64_t>(eff.size());
    if (static_cast<int64_t>(eff.size()) >= session_->n_ctx()) {
        return {status_code::context_full, "prompt has " + std::to_string(eff.size()) +
                                               " tokens, but the context size is " +
                                               std::to_string(session_->n_ctx()) + " tokens"};
    }

    // No live prefix worth keeping: persist the live session before it is replaced, then try
    // the disk for a longer stored prefix of this prompt (protocol §6.2 steps 8-9).
    bool cold = false;
    if (disk() && res->cache_path != "memory-token" && res->cache_path != "memory-text") {
        int64_t usable = 0;  // what in-memory checkpoints would keep
        const int64_t common = session_->common_prefix(eff);
        for (int64_t cp : session_->checkpoint_positions())
            if (cp <= common) usable = std::max(usable, cp);
        if (usable < opts_.disk.min_tokens) {
            disk_save_live(kvstore::save_reason::evict);
            if (!disk_load(in, &eff, res)) {
                disk_last_saved_ = 0;  // a miss resets the continued schedule
                cold = usable == 0;
            }
            res->usage.prompt_tokens = static_cast<int64_t>(eff.size());
            if (static_cast<int64_t>(eff.size()) >= session_->n_ctx()) {
                return {status_code::context_full, "prompt has " + std::to_string(eff.size()) +
                                                       " tokens, but the context size is " +
                                                       std::to_string(session_->n_ctx()) +
                                                       " tokens"};
            }
        }
    }

    {
        std::lock_guard<std::mutex> lk(mu_);
        last_prompt_ = eff;
    }
    sync_result sr;
    const status st = sync_with_saves(eff, eo, cold, &sr);
    const int64_t n = static_cast<int64_t>(eff.size());
    res->usage.cached_tokens = std::clamp<int64_t>(sr.reused, 0, n);
    if (res->cache_path == "checkpoint" && sr.reused == 0) res->cache_path = "cold";
    return st;
}

void worker::generate(job& j, const eval_options& eo, gen_result* res) {
    const gen_request& r = j.req;
    const int32_t eos = tok_.specials().eos;
    sampler smp(r.sampling, static_cast<size_t>(session_->n_vocab()));

    chat::stream_options so;
    so.thinking = r.thinking;
    so.detect_tool_calls = r.tools;
    const chat::id_style style = r.id_style;
    so.make_id = [this, style] {
        std::string id;
        do {
            id = chat::make_tool_id(style);
        } while (replay_.contains(id));
        return id;
    };
    chat::dsml_stream proj(so);

    size_t max_stop = 0;
    for (const auto& s : r.stops) max_stop = std::max(max_stop, s.size());
    const size_t hold = max_stop > 0 ? max_stop - 1 : 0;

    std::vector<int32_t> forced;
    size_t forced_pos = 0;
    if (r.forced_output) tok_.encode_append(*r.forced_output, true, forced);
    // tool_choice: the tool-call block's opening, the markers as template text and the tool's
    // name as client text (never a control token).
    std::vector<int32_t> call_start;
    size_t call_pos = 0;
    if (r.forced_call) {
        tok_.encode_append(r.forced_call->before, true, call_start);
        tok_.encode_append(r.forced_call->name, false, call_start);
        tok_.encode_append(r.forced_call->after, true, call_start);
    }

    std::string& raw = res->raw;
    size_t fed = 0;  // bytes of raw handed to the projection
    std::vector<chat::stream_event> events;

    auto emit = [&](size_t upto) {
        if (upto <= fed) return;
        const std::string_view piece(raw.data() + fed, upto - fed);
        fed = upto;
        if (r.kind == gen_kind::completion) {
            gen_event e;
            e.delta.kind = chat::stream_event_kind::text;
            e.delta.text = std::string(piece);
            j.push(std::move(e));
            return;
        }
        events.clear();
        proj.feed(piece, &events);
        for (auto& ev : events) {
            gen_event e;
            e.delta = std::move(ev);
            j.push(std::move(e));
        }
    };

    // What decides a token's fate: the generated bytes, where the visible text starts, the
    // DSML syntax state and the count. The loop advances the real one; a speculative step's
    // chooser looks ahead on a copy, with the same two functions, so that the drafts it keeps
    // are exactly the tokens the loop will take and evaluate.
    struct gen_view {
        std::string* raw;
        size_t think_end;
        syntax_tracker tracker;
        int64_t n_gen = 0;
        // Stop sequences are matched from here on (npos: not in this token). tool_choice's
        // forced opening is not the model's text: a stop "\n\n" would end the reply before
        // the call it must make.
        size_t stop_from = 0;
    };
    gen_view real{&raw, r.thinking ? std::string::npos : size_t{0}, {}, 0, 0};
    // Sampling parameters of the next token: greedy on DSML structure (visible text only),
    // without penalties there (a tool call's syntax repeats itself by design).
    auto params_of = [&r](gen_view& v) {
        sampling_params p = r.sampling;
        if (r.tools && r.kind == gen_kind::chat && v.think_end != std::string::npos) {
            if (syntax_is_greedy(v.tracker.update(std::string_view(*v.raw).substr(v.think_end)))) {
                p.temperature = 0.0f;
                p.repeat_penalty = 1.0f;
                p.presence_penalty = p.frequency_penalty = 0.0f;
            }
        }
        return p;
    };
    struct taken {
        bool stopped = false;    // a stop sequence matched (raw cut at it)
        bool tool_done = false;  // the DSML block closed with this token
        bool last = false;       // generation ends with this token
        bool evaluate = false;   // the token enters the KV (not last, or the tool block's end)
    };
    // Appends a (non-EOS) token to the view. n_past: the session position it would take.
    auto take = [&](gen_view& v, int32_t tok, int64_t n_past) {
        taken t;
        ++v.n_gen;
        std::string& text = *v.raw;
        const size_t before = text.size();
        text += tok_.token_bytes(tok);
        if (v.think_end == std::string::npos) {
            const size_t from = before >= 8 ? before - 8 : 0;
            const size_t e = text.find("</think>", from);
            if (e != std::string::npos) v.think_end = e + 8;
        }
        // Stop sequences: the earliest match in the raw text (reasoning included).
        if (max_stop > 0 && v.stop_from != std::string::npos) {
            const size_t from =
                std::max(before >= max_stop ? before - max_stop + 1 : 0, v.stop_from);
            size_t best = std::string::npos;
            for (const auto& st : r.stops) {
                const size_t m = text.find(st, from);
                if (m != std::string::npos && m < best) best = m;
            }
            if (best != std::string::npos) {
                text.resize(best);
                t.stopped = true;
            }
        }
        if (!t.stopped && r.tools && r.kind == gen_kind::chat && v.think_end != std::string::npos) {
            t.tool_done =
                v.tracker.update(std::string_view(text).substr(v.think_end)) == syntax_state::done;
        }
        t.last = t.stopped || t.tool_done || v.n_gen >= r.max_tokens || n_past >= session_->n_ctx();
        // The token that closes a tool block enters the KV (the next request continues it);
        // a token that ends the generation for any other reason does not.
        t.evaluate = !t.stopped && (!t.last || t.tool_done);
        return t;
    };

    // Speculative decoding (--mtp-draft >= 2; not for the forced-output test hook): tokens a
    // step chose ahead wait here with their log-probabilities; the kept drafts are already in
    // the KV, the last one (the step's `next`) is not.
    const bool speculate = opts_.mtp_draft >= 2 && !r.forced_output && !r.forced_call;
    struct ahead_token {
        int32_t id = -1;
        token_info info;
        bool in_kv = false;
    };
    std::deque<ahead_token> ahead;
    std::vector<ahead_token> chosen;
    std::string sim_raw;
    gen_view sim{&sim_raw, 0, {}, 0, 0};
    bool sim_end = false;     // the look-ahead reached the end of the generation
    bool sim_refuse = false;  // the latest choice must not be kept
    int64_t sim_pos = 0;      // session position of the latest choice
    auto info_of = [&r](std::span<const float> row, int32_t id) {
        token_info ti;
        ti.id = id;
        if (r.top_logprobs < 0) return ti;
        ti.logprob = token_logprob_of(row, id);
        if (r.top_logprobs > 0) top_logprobs(row, r.top_logprobs, ti.top);
        return ti;
    };
    speculation_options spo;
    spo.n_draft = opts_.mtp_draft - 1;
    spo.min_margin = opts_.mtp_margin;
    spo.keep = [&](int32_t) { return !sim_refuse; };
    const token_chooser choose = [&](std::span<const float> row) {
        const sampling_params p = params_of(sim);
        const int32_t c = smp.sample(row, p);
        // The penalties' history runs ahead with the look-ahead: every choice is taken by the
        // loop below, in order, unless the generation ends first.
        smp.accept(c);
        chosen.push_back({c, info_of(row, c), false});
        sim_refuse = sim_end;
        if (!sim_end) {
            if (c == eos) {
                sim_refuse = sim_end = true;
            } else {
                const taken t = take(sim, c, sim_pos);
                if (t.last) sim_end = true;
                if (!t.evaluate) sim_refuse = true;
            }
        }
        ++sim_pos;
        return c;
    };

    finish_reason finish = finish_reason::length;
    int64_t& n_gen = real.n_gen;
    const int64_t continued = disk() ? continued_step(opts_.disk) : 0;
    int64_t next_continued =
        continued > 0 ? (std::max(disk_last_saved_, session_->n_past()) / continued + 1) * continued
                      : 0;
    for (;;) {
        if (n_gen >= r.max_tokens) break;
        if (j.cancel || abort_) {
            finish = finish_reason::cancelled;
            break;
        }
        int32_t tok;
        token_info ti;
        bool in_kv = false;
        bool forced_call_token = false;
        const sampling_params p = params_of(real);
        if (!ahead.empty()) {
            tok = ahead.front().id;
            ti = std::move(ahead.front().info);
            in_kv = ahead.front().in_kv;
            ahead.pop_front();
        } else {
            if (call_pos < call_start.size() && real.think_end != std::string::npos) {
                tok = call_start[call_pos++];  // the visible reply opens the tool call
                forced_call_token = true;
            } else if (r.forced_output) {
                tok = forced_pos < forced.size() ? forced[forced_pos++] : eos;
            } else {
                tok = session_->sample(smp, p);
            }
            smp.accept(tok);
            if (r.top_logprobs >= 0 && tok != eos) {
                ti.id = tok;
                ti.logprob = session_->logprob_of(tok);
                if (r.top_logprobs > 0) ti.top = session_->top_logprobs(r.top_logprobs);
            }
        }
        if (tok == eos) {
            finish = finish_reason::stop;
            break;
        }
        if (res->first_token_s < 0) {
            res->first_token_s =
                std::chrono::duration<double>(clock_type::now() - j.created).count();
        }
        if (r.top_logprobs >= 0) res->logprobs.push_back(std::move(ti));
        if (real.think_end == std::string::npos) ++res->usage.reasoning_tokens;
        if (forced_call_token) real.stop_from = std::string::npos;
        const taken t = take(real, tok, session_->n_past());
        if (forced_call_token) real.stop_from = raw.size();
        emit(t.stopped || t.tool_done ? raw.size() : (raw.size() > hold ? raw.size() - hold : 0));
        if (t.stopped) {
            finish = finish_reason::stop;
            break;
        }
        if (t.evaluate && !in_kv) {
            status st;
            if (speculate && ahead.empty()) {
                sim_raw = raw;
                sim.think_end = real.think_end;
                sim.tracker = real.tracker;
                sim.n_gen = real.n_gen;
                sim_end = sim_refuse = false;
                sim_pos = session_->n_past() + 1;
                chosen.clear();
                spo.max_keep = std::max<int64_t>(0, r.max_tokens - n_gen - 1);
                speculation_result sr;
                st = session_->eval_speculative(tok, spo, choose, &sr);
                if (st.ok()) {
                    for (size_t i = 0; i < chosen.size(); ++i) {
                        chosen[i].in_kv = static_cast<int64_t>(i) < sr.kept;
                        ahead.push_back(std::move(chosen[i]));
                    }
                    if (!sr.drafts.empty()) {
                        stats_.spec_steps++;
                        stats_.spec_drafted += sr.drafts.size();
                        stats_.spec_kept += static_cast<uint64_t>(sr.kept);
                        ++res->usage.spec_steps;
                        res->usage.spec_drafted += static_cast<int64_t>(sr.drafts.size());
                        res->usage.spec_kept += sr.kept;
                    }
                }
            } else {
                st = session_->eval(std::span<const int32_t>(&tok, 1), eo);
            }
            if (!st.ok()) {
                finish = st.code() == status_code::cancelled ? finish_reason::cancelled
                                                             : finish_reason::error;
                res->error = st.message();
                break;
            }
            // Continued saves go on while a long reply is generated (protocol §6.6): each time
            // the position crosses a multiple of the interval.
            // Tried once per crossing, saved or not (a full budget is not retried per token).
            if (continued > 0 && session_->n_past() >= next_continued) {
                disk_save_current(kvstore::save_reason::continued);
                next_continued = (session_->n_past() / continued + 1) * continued;
            }
        }
        if (t.tool_done) {
            finish = finish_reason::tool_calls;
            break;
        }
        if (t.last) break;  // length
    }
    emit(raw.size());
    if (r.kind == gen_kind::chat) {
        events.clear();
        proj.finish(&events);
        for (auto& ev : events) {
            gen_event e;
            e.delta = std::move(ev);
            j.push(std::move(e));
        }
    }
    res->usage.completion_tokens = n_gen;

    if (r.kind == gen_kind::chat) {
        if (r.tools) {
            chat::parse_result pr = chat::parse_tool_calls(raw, r.thinking);
            res->content = pr.content;
            res->reasoning = pr.reasoning;
            if (pr.status == chat::parse_status::ok && finish != finish_reason::cancelled &&
                finish != finish_reason::error) {
                res->calls = std::move(pr.calls);
                chat::adopt_stream_ids(&res->calls, proj.calls());
                chat::assign_missing_ids(&res->calls, style, [this](std::string_view id) {
                    return replay_.contains(id);
                });
                if (opts_.exact_replay) {
                    std::vector<std::string> ids;
                    for (const auto& c : res->calls) ids.push_back(c.id);
                    replay_.remember(ids, pr.raw_dsml);
                }
                finish = finish_reason::tool_calls;
            } else if (pr.status == chat::parse_status::unterminated &&
                       finish != finish_reason::cancelled) {
                finish = finish_reason::error;
                res->error = "unterminated tool call";
            }
        } else {
            chat::split_reasoning(raw, r.thinking, &res->reasoning, &res->content);
        }
    }
    res->finish = finish;
}

}  // namespace magnetar::server
