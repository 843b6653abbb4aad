// The engine: an immutable loaded model (weights mapped from GGUF, validated once), its
// tokenizer and its compute backend. Create sessions from it; each session is one token
// timeline.
//
// Sessions of one engine share its backend; their evaluations are serialized internally. A
// session must be destroyed before its engine.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "magnetar/session.h"
#include "magnetar/status.h"

namespace magnetar {

class tokenizer;  // src/tokenizer/tokenizer.h, for front ends built in this tree

struct engine_options {
    std::string model_path;
    std::string
        mtp_path;  // separate MTP GGUF (as published); empty: MTP block of the main file, if any
    // false: sessions do not run the MTP block (no drafts, a little less work per token), even
    // when the model has one; model_info::has_mtp is then false.
    bool use_mtp = true;
    // Compute backend: "cpu" (the default; weights read in place from the mapped file) or
    // "cuda" (builds with the CUDA backend; weights copied to the GPU at load). An unknown
    // name, a backend this build lacks, a missing device, or an op of the model's architecture
    // the backend does not implement fail the load with one line that says which.
    std::string backend = "cpu";
    int device = 0;      // GPU ordinal of a device backend
    bool quiet = false;  // no progress bar while weights are read, locked or copied to a device
    // How the model file's bytes are held. use_mmap (the default): the file is mapped and its
    // pages read on first touch (and dropped under memory pressure, then read again). false:
    // the whole file is read into private memory at load (refused when it is larger than the
    // host's memory). use_mlock: the bytes are locked in RAM so that they are never paged out;
    // a lock the system refuses (the locked-memory limit) leaves the model loaded and says why
    // in model_info::lock_warning. Neither is available in pipelined (MPI) runs, where each
    // rank touches only its layers of the mapped file.
    bool use_mmap = true;
    bool use_mlock = false;
    int n_threads = 0;  // CPU backend threads; 0: one per physical core
    // Every matrix product through the scalar reference twin (dequantize a row, sum in
    // order) instead of the SIMD kernels: slow, for diagnostics (`magnetar compare-reference`).
    bool reference_kernels = false;
    // Quantized weights (Q8_0, Q4_K, Q2_K, IQ2_XXS) multiply activations quantized to int8
    // (Q8_0 / Q8_K, GGML's bytes and speed) by default. true keeps float activations for every
    // product: the path the reference tests compare exactly (ds4's --quality).
    bool exact_matmul = false;
    // Pipeline across the ranks of an MPI job (docs/distributed.md). Used when this process is
    // rank 0 of a job of several ranks (`mpirun -np N magnetar ...`); ignored otherwise.
    // layers: "auto" (balance weight bytes) or one range / count per rank ("0:3,3:8", "3,5").
    std::string pipeline_layers = "auto";
    bool pipeline_f32 = false;    // HC state between stages as F32 (default BF16)
    int64_t pipeline_chunk = 64;  // tokens per pipelined prefill chunk
    // Directional steering (docs/steering.md): a direction file (one unit vector of width
    // n_embd per layer, flat F32, with its JSON sidecar) checked against the model at load;
    // empty: none. After each layer's FFN output y, y <- y - s * v * dot(v, y) with the FFN
    // scale s, and the same after the attention output with the attention scale; a positive
    // scale removes the direction, a negative one amplifies it. These are the scales new
    // sessions start with (Session::set_steering changes them), each in [-100, 100].
    // Not available in pipelined (MPI) runs.
    std::string steering_file;
    float steering_ffn = 1.0f;
    float steering_attn = 0.0f;
};

// Ids of the control tokens front ends use (-1 when the model has no tokenizer).
struct special_tokens {
    int32_t bos = -1;
    int32_t eos = -1;
    int32_t user = -1;
    int32_t assistant = -1;
    int32_t think = -1;      // <think>
    int32_t think_end = -1;  // </think>
};

// What front ends need to know about the loaded model.
struct model_info {
    std::string name;
    std::string arch;  // general.architecture: "deepseek4" (V4) or "deepseek41" (V4.1)
    std::string path;
    uint32_t n_layer = 0;
    uint32_t n_embd = 0;
    uint32_t n_vocab = 0;
    uint32_t n_swa = 0;  // raw sliding window
    uint64_t n_ctx_train = 0;
    uint64_t weight_bytes = 0;   // tensor data of the main file
    bool weights_mapped = true;  // false: read into private memory (engine_options::use_mmap)
    bool weights_locked = false;
    std::string lock_warning;  // why a lock asked for was refused; empty otherwise
    bool has_mtp = false;
    bool has_dspark = false;  // V4.1 DSpark draft stages (session_options::drafts)
    bool has_tokenizer = false;
    special_tokens special;
    int n_threads = 0;
    // The compute backend: its name ("cpu", "cuda"), one line describing it ("cpu (8 threads,
    // avx512 kernels, int8 activations)", "NVIDIA H200 (sm_90, 139.8 GiB)"), the weight bytes
    // it copied into its own memory (0: read in place from the mapping) and how long that took.
    std::string backend;
    std::string device;
    uint64_t device_weight_bytes = 0;
    double weight_upload_seconds = 0.0;
    // Pipeline stages (1: single process) and their split, e.g. "2 stages, HC state as
    // BF16: [rank 0 host: layers 0:4, 10 MiB] [rank 1 ...]".
    int n_stages = 1;
    std::string pipeline;
    uint64_t pipeline_hc_bytes = 0;  // one token's HC state on the wire
    // Directional steering: the loaded file (empty without one), one line describing it, a
    // fingerprint of its directions (disk caches keep steered state apart by it) and the
    // scales new sessions start with.
    std::string steering_file;
    std::string steering;
    uint64_t steering_fingerprint = 0;
    float steering_ffn = 0.0f;
    float steering_attn = 0.0f;
};

// Thinking mode of a rendered chat prompt (protocol §2.1).
enum class think_mode { off, on, max };

// One message of a plain chat (no tools; the server renders richer histories itself).
struct chat_turn {
    std::string role;  // "system", "user" or "assistant"
    std::string content;
    std::string reasoning;  // assistant turns: thinking text, kept when the mode retains it
};

class Engine {
  public:
    static status load(const engine_options& opts, std::unique_ptr<Engine>* out);
    // Whether the backend of opts (backend, device, n_threads) can be used here, without a
    // model: *description receives its banner line, or the error says why not.
    static status probe_backend(const engine_options& opts, std::string* description);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    const model_info& info() const;
    status create_session(const session_options& opts, std::unique_ptr<Session>* out) const;
    // One decode step of several sessions of this engine: tokens[i] is evaluated at
    // sessions[i]->n_past(), leaving each session exactly as sessions[i]->eval({tokens[i]})
    // would (logits, MTP rows, checkpoints), bit for bit. DeepSeek V4 sessions of a single
    // process share one forward pass, so every weight is read once for all of them; the others
    // (V4.1, pipelined, an empty timeline with an MTP block) are evaluated one after another.
    // The sessions must be distinct, each with room for one more token; nothing is evaluated
    // when any argument is wrong. A failure inside the shared pass leaves its sessions empty
    // (n_past 0); a session evaluated alone that fails is named in the status (the ones before
    // it in `sessions` advanced, the later ones did not).
    status decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens) const;

