// The inference worker: see worker.h.
#include "server/worker.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <unordered_map>

#include "core/error.h"
#include "core/format.h"
#include "server/decode_stream.h"
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

// A job on its slot: prefilling (no stream yet), then generating.
struct worker::active {
    std::shared_ptr<job> j;
    slot* sl = nullptr;
    eval_options eo;
    gen_result res;
    std::unique_ptr<decode_stream> gen;
    clock_type::time_point t0, t1;
    bool done = false;
};

worker::worker(const Engine& engine, const worker_options& opts)
    : engine_(engine),
      tok_(*engine.vocab()),
      opts_(opts),
      replay_(chat::replay_limits{opts.replay_max_ids, size_t{512} << 20}) {
    if (opts_.parallel < 1) throw Error("serve: --parallel must be at least 1");
    std::unique_ptr<slot> first = make_slot();
    slot_bytes_ = first->session->memory().cache_bytes();
    if (opts_.kv_budget_bytes > 0 && slot_bytes_ > opts_.kv_budget_bytes) {
        throw Error(
            strfmt("serve: one session of %lld tokens holds %s of KV state, more than the "
                   "KV memory budget of %s",
                   static_cast<long long>(opts_.n_ctx), human_bytes(slot_bytes_).c_str(),
                   human_bytes(opts_.kv_budget_bytes).c_str()));
    }
    slots_.push_back(std::move(first));
    update_gauges(*slots_.front());
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

std::unique_ptr<worker::slot> worker::make_slot() {
    session_options so;
    so.n_ctx = opts_.n_ctx;
    so.drafts = opts_.mtp_draft >= 2 && engine_.info().arch == "deepseek41";
    std::unique_ptr<Session> s;
    const status st = engine_.create_session(so, &s);
    if (!st.ok()) throw Error("serve: cannot create the session: " + st.message());
    auto sl = std::make_unique<slot>();
    sl->session = std::move(s);
    sl->gauges.context_size = sl->session->n_ctx();
    return sl;
}

void worker::update_gauges(slot& sl) {
    const session_memory mem = sl.session->memory();
    std::lock_guard<std::mutex> lk(mu_);
    sl.gauges.context_tokens = sl.session->n_past();
    sl.gauges.kv_bytes = mem.cache_bytes() + mem.checkpoint_bytes;
    sl.gauges.busy = sl.busy;
}

std::vector<slot_gauges> worker::slots() const {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<slot_gauges> out;
    for (const auto& sl : slots_) out.push_back(sl->gauges);
    return out;
}

kvstore::store* worker::disk(const slot& sl) const {
    if (!disk_) return nullptr;
    const model_info& info = engine_.info();
    return sl.session->steering() == steering_scales{info.steering_ffn, info.steering_attn}
               ? disk_.get()
               : nullptr;
}

status worker::apply_steering(slot& sl, const gen_request& r) {
    const model_info& info = engine_.info();
    const steering_scales want =
        r.steering.value_or(steering_scales{info.steering_ffn, info.steering_attn});
    if (want == sl.session->steering()) return {};
    disk_save_live(sl, kvstore::save_reason::evict);
    sl.disk_last_saved = 0;
    return sl.session->set_steering(want);
}

void worker::disk_save_current(slot& sl, kvstore::save_reason why) {
    Session& s = *sl.session;
    const int64_t n = s.n_past();
    if (!disk(sl) || n < opts_.disk.min_tokens) return;
    const std::string key = tok_.decode(s.tokens());
    // The tool ids whose sampled DSML the saved text holds: exact replay of those calls then
    // survives a restart (a client replaying the history re-renders the same bytes).
    const kvstore::tool_map tools = tools_in_text(replay_, key);
    if (disk_->save(s, key, why, 0, tools.empty() ? nullptr : &tools)) {
        stats_.disk_saves++;
        sl.disk_last_saved = std::max(sl.disk_last_saved, n);
    }
}

void worker::disk_save_live(slot& sl, kvstore::save_reason why) {
    if (!disk(sl) || sl.session->n_past() < opts_.disk.min_tokens) return;
    if (sl.disk_last_saved == sl.session->n_past()) return;  // already on disk
    disk_save_current(sl, why);
}

bool worker::disk_load(slot& sl, const prompt& in, std::vector<int32_t>* eff, gen_result* res) {
    if (!disk(sl)) return false;
    Session& s = *sl.session;
    kvstore::store::hit h;
    // The stored tokens must spell exactly the key text, with their control tokens where this
    // prompt has its trusted ones (a forged turn and a real one have the same bytes).
    const auto accept = [&](std::string_view key_text, std::span<const int32_t> tokens) {
        size_t cut = 0;
        return cached_prefix_matches(tok_, tokens, in, &cut) && cut == key_text.size();
    };
    if (!disk_->load_longest_prefix(in.text, s, &h, accept)) return false;
    const auto t = s.tokens();
    eff->assign(t.begin(), t.end());
    encode_trusted(tok_, in.text, in.specials, h.key_text.size(), *eff);
    for (const auto& [id, dsml] : h.tools) replay_.remember({id}, dsml, chat::replay_source::disk);
    res->cache_path = "disk-text";
    sl.disk_last_saved = h.tokens;
    stats_.disk_hits++;
    stats_.disk_loaded_tokens += h.tokens;
    return true;
}

status worker::sync_pieces(active& a, std::span<const int32_t> toks, sync_result* sr) {
    Session& s = *a.sl->session;
    const auto others = [&] {
        for (const auto& o : active_)
            if (o.get() != &a && o->gen && !o->done) return true;
        return false;
    };
    if (!others()) return s.sync(toks, a.eo, sr);
    const int64_t n = static_cast<int64_t>(toks.size());
    const int64_t piece = std::max<int64_t>(1, opts_.prefill_piece);
    eval_options eo = a.eo;
    eo.progress = [&a, n](int64_t done, int64_t) {
        if (a.eo.progress) a.eo.progress(done, n);
    };
    // The first piece reuses what the session can (it may go back to a checkpoint); the later
    // ones extend the timeline. Decode steps of the other jobs run in between.
    *sr = sync_result{};
    for (bool first = true;; first = false) {
        const int64_t from = first ? s.common_prefix(toks) : s.n_past();
        const int64_t target = others() ? std::min(n, from + piece) : n;
        sync_result part;
        const status st = s.sync(toks.first(static_cast<size_t>(target)), eo, &part);
        if (first) {
            sr->reused = part.reused;
            sr->from_checkpoint = part.from_checkpoint;
        }
        sr->evaluated += part.evaluated;
        if (!st.ok() || target == n) return st;
        decode_round(&a);
    }
}

status worker::sync_with_saves(active& a, std::span<const int32_t> eff, bool cold,
                               sync_result* sr) {
    slot& sl = *a.sl;
    Session& s = *sl.session;
    const int64_t n = static_cast<int64_t>(eff.size());
    std::vector<int64_t> points;
    if (disk(sl)) {
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
            const int64_t from = std::max(sl.disk_last_saved, s.common_prefix(eff));
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
        const status st = sync_pieces(a, eff.first(static_cast<size_t>(p)), &part);
        if (first) sr->reused = part.reused;
        sr->evaluated += part.evaluated;
        first = false;
        if (!st.ok()) return st;
        disk_save_current(sl, p == points.front() && cold ? kvstore::save_reason::cold
                                                          : kvstore::save_reason::continued);
    }
    // Sync all but the last prompt token, checkpoint there, then evaluate the last one: the
    // next turn usually diverges right after the prompt (thinking turns re-render without
    // their reasoning), and the checkpoint lets it resume from there instead of from scratch.
    sync_result part;
    status st;
    if (n >= 2 && s.common_prefix(eff) < n - 1) {
        st = sync_pieces(a, eff.first(static_cast<size_t>(n - 1)), &part);
        if (st.ok()) {
            const auto cps = s.checkpoint_positions();
            if (std::find(cps.begin(), cps.end(), s.n_past()) == cps.end()) {
                (void)s.checkpoint();
            }
            st = s.eval(eff.last(1), a.eo);
            part.evaluated += 1;
        }
    } else {
        st = sync_pieces(a, eff, &part);
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
        // Clean exit: the live sessions survive the restart (protocol §6.6 "shutdown").
        for (auto& sl : slots_) disk_save_live(*sl, kvstore::save_reason::shutdown);
    }
}

// ---------------------------------------------------------------------------------------------
// Schedule
// ---------------------------------------------------------------------------------------------

void worker::loop() {
    for (;;) {
        admit();
        if (active_.empty()) {
            std::unique_lock<std::mutex> lk(mu_);
            if (stopping_ && queue_.empty()) return;  // stopping and drained
            cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
            continue;
        }
        for (size_t i = 0; i < active_.size(); ++i) {
            active& a = *active_[i];
            if (!a.gen && !a.done) start(a);
        }
        decode_round(nullptr);
        std::erase_if(active_, [](const std::unique_ptr<active>& a) { return a->done; });
        stats_.busy = static_cast<int64_t>(active_.size());
    }
}

void worker::admit() {
    for (;;) {
        std::shared_ptr<job> j;
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (queue_.empty()) return;
            j = queue_.front();
            if (abort_ || j->cancel) {
                queue_.pop_front();
                gen_result r;
                r.finish = finish_reason::cancelled;
                r.error = abort_ ? "server shutting down" : "client disconnected";
                stats_.jobs_cancelled++;
                j->finish(std::move(r));
                continue;
            }
        }
        slot* sl = choose_slot(j->req);
        if (!sl) return;  // every slot is busy: the job waits for one
        {
            std::lock_guard<std::mutex> lk(mu_);
            queue_.pop_front();  // only this thread pops: still j
            sl->busy = true;
            sl->gauges.busy = true;
        }
        sl->last_used = ++jobs_started_;
        auto a = std::make_unique<active>();
        a->j = std::move(j);
        a->sl = sl;
        active_.push_back(std::move(a));
        stats_.busy = static_cast<int64_t>(active_.size());
    }
}

