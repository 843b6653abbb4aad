// The messages between pipeline stages (docs/distributed.md): typed, versioned, fixed-size
// headers followed by at most one data message.
//
// Topology: rank 0 runs the front end and the first stage; rank k > 0 runs stage k. Session
// commands travel along the chain 0 -> 1 -> ... -> N-1, each stage acting on its layers and
// forwarding; the last stage answers rank 0 directly (one reply per command, so rank 0 always
// knows every stage has finished with it). Requests about the logits go straight from rank 0
// to the last stage while nothing else is in flight. Setup (load, handshake) and shutdown go
// from rank 0 to every rank.
//
// Owns: the op codes, the header layouts and the version. Does not own: transport (comm.h) or
// what the stages do (stage.h, pipeline.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace magnetar::dist {

inline constexpr uint32_t k_magic = 0x5344474Du;  // "MGDS"
inline constexpr uint16_t k_version = 2;          // 2: save_state, load_state

// MPI tags.
enum tag : int {
    tag_cmd = 101,         // cmd_header, to the next stage or from rank 0
    tag_cmd_data = 102,    // the bytes a cmd_header announces
    tag_reply = 103,       // reply_header, to rank 0
    tag_reply_data = 104,  // the bytes a reply_header announces
};

enum class op : uint16_t {
    // Setup, rank 0 -> every rank; each answers rank 0.
    load = 1,      // data: load_request; reply data: hello
    shutdown = 2,  // no reply
    // Session commands along the chain; the last stage replies.
    create_session = 10,  // a = n_ctx, b = checkpoint interval, c = max checkpoints
    destroy_session = 11,
    clear = 12,       // empty timeline (reset)
    eval = 13,        // a = p0, b = n; data: tokens [n] i32 then the HC state [n, n_hc*D]
    checkpoint = 14,  // take a checkpoint at the current position
    restore = 15,     // a = position of a held checkpoint
    ping = 16,        // data travels the chain untouched (benchmark of the hops)
    // Session snapshots (kv/payload.h sections of each stage's layers), along the chain.
    save_state = 17,  // a = n_past; data: the sections of the stages before, in layer
                      // order; each stage appends its own; reply data: every section of
                      // stages 1..N-1
    load_state = 18,  // a = n_past; data: the logits row [n_vocab] f32, then the sections
                      // of this stage and the following ones; each stage takes its own
                      // and forwards the rest; reply a = argmax of the logits row
    // Logits requests, rank 0 -> last stage directly.
    fetch_logits = 20,  // reply data: the last row [n_vocab] f32
    sample = 21,        // data: sample_request; reply a = token, b = the generator's state
    top_logprobs = 22,  // a = k; reply data: wire_logprob [<= k]
    logprob_of = 23,    // a = token; reply data: one double
};

// Flags of an eval command.
enum eval_flags : uint32_t {
    eval_logits_all = 1u << 0,   // reply with the logits of every row of the chunk
    eval_logits_last = 1u << 1,  // reply with the logits of the chunk's last row
    eval_hc_bf16 = 1u << 2,      // the HC state travels as BF16 (else F32)
    eval_mtp = 1u << 3,          // advance the MTP block (last stage)
};

struct cmd_header {
    uint32_t magic = k_magic;
    uint16_t version = k_version;
    op code = op::shutdown;
    int32_t session = -1;
    uint32_t flags = 0;
    int64_t a = 0, b = 0, c = 0;
    uint64_t data_bytes = 0;  // size of the tag_cmd_data message that follows (0: none)
};

struct reply_header {
    uint32_t magic = k_magic;
    uint16_t version = k_version;
    op code = op::shutdown;
    int32_t rank = 0;  // the rank that answers
    int32_t ok = 1;    // 0: data is an error message
    int64_t a = 0, b = 0;
    uint64_t data_bytes = 0;
};

// op::load: what every rank needs to load its stage (rank 0's engine options and the split).
struct load_request {
    char model_path[1024] = {0};
    char mtp_path[1024] = {0};
    int32_t n_threads = 0;
    int32_t reference_kernels = 0;
    int32_t exact_matmul = 0;
    int32_t n_stages = 0;
    uint32_t layer_begin[64] = {0};  // per stage
    uint32_t layer_end[64] = {0};
};
inline constexpr int k_max_stages = 64;

// Snapshot data travels in messages of at most this many bytes (MPI counts are int).
inline constexpr size_t k_state_piece = size_t{1} << 28;

// The reply to op::load: what the handshake compares.
struct hello {
    char fingerprint[65] = {0};  // SHA-256 (hex) of the GGUF header: metadata + tensor directory
    char padding[7] = {0};
    uint32_t layer_begin = 0;
    uint32_t layer_end = 0;
    uint64_t stage_weight_bytes = 0;  // tensor bytes of the stage's layers (+ embedding / head)
    char host[64] = {0};
};

struct sample_request {
    float temperature = 1.0f;
    int32_t top_k = 0;
    float top_p = 1.0f;
    float min_p = 0.05f;
    uint64_t rng_state = 0;
};

struct wire_logprob {
    int32_t id = 0;
    float logit = 0.0f;
    double logprob = 0.0;
};

}  // namespace magnetar::dist