    // Tokenization (protocol §1.6): plain text never yields a control token; rendered chat
    // text (`rendered` true) matches every special-token literal atomically.
    status tokenize(std::string_view text, bool rendered, std::vector<int32_t>* out) const;
    // Bytes of one token / of a sequence (may be partial UTF-8).
    std::string token_bytes(int32_t id) const;
    std::string detokenize(std::span<const int32_t> tokens) const;
    // The DeepSeek V4 chat prompt for `turns` (protocol §2): BOS, system, user / assistant
    // turns, then the assistant opening with <think> or </think> when add_generation_prompt.
    // think_mode::max falls back to on below the context Think Max needs (n_ctx).
    static std::string render_chat(const std::vector<chat_turn>& turns, think_mode mode,
                                   uint64_t n_ctx, bool add_generation_prompt = true);
    // render_chat() tokenized as rendered chat, except that special-token literals inside
    // the turns' text stay plain text (a user cannot inject control tokens). *text, when
    // given, receives the rendered string.
    status tokenize_chat(const std::vector<chat_turn>& turns, think_mode mode, uint64_t n_ctx,
                         std::vector<int32_t>* out, std::string* text = nullptr,
                         bool add_generation_prompt = true) const;
    // Pipelined engines: sends `bytes` through every stage and back without computing
    // (`magnetar bench pipeline` measures the hops with it); *seconds receives the trip time.
    status pipeline_ping(size_t bytes, double* seconds) const;
    // Copy bandwidth of the backend's memory in GB/s over a `bytes` buffer (the roofline of
    // `bench`); unsupported on backends without a probe.
    status measure_copy_bandwidth(size_t bytes, double* gbs) const;
    // Counters of decode steps run as one device graph (all zero on backends without graphs).
    struct graph_stats {
        uint64_t steps = 0;
        uint64_t replays = 0;
        uint64_t instantiations = 0;
    };
    graph_stats graph_step_stats() const;
    // Wall time per group of backend ops ("q8_0 matmul", "iq2_xxs experts", "attention", ...)
    // while on: the decode-step breakdown of `bench`. take_op_times() returns the groups timed
    // since the last call, slowest first, and clears them; time outside every group (the graph
    // itself, untimed ops) is not listed. Empty on backends that do not time their ops.
    struct op_time {
        std::string name;
        uint64_t calls = 0;
        double seconds = 0;
    };
    void time_ops(bool on) const;
    std::vector<op_time> take_op_times() const;
    // The tokenizer itself (nullptr without one), for in-tree front ends.
    const tokenizer* vocab() const;

    struct impl;

  private:
    explicit Engine(std::unique_ptr<impl> p);
    std::unique_ptr<impl> impl_;
};

}  // namespace magnetar