worker::slot* worker::choose_slot(const gen_request& r) {
    const prompt& in = r.input;
    slot* extend = nullptr;  // a timeline the prompt continues (nothing lost), the longest
    int64_t extend_len = -1;
    slot* empty = nullptr;
    slot* best = nullptr;  // the longest common prefix, least recently used on ties
    int64_t best_len = -1;
    for (const auto& up : slots_) {
        slot& sl = *up;
        if (sl.busy) continue;
        const Session& s = *sl.session;
        const int64_t n = s.n_past();
        if (n == 0) {
            if (!empty) empty = &sl;
            continue;
        }
        int64_t common = s.common_prefix(in.tokens);
        size_t cut = 0;
        if (common < n && cached_prefix_matches(tok_, s.tokens(), in, &cut)) common = n;
        if (common == n && n > extend_len) {
            extend = &sl;
            extend_len = n;
        }
        if (common > best_len || (common == best_len && sl.last_used < best->last_used)) {
            best = &sl;
            best_len = common;
        }
    }
    if (extend) return extend;
    if (empty) return empty;
    const bool room =
        static_cast<int>(slots_.size()) < opts_.parallel &&
        (opts_.kv_budget_bytes == 0 || (slots_.size() + 1) * slot_bytes_ <= opts_.kv_budget_bytes);
    if (room) {
        try {
            std::unique_ptr<slot> sl = make_slot();
            slot* p = sl.get();
            std::lock_guard<std::mutex> lk(mu_);
            slots_.push_back(std::move(sl));
            return p;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "serve: warning: no new session slot (%s); reusing one\n",
                         e.what());
            opts_.parallel = static_cast<int>(slots_.size());
        }
    }
    return best;
}

