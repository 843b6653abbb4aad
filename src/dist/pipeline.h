// Rank 0's side of the pipeline: the handshake with every stage, and the session commands
// the engine's sessions send down the chain (protocol.h).
//
// Owns: the layer split, the load request and the checks on the answers (same model
// fingerprint, the layer ranges asked for), the in-flight eval chunks (two send buffers, so
// rank 0 computes chunk i + 1 while chunk i travels) and the requests about the last stage's
// logits. Does not own: rank 0's own stage (the engine's session runs it) or transport.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "dist/protocol.h"
#include "dist/split.h"
#include "magnetar/sampler.h"
#include "model/model.h"

namespace magnetar::dist {

struct pipeline_options {
    std::string model_path;
    std::string mtp_path;
    int n_threads = 0;
    bool reference_kernels = false;
    bool exact_matmul = false;
    std::string layers = "auto";  // split_layers() spec
    bool wire_bf16 = true;
    double request_timeout_s = 120;  // handshake and logits requests
};

struct stage_info {
    layer_range range;
    uint64_t weight_bytes = 0;
    std::string host;
};

struct eval_reply {
    int32_t argmax = 0;  // of the chunk's last row
    int64_t n_past = 0;  // the last stage's position after the chunk
};

class pipeline {
  public:
    // Splits the layers of `m` (loaded on rank 0 with `o`), asks every rank to load its stage
    // and checks the answers. Throws magnetar::Error with the rank, host and reason.
    pipeline(const model& m, const pipeline_options& o);
    ~pipeline();

    int n_stages() const { return static_cast<int>(stages_.size()); }
    const std::vector<stage_info>& stages() const { return stages_; }
    layer_range local_range() const { return stages_[0].range; }
    bool wire_bf16() const { return bf16_; }
    std::string describe() const;

    int32_t create_session(int64_t n_ctx, int64_t chunk, int64_t checkpoint_interval,
                           int max_checkpoints);
    void destroy_session(int32_t id);
    void clear(int32_t id);
    void checkpoint(int32_t id);
    // Returns the argmax of the restored logits row.
    int32_t restore(int32_t id, int64_t pos);

    // Snapshots (docs/distributed.md): the payload sections (kv/payload.h) of the layers of
    // stages 1..N-1 of an n_past-token timeline, in layer order (`bytes` expected).
    std::vector<uint8_t> save_state(int32_t id, int64_t n_past, uint64_t bytes);
    // Loads an n_past-token timeline into stages 1..N-1: `data` is the logits row [n_vocab]
    // f32 followed by their sections in layer order. Returns the argmax of the row.
    int32_t load_state(int32_t id, int64_t n_past, const std::vector<uint8_t>& data);

    // Sends one chunk (rank 0's output state hc [n, n_hc*D]) to stage 1 without waiting for
    // it: two send buffers, so rank 0 computes the next chunk while this one travels. The
    // chunk's logits rows (flags eval_logits_all / eval_logits_last) will be written to
    // logits [logits_floats] when its answer arrives. While waiting for a send buffer the
    // answers that have arrived are taken (the last stage never blocks on rank 0).
    void send_eval(int32_t id, int64_t p0, int64_t n, const int32_t* tokens, const float* hc,
                   uint32_t flags, float* logits, size_t logits_floats);
    int pending() const { return static_cast<int>(in_flight_.size()); }
    // Waits until every chunk sent has been answered.
    void wait_all();
    // Called for every answered chunk, in order.
    std::function<void(const eval_reply&)> on_reply;

    void fetch_logits(int32_t id, float* out);
    // Samples on the last stage with s's parameters and generator state; advances s's
    // generator as a local draw would.
    int32_t sample(int32_t id, sampler& s, const sampling_params& p);
    std::vector<token_logprob> top_logprobs(int32_t id, int k);
    double logprob_of(int32_t id, int32_t token);

    // Sends `bytes` through every stage and back (no computation): seconds for the trip.
    double ping(size_t bytes);

    // Stops every other rank (at the end of the program).
    static void shutdown_all();

  private:
    cmd_header header(op code, int32_t id) const;
    void chain(const cmd_header& h);
    reply_header await_reply(op code, std::vector<uint8_t>* data, double timeout_s);

    std::vector<stage_info> stages_;
    int64_t hc_width_ = 0;
    uint32_t n_vocab_ = 0;
    bool bf16_ = true;
    double timeout_s_ = 120;
    int32_t next_session_ = 1;
    struct chunk_dst {
        float* logits;
        size_t floats;
    };
    std::deque<chunk_dst> in_flight_;
    void take_reply();  // receives the oldest chunk's answer
    std::vector<uint8_t> send_buf_[2];
    async_send sends_[2];
    int next_buf_ = 0;
};

}  // namespace magnetar::dist
