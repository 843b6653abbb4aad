#include "dist/pipeline.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/format.h"
#include "dist/wire.h"

namespace magnetar::dist {

pipeline::pipeline(const model& m, const pipeline_options& o)
    : bf16_(o.wire_bf16), timeout_s_(o.request_timeout_s) {
    const hparams& hp = m.hp();
    if (hp.is_v41()) {
        // The stages run graph::forward over kv::cache; the V4.1 graph has no stage split yet.
        throw Error(
            strfmt("pipeline: DeepSeek V4.1 (%s) models do not run pipelined across MPI "
                   "ranks yet; run them in a single process",
                   hp.arch.c_str()));
    }
    hc_width_ = static_cast<int64_t>(hp.n_hc) * hp.n_embd;
    n_vocab_ = hp.n_vocab;
    const int n = size();
    if (n > k_max_stages)
        throw Error(strfmt("pipeline: %d ranks, at most %d stages are supported", n, k_max_stages));
    const weight_map w = layer_weight_bytes(m);
    const std::vector<layer_range> split = split_layers(o.layers, n, w);

    load_request req;
    if (o.model_path.size() >= sizeof(req.model_path) || o.mtp_path.size() >= sizeof(req.mtp_path))
        throw Error("pipeline: model path too long");
    std::snprintf(req.model_path, sizeof(req.model_path), "%s", o.model_path.c_str());
    std::snprintf(req.mtp_path, sizeof(req.mtp_path), "%s", o.mtp_path.c_str());
    req.n_threads = o.n_threads;
    req.reference_kernels = o.reference_kernels ? 1 : 0;
    req.exact_matmul = o.exact_matmul ? 1 : 0;
    req.n_stages = n;
    for (int i = 0; i < n; ++i) {
        req.layer_begin[i] = split[static_cast<size_t>(i)].first;
        req.layer_end[i] = split[static_cast<size_t>(i)].second;
    }
    const std::string fp = model_fingerprint(o.model_path, m.file().data_offset(), o.mtp_path,
                                             o.mtp_path.empty() ? 0 : m.mtp_file()->data_offset());
    cmd_header h = header(op::load, -1);
    h.data_bytes = sizeof(req);
    for (int r = 1; r < n; ++r) {
        send(r, tag_cmd, &h, sizeof(h));
        send(r, tag_cmd_data, &req, sizeof(req));
    }
    stages_.resize(static_cast<size_t>(n));
    stages_[0] = {split[0], stage_bytes(w, split[0], hp.n_layer), host_name()};
    // Every rank answers, even after a failure elsewhere, so that all errors are reported.
    std::string errors;
    for (int r = 1; r < n; ++r) {
        reply_header rh;
        int from = 0;
        recv(-1, tag_reply, &rh, sizeof(rh), timeout_s_, "handshake answer", &from);
        std::vector<uint8_t> data(rh.data_bytes);
        if (!data.empty())
            recv(from, tag_reply_data, data.data(), data.size(), timeout_s_, "handshake");
        if (rh.magic != k_magic || rh.version != k_version) {
            errors += strfmt(
                "\n  rank %d speaks pipeline protocol %u, rank 0 speaks %u (run the "
                "same magnetar build everywhere)",
                from, static_cast<unsigned>(rh.version), static_cast<unsigned>(k_version));
            continue;
        }
        if (!rh.ok) {
            errors += "\n  cannot load the model on " + std::string(data.begin(), data.end());
            continue;
        }
        hello hi;
        if (data.size() != sizeof(hi)) {
            errors += strfmt("\n  rank %d: malformed handshake answer", from);
            continue;
        }
        std::memcpy(&hi, data.data(), sizeof(hi));
        hi.fingerprint[64] = '\0';
        hi.host[sizeof(hi.host) - 1] = '\0';
        if (fp != hi.fingerprint) {
            errors += strfmt(
                "\n  rank %d (%s) loaded a different model: fingerprint %.16s..., "
                "rank 0 has %.16s... (SHA-256 of the GGUF metadata and tensor "
                "directory; every host needs the same file at %s)",
                from, hi.host, hi.fingerprint, fp.c_str(), o.model_path.c_str());
        }
        if (hi.layer_begin != split[static_cast<size_t>(from)].first ||
            hi.layer_end != split[static_cast<size_t>(from)].second) {
            errors += strfmt("\n  rank %d (%s) holds layers %u:%u, expected %u:%u", from, hi.host,
                             hi.layer_begin, hi.layer_end, split[static_cast<size_t>(from)].first,
                             split[static_cast<size_t>(from)].second);
        }
        stages_[static_cast<size_t>(from)] = {
            {hi.layer_begin, hi.layer_end}, hi.stage_weight_bytes, hi.host};
    }
    if (!errors.empty()) throw Error("pipeline handshake failed:" + errors);
}

pipeline::~pipeline() {
    for (async_send& s : sends_) s.wait();
}

std::string pipeline::describe() const {
    std::string s = strfmt("%d stages, HC state as %s:", n_stages(), bf16_ ? "BF16" : "F32");
    for (size_t i = 0; i < stages_.size(); ++i) {
        s += strfmt(" [rank %zu %s: layers %u:%u, %s]", i, stages_[i].host.c_str(),
                    stages_[i].range.first, stages_[i].range.second,
                    human_bytes(stages_[i].weight_bytes).c_str());
    }
    return s;
}

cmd_header pipeline::header(op code, int32_t id) const {
    cmd_header h;
    h.code = code;
    h.session = id;
    return h;
}

reply_header pipeline::await_reply(op code, std::vector<uint8_t>* data, double timeout_s) {
    const int last = size() - 1;
    reply_header rh;
    recv(last, tag_reply, &rh, sizeof(rh), timeout_s, "answer of the last stage");
    if (rh.magic != k_magic || rh.code != code)
        throw Error(strfmt("pipeline: unexpected answer (op %u) from rank %d, expected op %u",
                           static_cast<unsigned>(rh.code), last, static_cast<unsigned>(code)));
    std::vector<uint8_t> local;
    std::vector<uint8_t>& d = data ? *data : local;
    d.resize(rh.data_bytes);
    if (!d.empty()) recv(last, tag_reply_data, d.data(), d.size(), timeout_s, "answer data");
    if (!rh.ok) throw Error("pipeline: " + std::string(d.begin(), d.end()));
    return rh;
}

void pipeline::chain(const cmd_header& h) {
    MAGNETAR_ASSERT(in_flight_.empty(), "pipeline: command while chunks are in flight");
    send(1, tag_cmd, &h, sizeof(h));
    // The stages may be busy finishing earlier work: no timeout beyond the job's own checks.
    await_reply(h.code, nullptr, 0);
}

int32_t pipeline::create_session(int64_t n_ctx, int64_t chunk, int64_t checkpoint_interval,
                                 int max_checkpoints) {
    const int32_t id = next_session_++;
    cmd_header h = header(op::create_session, id);
    h.a = n_ctx;
    h.b = chunk;
    h.c = checkpoint_interval;
    h.flags = static_cast<uint32_t>(std::max(0, max_checkpoints));
    chain(h);
    return id;
}

void pipeline::destroy_session(int32_t id) {
    chain(header(op::destroy_session, id));
}

void pipeline::clear(int32_t id) {
    chain(header(op::clear, id));
}

void pipeline::checkpoint(int32_t id) {
    chain(header(op::checkpoint, id));
}

int32_t pipeline::restore(int32_t id, int64_t pos) {
    MAGNETAR_ASSERT(in_flight_.empty(), "pipeline: command while chunks are in flight");
    cmd_header h = header(op::restore, id);
    h.a = pos;
    send(1, tag_cmd, &h, sizeof(h));
    return static_cast<int32_t>(await_reply(op::restore, nullptr, 0).a);
}

std::vector<uint8_t> pipeline::save_state(int32_t id, int64_t n_past, uint64_t bytes) {
    MAGNETAR_ASSERT(in_flight_.empty(), "pipeline: command while chunks are in flight");
    cmd_header h = header(op::save_state, id);
    h.a = n_past;
    send(1, tag_cmd, &h, sizeof(h));
    // As chain(): the stages may be busy, no timeout beyond the job's own checks.
    const int last = size() - 1;
    reply_header rh;
    recv(last, tag_reply, &rh, sizeof(rh), 0, "answer of the last stage");
    if (rh.magic != k_magic || rh.code != op::save_state)
        throw Error(strfmt("pipeline: unexpected answer (op %u) from rank %d, expected op %u",
                           static_cast<unsigned>(rh.code), last,
                           static_cast<unsigned>(op::save_state)));
    std::vector<uint8_t> d(rh.data_bytes);
    recv_state(last, tag_reply_data, d.data(), d.size(), 0, "snapshot data");
    if (!rh.ok) throw Error("pipeline: " + std::string(d.begin(), d.end()));
    if (d.size() != bytes)
        throw Error(strfmt("pipeline: the stages sent %zu bytes of snapshot, expected %llu",
                           d.size(), static_cast<unsigned long long>(bytes)));
    return d;
}

int32_t pipeline::load_state(int32_t id, int64_t n_past, const std::vector<uint8_t>& data) {
    MAGNETAR_ASSERT(in_flight_.empty(), "pipeline: command while chunks are in flight");
    cmd_header h = header(op::load_state, id);
    h.a = n_past;
    h.data_bytes = data.size();
    send(1, tag_cmd, &h, sizeof(h));
    send_state(1, tag_cmd_data, data.data(), data.size());
    return static_cast<int32_t>(await_reply(op::load_state, nullptr, 0).a);
}

void pipeline::send_eval(int32_t id, int64_t p0, int64_t n, const int32_t* tokens, const float* hc,
                         uint32_t flags, float* logits, size_t logits_floats) {
    const int b = next_buf_;
    next_buf_ ^= 1;
    // Wait for the buffer's previous send, taking answers meanwhile.
    int sleep_us = 10;
    while (!sends_[b].test()) {
        if (!in_flight_.empty() && probe(size() - 1, tag_reply)) {
            take_reply();
            continue;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
        sleep_us = std::min(sleep_us * 2, 200);
    }
    std::vector<uint8_t>& buf = send_buf_[b];
    buf.resize(eval_data_bytes(n, hc_width_, bf16_));
    encode_eval(tokens, hc, n, hc_width_, bf16_, buf.data());
    cmd_header h = header(op::eval, id);
    h.a = p0;
    h.b = n;
    h.flags = flags | (bf16_ ? eval_hc_bf16 : 0u);
    h.data_bytes = buf.size();
    send(1, tag_cmd, &h, sizeof(h));
    sends_[b].start(1, tag_cmd_data, buf.data(), buf.size());
    in_flight_.push_back({logits, logits_floats});
}

void pipeline::take_reply() {
    MAGNETAR_ASSERT(!in_flight_.empty(), "pipeline: no chunk in flight");
    const int last = size() - 1;
    reply_header rh;
    recv(last, tag_reply, &rh, sizeof(rh), 0, "answer of the last stage");
    const chunk_dst dst = in_flight_.front();
    in_flight_.pop_front();
    if (rh.magic != k_magic || rh.code != op::eval)
        throw Error(strfmt("pipeline: unexpected answer (op %u) from rank %d to an eval",
                           static_cast<unsigned>(rh.code), last));
    if (rh.data_bytes > 0) {
        if (!dst.logits || rh.data_bytes > dst.floats * sizeof(float))
            throw Error("pipeline: the last stage sent more logits than asked for");
        recv(last, tag_reply_data, dst.logits, static_cast<size_t>(rh.data_bytes), 0, "logits");
    }
    if (on_reply) on_reply({static_cast<int32_t>(rh.a), rh.b});
}

void pipeline::wait_all() {
    while (!in_flight_.empty()) take_reply();
    for (async_send& s : sends_) s.wait();
}

void pipeline::fetch_logits(int32_t id, float* out) {
    MAGNETAR_ASSERT(in_flight_.empty(), "pipeline: request while chunks are in flight");
    const cmd_header h = header(op::fetch_logits, id);
    send(size() - 1, tag_cmd, &h, sizeof(h));
    std::vector<uint8_t> d;
    await_reply(op::fetch_logits, &d, timeout_s_);
    if (d.size() != static_cast<size_t>(n_vocab_) * sizeof(float))
        throw Error("pipeline: logits row of the wrong size");
    std::memcpy(out, d.data(), d.size());
}

int32_t pipeline::sample(int32_t id, sampler& s, const sampling_params& p) {
    MAGNETAR_ASSERT(in_flight_.empty(), "pipeline: request while chunks are in flight");
    sample_request sr;
    sr.temperature = p.temperature;
    sr.top_k = p.top_k;
    sr.top_p = p.top_p;
    sr.min_p = p.min_p;
    sr.rng_state = s.rng().state();
    cmd_header h = header(op::sample, id);
    h.data_bytes = sizeof(sr);
    send(size() - 1, tag_cmd, &h, sizeof(h));
    send(size() - 1, tag_cmd_data, &sr, sizeof(sr));
    const reply_header rh = await_reply(op::sample, nullptr, timeout_s_);
    s.rng().reseed(static_cast<uint64_t>(rh.b));
    return static_cast<int32_t>(rh.a);
}

std::vector<token_logprob> pipeline::top_logprobs(int32_t id, int k) {
    MAGNETAR_ASSERT(in_flight_.empty(), "pipeline: request while chunks are in flight");
    cmd_header h = header(op::top_logprobs, id);
    h.a = k;
    send(size() - 1, tag_cmd, &h, sizeof(h));
    std::vector<uint8_t> d;
    const reply_header rh = await_reply(op::top_logprobs, &d, timeout_s_);
    std::vector<token_logprob> out(static_cast<size_t>(rh.a));
    if (d.size() != out.size() * sizeof(wire_logprob))
        throw Error("pipeline: malformed top-logprob answer");
    for (size_t i = 0; i < out.size(); ++i) {
        wire_logprob w;
        std::memcpy(&w, d.data() + i * sizeof(w), sizeof(w));
        out[i] = {w.id, w.logit, w.logprob};
    }
    return out;
}

double pipeline::logprob_of(int32_t id, int32_t token) {
    MAGNETAR_ASSERT(in_flight_.empty(), "pipeline: request while chunks are in flight");
    cmd_header h = header(op::logprob_of, id);
    h.a = token;
    send(size() - 1, tag_cmd, &h, sizeof(h));
    std::vector<uint8_t> d;
    await_reply(op::logprob_of, &d, timeout_s_);
    double v = 0;
    if (d.size() != sizeof(v)) throw Error("pipeline: malformed logprob answer");
    std::memcpy(&v, d.data(), sizeof(v));
    return v;
}

double pipeline::ping(size_t bytes) {
    MAGNETAR_ASSERT(in_flight_.empty(), "pipeline: request while chunks are in flight");
    std::vector<uint8_t> data(bytes, 0);
    cmd_header h = header(op::ping, -1);
    h.data_bytes = bytes;
    const auto t0 = std::chrono::steady_clock::now();
    send(1, tag_cmd, &h, sizeof(h));
    if (bytes > 0) send(1, tag_cmd_data, data.data(), bytes);
    await_reply(op::ping, nullptr, timeout_s_);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void pipeline::shutdown_all() {
    if (!active() || rank() != 0) return;
    cmd_header h;
    h.code = op::shutdown;
    for (int r = 1; r < size(); ++r) send(r, tag_cmd, &h, sizeof(h));
}

}  // namespace magnetar::dist