void worker::start(active& a) {
    job& j = *a.j;
    gen_result& res = a.res;
    a.eo.cancel = [&j, this] { return j.cancel.load() || abort_.load(); };
    a.eo.progress = [&j](int64_t done, int64_t total) {
        gen_event e;
        e.kind = gen_event::type::prefill;
        e.done = done;
        e.total = total;
        j.push(std::move(e));
    };
    a.t0 = clock_type::now();
    bool prompt_done = false;
    try {
        if (opts_.before_job) opts_.before_job();
        const status st = sync_prompt(a);
        a.t1 = clock_type::now();
        res.prefill_s = std::chrono::duration<double>(a.t1 - a.t0).count();
        prompt_done = true;
        if (!st.ok()) {
            res.finish = st.code() == status_code::cancelled ? finish_reason::cancelled
                                                             : finish_reason::error;
            res.error = st.message();
            res.engine_failed_before_output = true;
            res.context_overflow = st.code() == status_code::context_full;
            complete(a);
            return;
        }
        slot& sl = *a.sl;
        stream_env env{tok_, replay_, stats_};
        env.exact_replay = opts_.exact_replay;
        env.mtp_draft = opts_.mtp_draft;
        env.mtp_margin = opts_.mtp_margin;
        env.abort = &abort_;
        env.continued_every = disk(sl) ? continued_step(opts_.disk) : 0;
        env.continued_from = sl.disk_last_saved;
        env.save_continued = [this, &sl] {
            disk_save_current(sl, kvstore::save_reason::continued);
        };
        a.gen = std::make_unique<decode_stream>(env, *sl.session, j, &res);
    } catch (const std::exception& e) {
        fail(a, e, !prompt_done);
    }
}

