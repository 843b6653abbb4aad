#include "dist/stage.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/arena.h"
#include "core/error.h"
#include "core/format.h"
#include "core/thread_pool.h"
#include "dist/comm.h"
#include "dist/protocol.h"
#include "dist/split.h"
#include "dist/wire.h"
#include "graph/forward.h"
#include "kv/kv_cache.h"
#include "kv/payload.h"
#include "magnetar/sampler.h"
#include "model/model.h"

namespace magnetar::dist {

namespace {

struct stage_session {
    backend::backend* be = nullptr;
    std::unique_ptr<kv::cache> cache;
    void* arena_buffer = nullptr;
    size_t arena_bytes = 0;
    arena ar;
    int64_t n_past = 0;
    int64_t chunk = 0;
    int64_t every = 0;
    int max_checkpoints = 0;
    std::vector<float> logits;  // last stage: rows of the latest chunk [rows, n_vocab]
    int64_t n_rows = 0;
    struct checkpoint {
        int64_t pos = 0;
        std::vector<float> small;
        std::vector<float> logits;
    };
    std::deque<checkpoint> checkpoints;

    ~stage_session() {
        if (arena_buffer) be->free_buffer(arena_buffer);
    }
};

class worker {
  public:
    int run();

  private:
    void load(const cmd_header& h);
    void create(const cmd_header& h);
    void eval(const cmd_header& h, std::vector<uint8_t>& data);
    void take_checkpoint(stage_session& s);
    void save_state(const cmd_header& h, std::vector<uint8_t>& data);
    void load_state(const cmd_header& h, std::vector<uint8_t>& data);
    // Forwards a snapshot command with its data, or (last stage) answers rank 0 with it.
    void pass_state(const cmd_header& h, int64_t a, const std::vector<uint8_t>& data);
    std::span<const float> last_row(const stage_session& s) const;
    void reply(op code, int64_t a, int64_t b, const void* data, size_t n, bool ok = true);
    void forward_cmd(const cmd_header& h, const void* data, size_t n);
    stage_session& session(int32_t id);
    bool is_last() const { return rank() == size() - 1; }

    std::unique_ptr<model> m_;
    std::unique_ptr<backend::cpu_backend> be_;
    std::unique_ptr<graph::forward> fwd_;
    uint32_t l0_ = 0, l1_ = 0;
    bool loaded_ = false;
    std::map<int32_t, std::unique_ptr<stage_session>> sessions_;
    std::vector<float> hc_;
    std::vector<int32_t> ids_;
    std::vector<uint8_t> out_;
};

void worker::reply(op code, int64_t a, int64_t b, const void* data, size_t n, bool ok) {
    reply_header r;
    r.code = code;
    r.rank = rank();
    r.ok = ok ? 1 : 0;
    r.a = a;
    r.b = b;
    r.data_bytes = n;
    send(0, tag_reply, &r, sizeof(r));
    if (n > 0) send(0, tag_reply_data, data, n);
}

void worker::forward_cmd(const cmd_header& h, const void* data, size_t n) {
    cmd_header f = h;
    f.data_bytes = n;
    send(rank() + 1, tag_cmd, &f, sizeof(f));
    if (n > 0) send(rank() + 1, tag_cmd_data, data, n);
}

stage_session& worker::session(int32_t id) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) throw Error(strfmt("pipeline: unknown session %d", id));
    return *it->second;
}

std::span<const float> worker::last_row(const stage_session& s) const {
    const size_t v = m_->hp().n_vocab;
    const int64_t row = s.n_rows > 0 ? s.n_rows - 1 : 0;
    return {s.logits.data() + static_cast<size_t>(row) * v, v};
}

