// Speculative decoding over the MTP block (docs/engine.md "Speculative decoding"): draft, verify
// the token and its drafts in one batch, keep the agreeing prefix, roll the rest back.
//
// Rolling back is free in the common case. Compressed and indexer rows are append-only (rows
// past floor(n_past / ratio) are never read); the raw rings hold exactly the window, so one
// rejected position overwrites only the row the next query no longer sees; a frontier slot
// written by a rejected position is rewritten before its block is pooled. Two cases are not
// free: two or more rejected positions (their ring writes reach rows still in the window) and a
// compressor block that a rejected position completed (the pooled frontier moved on). Then the
// small state taken before the step is restored and the kept tokens are evaluated again, which
// gives the same bits (a token's arithmetic never depends on its batch).
#include <algorithm>

#include "core/error.h"
#include "core/format.h"
#include "engine/engine_impl.h"

namespace magnetar {

status Session::eval_speculative(int32_t token, const speculation_options& so,
                                 const token_chooser& choose, speculation_result* out) {
    impl& s = *impl_;
    speculation_result local;
    speculation_result& r = out ? *out : local;
    r = speculation_result{};
    const uint32_t n_vocab = s.eng->info.n_vocab;
    if (token < 0 || static_cast<uint32_t>(token) >= n_vocab) {
        return {status_code::invalid_argument,
                strfmt("eval_speculative: token id %d, expected 0..%u", token, n_vocab - 1)};
    }
    if (!choose) return {status_code::invalid_argument, "eval_speculative: no token chooser"};
    if (so.n_draft < 0 || so.max_keep < 0) {
        return {status_code::invalid_argument,
                "eval_speculative: n_draft and max_keep must not be negative"};
    }
    if (s.n_past + 1 > s.opts.n_ctx) {
        return {status_code::context_full,
                strfmt("eval_speculative: position %lld is past the context of %lld",
                       static_cast<long long>(s.n_past), static_cast<long long>(s.opts.n_ctx))};
    }
    if (s.eng->pipe) {
        return {status_code::unsupported,
                "speculative decoding does not run across a pipeline (mpirun) yet"};
    }
    if (!s.tl->can_draft()) {
        return {status_code::unsupported,
                s.eng->info.arch == "deepseek4"
                    ? "speculative decoding needs an MTP block: this model has none (--mtp FILE)"
                    : "speculative decoding of a DeepSeek V4.1 model needs a session created "
                      "with session_options::drafts (and a model with DSpark stages)"};
    }
    std::lock_guard<std::mutex> lock(s.eng->eval_mutex);
    return s.speculate_locked(token, so, choose, r);
}

status Session::impl::speculate_locked(int32_t token, const speculation_options& so,
                                       const token_chooser& choose, speculation_result& r) {
    const size_t n_vocab = eng->info.n_vocab;
    const int64_t p = n_past;  // position of `token`

    // Drafts fit before the context end and inside the chunk that eval() would run: the batch
    // ends at the next absolute multiple of the chunk size and of the checkpoint interval.
    int64_t end = (p / opts.chunk_size + 1) * opts.chunk_size;
    if (opts.checkpoint_interval > 0) {
        end = std::min(end, (p / opts.checkpoint_interval + 1) * opts.checkpoint_interval);
    }
    end = std::min(end, opts.n_ctx);
    int64_t budget = std::min<int64_t>({so.n_draft, so.max_keep, end - p - 1});
    if (p == 0) budget = 0;  // no state to draft from

    // The small state of before the step, when a rejection could need it.
    const bool backup = budget >= 2 || (budget == 1 && tl->completes_block(p + 1, p + budget));
    r.drafts.assign(static_cast<size_t>(std::max<int64_t>(budget, 0)), 0);
    int made = 0;
    try {
        if (backup) tl->save_small(spec_backup);
        if (budget > 0) {
            draft_row.resize(n_vocab);
            graph::draft_request dr;
            dr.p0 = p - 1;
            dr.token = token;
            dr.max_steps = static_cast<int>(budget);
            dr.min_margin = so.min_margin;
            dr.drafts = r.drafts.data();
            dr.logits = draft_row.data();
            made = tl->draft(dr, ar);
        }
    } catch (const Error& e) {
        eng->be->synchronize();
        return {status_code::invalid_argument, strfmt("eval_speculative: at position %lld: %s",
                                                      static_cast<long long>(p), e.what())};
    }
    r.drafts.resize(static_cast<size_t>(made));
    if (made == 0) {
        status st = eval_locked(std::span<const int32_t>(&token, 1), eval_options{});
        if (!st.ok()) return st;
        r.next = choose(last_logits());
        return {};
    }

    // Verify: the token and its drafts in one batch, every row's logits and final state.
    std::vector<int32_t> batch;
    batch.reserve(static_cast<size_t>(made) + 1);
    batch.push_back(token);
    batch.insert(batch.end(), r.drafts.begin(), r.drafts.end());
    const int64_t m = static_cast<int64_t>(batch.size());
    const int64_t hc_w = tl->hc_row_floats();
    spec_logits.resize(static_cast<size_t>(m) * n_vocab);
    spec_hc.resize(static_cast<size_t>(m * hc_w));
    graph::chunk_request req;
    req.p0 = p;
    req.n = m;
    req.tokens = batch.data();
    req.logits_all = true;
    req.logits = spec_logits.data();
    req.mtp = tl->has_mtp();  // V4: the MTP block advances over the batch
    req.hc_final = hc_w > 0 ? spec_hc.data() : nullptr;
    req.steer = &steer;
    auto run = [&] {
        try {
            tl->run(req, ar, nullptr);
        } catch (const Error& e) {
            eng->be->synchronize();
            throw Error(strfmt("eval_speculative: at position %lld: %s", static_cast<long long>(p),
                               e.what()));
        }
        eng->be->synchronize();
    };
    try {
        run();
    } catch (const Error& e) {
        if (backup) tl->load_small(spec_backup, p);
        return {status_code::invalid_argument, e.what()};
    }

    // Keep drafts while the chooser picks them.
    const auto row = [&](int64_t i) {
        return std::span<const float>(spec_logits.data() + static_cast<size_t>(i) * n_vocab,
                                      n_vocab);
    };
    int64_t kept = 0;
    for (;;) {
        const int32_t c = choose(row(kept));
        const bool keep =
            kept < made && c == r.drafts[static_cast<size_t>(kept)] && (!so.keep || so.keep(c));
        if (!keep) {
            r.next = c;
            break;
        }
        ++kept;
    }
    r.kept = kept;

    // Roll back the rejected positions p + 1 + kept .. p + made.
    const int64_t rejected = made - kept;
    if (rejected >= 2 || (rejected == 1 && tl->completes_block(p + 1 + kept, p + made))) {
        MAGNETAR_ASSERT(backup, "speculative step without the state to roll back to");
        tl->load_small(spec_backup, p);
        req.n = kept + 1;
        req.hc_final = nullptr;
        try {
            run();
        } catch (const Error& e) {
            tl->load_small(spec_backup, p);
            return {status_code::invalid_argument, e.what()};
        }
        r.replayed = true;
    } else if (rejected == 1) {
        tl->set_mtp_state(spec_hc.data() + static_cast<size_t>(kept * hc_w));
    }

    // The timeline and the logits of the kept positions.
    const int64_t n_kept = kept + 1;
    tokens.insert(tokens.end(), batch.begin(), batch.begin() + n_kept);
    n_past = p + n_kept;
    const int64_t rows = opts.all_logits ? n_kept : 1;
    if (logits.size() < static_cast<size_t>(rows) * n_vocab) {
        logits.resize(static_cast<size_t>(rows) * n_vocab);
    }
    const float* first = spec_logits.data() + static_cast<size_t>(n_kept - rows) * n_vocab;
    std::copy(first, first + static_cast<size_t>(rows) * n_vocab, logits.begin());
    n_logit_rows = rows;
    n_mtp_rows = 0;
    mtp_first_pos = p > 0 ? p - 1 : 0;
    if (opts.checkpoint_interval > 0 && n_past % opts.checkpoint_interval == 0) take_checkpoint();
    return {};
}

}  // namespace magnetar