void worker::fail(active& a, const std::exception& e, bool before_output) {
    // An allocation (or anything else) failing deep in the engine ends this job with an error;
    // the worker and the server go on. The session may have stopped mid-chunk, so it starts
    // over empty rather than trusting a half-written state.
    a.sl->session->reset();
    a.sl->disk_last_saved = 0;
    gen_result& res = a.res;
    const bool oom = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
    res.finish = finish_reason::error;
    res.error = oom ? "out of memory while serving this request" : e.what();
    res.out_of_memory = oom;
    res.engine_failed_before_output = before_output || res.raw.empty();
    std::fprintf(stderr, "serve: request failed: %s\n", res.error.c_str());
    complete(a);
}

void worker::decode_round(const active* skip) {
    size_t generating = 0;
    for (const auto& a : active_)
        if (a.get() != skip && a->gen && !a->done) ++generating;
    // Alone: no other job shares the step and none waits for its prompt, so it may speculate.
    const bool alone = generating == 1 && active_.size() == 1;
    std::vector<active*> ready;
    std::vector<Session*> sessions;
    std::vector<int32_t> tokens;
    for (const auto& up : active_) {
        active& a = *up;
        if (&a == skip || !a.gen || a.done) continue;
        try {
            switch (a.gen->step(alone)) {
                case decode_stream::step_result::eval:
                    ready.push_back(&a);
                    sessions.push_back(a.sl->session.get());
                    tokens.push_back(a.gen->pending());
                    break;
                case decode_stream::step_result::done:
                    complete(a);
                    break;
                case decode_stream::step_result::again:
                    break;
            }
        } catch (const std::exception& e) {
            fail(a, e, false);
        }
    }
    if (ready.empty()) return;
    status st;
    try {
        if (ready.size() == 1) {
            st = sessions[0]->eval(std::span<const int32_t>(tokens.data(), 1), ready[0]->eo);
        } else {
            st = engine_.decode_batch(sessions, tokens);
            stats_.batched_steps++;
            stats_.batched_tokens += ready.size();
        }
    } catch (const std::exception& e) {
        for (active* a : ready) fail(*a, e, false);
        return;
    }
    for (active* a : ready) {
        // A failed shared pass empties its sessions: their continued-save schedule restarts.
        if (!st.ok() && a->sl->session->n_past() == 0) a->sl->disk_last_saved = 0;
        try {
            a->gen->evaluated(st);
            if (a->gen->done()) complete(*a);
        } catch (const std::exception& e) {
            fail(*a, e, false);
        }
    }
}