void worker::load(const cmd_header& h) {
    load_request req;
    std::vector<uint8_t> raw(h.data_bytes);
    recv(0, tag_cmd_data, raw.data(), raw.size(), 0, "load request");
    if (raw.size() != sizeof(req)) throw Error("pipeline: malformed load request");
    std::memcpy(&req, raw.data(), sizeof(req));
    hello hi;
    std::snprintf(hi.host, sizeof(hi.host), "%s", host_name().c_str());
    sessions_.clear();
    fwd_.reset();
    be_.reset();
    m_.reset();
    loaded_ = false;
    try {
        if (req.n_stages != size())
            throw Error(
                strfmt("the request is for %d stages, the job has %d ranks", req.n_stages, size()));
        load_options lo;
        lo.mtp_path = req.mtp_path;
        m_ = model::load(req.model_path, lo);
        if (m_->hp().is_v41()) {
            throw Error(
                strfmt("DeepSeek V4.1 (%s) models do not run pipelined across MPI ranks "
                       "yet; run them in a single process",
                       m_->hp().arch.c_str()));
        }
        l0_ = req.layer_begin[rank()];
        l1_ = req.layer_end[rank()];
        if (l0_ >= l1_ || l1_ > m_->hp().n_layer)
            throw Error(strfmt("layer range %u:%u does not fit the model's %u layers", l0_, l1_,
                               m_->hp().n_layer));
        const std::string fp =
            model_fingerprint(req.model_path, m_->file().data_offset(), req.mtp_path,
                              req.mtp_path[0] ? m_->mtp_file()->data_offset() : 0);
        std::snprintf(hi.fingerprint, sizeof(hi.fingerprint), "%s", fp.c_str());
        hi.layer_begin = l0_;
        hi.layer_end = l1_;
        hi.stage_weight_bytes = stage_bytes(layer_weight_bytes(*m_), {l0_, l1_}, m_->hp().n_layer);
        be_ = std::make_unique<backend::cpu_backend>(
            req.n_threads > 0 ? req.n_threads : thread_pool::physical_cores(),
            req.reference_kernels != 0, req.exact_matmul != 0);
        fwd_ = std::make_unique<graph::forward>(*m_, *be_);
        loaded_ = true;
    } catch (const std::exception& e) {
        const std::string msg = strfmt("rank %d (%s): %s", rank(), hi.host, e.what());
        reply(op::load, 0, 0, msg.data(), msg.size(), false);
        return;
    }
    reply(op::load, 0, 0, &hi, sizeof(hi));
}

void worker::create(const cmd_header& h) {
    const hparams& hp = m_->hp();
    auto s = std::make_unique<stage_session>();
    s->be = be_.get();
    const int64_t n_ctx = h.a;
    s->chunk = std::min(h.b, n_ctx);
    s->every = h.c;
    s->max_checkpoints = static_cast<int>(h.flags);
    const bool mtp = m_->weights().mtp.has_value();
    s->cache = std::make_unique<kv::cache>(*be_, hp, n_ctx, mtp, l0_, l1_);
    be_->reserve(graph::scratch_limits(hp, n_ctx));
    s->arena_bytes = graph::measure_arena(*m_, *s->cache, s->chunk, l0_, l1_, s->cache->has_mtp());
    s->arena_buffer = be_->alloc_buffer(s->arena_bytes);
    s->ar = arena(s->arena_buffer, s->arena_bytes);
    if (is_last()) s->logits.assign(hp.n_vocab, 0.0f);
    sessions_[h.session] = std::move(s);
}

void worker::take_checkpoint(stage_session& s) {
    if (s.max_checkpoints <= 0) return;
    be_->synchronize();
    while (!s.checkpoints.empty() && s.checkpoints.back().pos >= s.n_past) s.checkpoints.pop_back();
    stage_session::checkpoint cp;
    if (static_cast<int>(s.checkpoints.size()) >= s.max_checkpoints) {
        cp = std::move(s.checkpoints.front());
        s.checkpoints.pop_front();
    }
    cp.pos = s.n_past;
    s.cache->save_small(cp.small);
    if (is_last()) {
        const std::span<const float> l = last_row(s);
        cp.logits.assign(l.begin(), l.end());
    }
    s.checkpoints.push_back(std::move(cp));
}

void worker::pass_state(const cmd_header& h, int64_t a, const std::vector<uint8_t>& data) {
    if (is_last()) {
        reply_header r;
        r.code = h.code;
        r.rank = rank();
        r.a = a;
        r.data_bytes = data.size();
        send(0, tag_reply, &r, sizeof(r));
        send_state(0, tag_reply_data, data.data(), data.size());
    } else {
        cmd_header f = h;
        f.data_bytes = data.size();
        send(rank() + 1, tag_cmd, &f, sizeof(f));
        send_state(rank() + 1, tag_cmd_data, data.data(), data.size());
    }
}

void worker::save_state(const cmd_header& h, std::vector<uint8_t>& data) {
    stage_session& s = session(h.session);
    if (h.a != s.n_past)
        throw Error(strfmt("pipeline: snapshot of a %lld-token timeline, this stage holds %lld",
                           static_cast<long long>(h.a), static_cast<long long>(s.n_past)));
    be_->synchronize();
    kv::write_payload_layers(*be_, m_->hp(), *s.cache, s.n_past, l0_, l1_,
                             [&data](const void* p, size_t n) {
                                 const uint8_t* b = static_cast<const uint8_t*>(p);
                                 data.insert(data.end(), b, b + n);
                                 return true;
                             });
    pass_state(h, 0, data);
}

void worker::load_state(const cmd_header& h, std::vector<uint8_t>& data) {
    const hparams& hp = m_->hp();
    stage_session& s = session(h.session);
    const int64_t n = h.a;
    const size_t row = static_cast<size_t>(hp.n_vocab) * sizeof(float);
    uint64_t mine = 0;
    for (uint32_t il = l0_; il < l1_; ++il) mine += kv::payload_layer_size(hp, n, il);
    const bool size_ok = n >= 1 && n <= s.cache->n_ctx() && data.size() >= row + mine &&
                         (!is_last() || data.size() == row + mine);
    if (!size_ok)
        throw Error(
            strfmt("pipeline: snapshot of %lld tokens with %zu bytes does not fit this "
                   "stage (layers %u:%u, context %lld)",
                   static_cast<long long>(n), data.size(), l0_, l1_,
                   static_cast<long long>(s.cache->n_ctx())));
    s.cache->clear_small();
    s.checkpoints.clear();
    size_t at = row;
    kv::read_payload_layers(*be_, hp, *s.cache, n, l0_, l1_, [&](void* p, size_t k) {
        if (k > data.size() - at) return false;
        std::memcpy(p, data.data() + at, k);
        at += k;
        return true;
    });
    be_->synchronize();
    s.n_past = n;
    if (is_last()) {
        std::memcpy(s.logits.data(), data.data(), row);
        s.n_rows = 1;
        const std::vector<uint8_t> none;
        pass_state(h, sampler::argmax(last_row(s)), none);
        return;
    }
    data.erase(data.begin() + static_cast<std::ptrdiff_t>(row),
               data.begin() + static_cast<std::ptrdiff_t>(row + mine));
    pass_state(h, 0, data);
}

void worker::eval(const cmd_header& h, std::vector<uint8_t>& data) {
    const hparams& hp = m_->hp();
    stage_session& s = session(h.session);
    const int64_t n = h.b;
    const int64_t hc_w = static_cast<int64_t>(hp.n_hc) * hp.n_embd;
    const bool bf16 = (h.flags & eval_hc_bf16) != 0;
    if (h.a != s.n_past || n < 1 || n > s.chunk || data.size() != eval_data_bytes(n, hc_w, bf16)) {
        throw Error(
            strfmt("pipeline: eval of %lld tokens at %lld does not follow this stage's "
                   "timeline (n_past %lld)",
                   static_cast<long long>(n), static_cast<long long>(h.a),
                   static_cast<long long>(s.n_past)));
    }
    ids_.resize(static_cast<size_t>(n));
    hc_.resize(static_cast<size_t>(n * hc_w));
    decode_eval(data.data(), n, hc_w, bf16, ids_.data(), hc_.data());
    graph::chunk_request req;
    req.p0 = h.a;
    req.n = n;
    req.tokens = ids_.data();
    req.layer_begin = l0_;
    req.layer_end = l1_;
    req.hc_in = hc_.data();
    const bool all = (h.flags & eval_logits_all) != 0;
    if (is_last()) {
        const size_t rows = all ? static_cast<size_t>(n) : 1;
        if (s.logits.size() < rows * hp.n_vocab) s.logits.resize(rows * hp.n_vocab);
        req.logits_all = all;
        req.logits_last = !all;
        req.logits = s.logits.data();
        req.mtp = (h.flags & eval_mtp) != 0 && s.cache->has_mtp();
    } else {
        req.hc_out = hc_.data();
    }
    fwd_->run(req, *s.cache, s.ar, nullptr);
    be_->synchronize();
    s.n_past += n;
    if (is_last()) s.n_rows = all ? n : 1;
    if (s.every > 0 && s.n_past % s.every == 0) take_checkpoint(s);
    if (!is_last()) {
        out_.resize(eval_data_bytes(n, hc_w, bf16));
        encode_eval(ids_.data(), hc_.data(), n, hc_w, bf16, out_.data());
        forward_cmd(h, out_.data(), out_.size());
        return;
    }
    const int32_t best = sampler::argmax(last_row(s));
    const bool send_rows = (h.flags & (eval_logits_all | eval_logits_last)) != 0;
    const size_t rows = send_rows ? static_cast<size_t>(s.n_rows) : 0;
    reply(op::eval, best, s.n_past, s.logits.data(), rows * hp.n_vocab * sizeof(float));
}