void worker::complete(active& a) {
    if (a.done) return;
    a.done = true;
    gen_result& res = a.res;
    if (a.gen) res.decode_s = std::chrono::duration<double>(clock_type::now() - a.t1).count();
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
        std::chrono::duration<double>(clock_type::now() - a.j->created).count());
    a.sl->busy = false;
    update_gauges(*a.sl);
    a.j->finish(std::move(res));
}

status worker::sync_prompt(active& a) {
    job& j = *a.j;
    slot& sl = *a.sl;
    Session& s = *sl.session;
    gen_result* res = &a.res;
    const prompt& in = j.req.input;
    if (status st = apply_steering(sl, j.req); !st.ok()) return st;
    std::vector<int32_t> eff = in.tokens;
    const int64_t live = s.n_past();
    res->cache_path = "cold";
    size_t cut = 0;
    if (live > 0) {
        if (s.common_prefix(eff) == live) {
            res->cache_path = "memory-token";
        } else if (cached_prefix_matches(tok_, s.tokens(), in, &cut)) {
            // Rendered-byte prefix with the control tokens in the same places: the live tokens
            // stay authoritative; only the text after the cached byte boundary is tokenized
            // again (BPE may merge across it).
            const auto t = s.tokens();
            eff.assign(t.begin(), t.end());
            encode_trusted(tok_, in.text, in.specials, cut, eff);
            res->cache_path = "memory-text";
        } else {
            res->cache_path = "checkpoint";
        }
    }
    if (eff.empty()) return {status_code::invalid_argument, "empty prompt"};
    const auto too_long = [&] {
        return status{status_code::context_full, "prompt has " + std::to_string(eff.size()) +
                                                     " tokens, but the context size is " +
                                                     std::to_string(s.n_ctx()) + " tokens"};
    };
    res->usage.prompt_tokens = static_cast<int64_t>(eff.size());
    if (static_cast<int64_t>(eff.size()) >= s.n_ctx()) return too_long();

    // No live prefix worth keeping: persist the slot's session before it is replaced, then try
    // the disk for a longer stored prefix of this prompt (protocol §6.2 steps 8-9).
    bool cold = false;
    if (disk(sl) && res->cache_path != "memory-token" && res->cache_path != "memory-text") {
        int64_t usable = 0;  // what in-memory checkpoints would keep
        const int64_t common = s.common_prefix(eff);
        for (int64_t cp : s.checkpoint_positions())
            if (cp <= common) usable = std::max(usable, cp);
        if (usable < opts_.disk.min_tokens) {
            disk_save_live(sl, kvstore::save_reason::evict);
            if (!disk_load(sl, in, &eff, res)) {
                sl.disk_last_saved = 0;  // a miss resets the continued schedule
                cold = usable == 0;
            }
            res->usage.prompt_tokens = static_cast<int64_t>(eff.size());
            if (static_cast<int64_t>(eff.size()) >= s.n_ctx()) return too_long();
        }
    }

    {
        std::lock_guard<std::mutex> lk(mu_);
        last_prompt_ = eff;
    }
    sync_result sr;
    const status st = sync_with_saves(a, eff, cold, &sr);
    const int64_t n = static_cast<int64_t>(eff.size());
    res->usage.cached_tokens = std::clamp<int64_t>(sr.reused, 0, n);
    if (res->cache_path == "checkpoint" && sr.reused == 0) res->cache_path = "cold";
    return st;
}

}  // namespace magnetar::server