int worker::run() {
    std::vector<uint8_t> data;
    for (;;) {
        cmd_header h;
        int from = 0;
        const size_t got = recv(-1, tag_cmd, &h, sizeof(h), 0, "command", &from);
        if (got != sizeof(h) || h.magic != k_magic || h.version != k_version) {
            throw Error(
                strfmt("pipeline: rank %d sent a message of protocol version %u (this "
                       "rank speaks %u): every rank must run the same magnetar build",
                       from, static_cast<unsigned>(h.version), static_cast<unsigned>(k_version)));
        }
        if (h.code == op::shutdown) return 0;
        if (h.code == op::load) {
            load(h);
            continue;
        }
        if (!loaded_ && h.code != op::ping)
            throw Error("pipeline: session command before the model was loaded");
        data.resize(h.data_bytes);
        if (h.code == op::save_state || h.code == op::load_state) {
            recv_state(from, tag_cmd_data, data.data(), data.size(), 0, "snapshot data");
        } else if (h.data_bytes > 0) {
            recv(from, tag_cmd_data, data.data(), data.size(), 0, "command data");
        }
        const bool chain = h.code == op::create_session || h.code == op::destroy_session ||
                           h.code == op::clear || h.code == op::checkpoint || h.code == op::restore;
        switch (h.code) {
            case op::create_session:
                create(h);
                break;
            case op::destroy_session:
                sessions_.erase(h.session);
                break;
            case op::clear: {
                stage_session& s = session(h.session);
                s.cache->clear_small();
                s.checkpoints.clear();
                s.n_past = 0;
                s.n_rows = 0;
                break;
            }
            case op::checkpoint:
                take_checkpoint(session(h.session));
                break;
            case op::restore: {
                stage_session& s = session(h.session);
                const stage_session::checkpoint* cp = nullptr;
                for (const auto& c : s.checkpoints) {
                    if (c.pos == h.a) cp = &c;
                }
                if (!cp)
                    throw Error(strfmt("pipeline: no checkpoint at %lld on this stage",
                                       static_cast<long long>(h.a)));
                s.cache->load_small(cp->small);
                if (is_last()) {
                    std::copy(cp->logits.begin(), cp->logits.end(), s.logits.begin());
                    s.n_rows = 1;
                }
                s.n_past = cp->pos;
                while (!s.checkpoints.empty() && s.checkpoints.back().pos > s.n_past)
                    s.checkpoints.pop_back();
                be_->synchronize();
                break;
            }
            case op::eval:
                eval(h, data);
                break;
            case op::save_state:
                save_state(h, data);
                break;
            case op::load_state:
                load_state(h, data);
                break;
            case op::fetch_logits: {
                const std::span<const float> l = last_row(session(h.session));
                reply(h.code, 0, 0, l.data(), l.size_bytes());
                break;
            }
            case op::sample: {
                sample_request sr;
                if (data.size() != sizeof(sr)) throw Error("pipeline: malformed sample request");
                std::memcpy(&sr, data.data(), sizeof(sr));
                sampling_params p;
                p.temperature = sr.temperature;
                p.top_k = sr.top_k;
                p.top_p = sr.top_p;
                p.min_p = sr.min_p;
                p.seed = sr.rng_state;
                sampler smp(p, m_->hp().n_vocab);
                const int32_t tok = smp.sample(last_row(session(h.session)));
                reply(h.code, tok, static_cast<int64_t>(smp.rng().state()), nullptr, 0);
                break;
            }
            case op::top_logprobs: {
                std::vector<token_logprob> tops;
                magnetar::top_logprobs(last_row(session(h.session)), static_cast<int>(h.a), tops);
                std::vector<wire_logprob> w(tops.size());
                for (size_t i = 0; i < tops.size(); ++i)
                    w[i] = {tops[i].id, tops[i].logit, tops[i].logprob};
                reply(h.code, static_cast<int64_t>(w.size()), 0, w.data(),
                      w.size() * sizeof(wire_logprob));
                break;
            }
            case op::logprob_of: {
                const double lp =
                    token_logprob_of(last_row(session(h.session)), static_cast<int32_t>(h.a));
                reply(h.code, 0, 0, &lp, sizeof(lp));
                break;
            }
            case op::ping:
                if (is_last()) {
                    reply(h.code, 0, 0, nullptr, 0);
                } else {
                    forward_cmd(h, data.data(), data.size());
                }
                break;
            case op::load:
            case op::shutdown:
                break;
        }
        if (chain) {
            if (is_last()) {
                int64_t best = 0;
                if (h.code == op::restore) best = sampler::argmax(last_row(session(h.session)));
                reply(h.code, best, 0, nullptr, 0);
            } else {
                forward_cmd(h, nullptr, 0);
            }
        }
    }
}

}  // namespace

int run_worker() {
    try {
        worker w;
        return w.run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "magnetar: error: rank %d: %s\n", rank(), e.what());
        std::fflush(stderr);
        abort_job(1);
    }
}

}  // namespace magnetar::dist
