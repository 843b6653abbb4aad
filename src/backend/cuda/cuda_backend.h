// The CUDA backend: every op of backend.h on one NVIDIA GPU (sm_90 first), on one stream.
//
// Owns: the device, its stream, device buffers, the weight upload table and the kernels (one
// .cu file per op family: elementwise.cu, matmul.cu, hc.cu, attention.cu, moe.cu). Every op
// follows the CPU backend's arithmetic step by step (same rounding steps, same tie rules, same
// summation order wherever it decides a rounding or a selection), so the CPU backend is its
// reference; the per-op and whole-model parity tests live in tests/gpu.
// Does not own: the forward pass (src/graph), the cache layout (src/kv) or scheduling.
//
// Memory model. Activations, the scratch arena and the KV cache are device buffers from
// alloc_buffer(). Weights are tensors over the host mapping of the GGUF file; the caller maps
// each host region once with map_host_region() (a device copy made with a progress bar), and
// every op translates a tensor whose bytes lie in a mapped region to its device copy. A tensor
// in neither a device buffer nor a mapped region is a usage error and aborts with a message
// naming the op. This header has no CUDA includes: plain C++ code can hold the backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"

namespace magnetar::backend {

struct cuda_options {
    int device = 0;      // CUDA device ordinal
    bool quiet = false;  // no progress bar while mapping weights
};

// True when a CUDA device can be used; otherwise false with the reason in *why (no driver, no
// device, device ordinal out of range). Never throws, also on machines without a driver.
bool cuda_device_available(std::string* why, int device = 0);

class cuda_backend final : public backend {
  public:
    // Throws magnetar::Error when the device cannot be used.
    explicit cuda_backend(const cuda_options& opts);
    ~cuda_backend() override;
    cuda_backend(const cuda_backend&) = delete;
    cuda_backend& operator=(const cuda_backend&) = delete;

    // "NVIDIA H200 (sm_90, 139.8 GiB)".
    std::string device_description() const;
    std::string description() const override { return device_description(); }
    // Device memory: total and free (cudaMemGetInfo).
    memory_info memory() const override;
    // Maps every region with map_host_region().
    void place_weights(const std::vector<weight_region>& regions, bool quiet) override;
    uint64_t placed_weight_bytes() const override { return mapped_bytes_; }

    // ---- the weight upload table ----
    // Copies host bytes [host, host + bytes) to a new device buffer (in 64 MiB pieces, with a
    // progress bar labelled `label` unless quiet); from then on tensors inside that range are
    // read from the copy. Regions must not overlap. Not for the decode loop.
    // quiet: no progress bar for this region (also none when the backend is quiet).
    void map_host_region(const void* host, size_t bytes, const std::string& label,
                         bool quiet = false);
    uint64_t mapped_bytes() const { return mapped_bytes_; }
    // The device address of p (a device buffer address is returned unchanged). Aborts with
    // `what` in the message when p is in neither a device buffer nor a mapped region.
    const void* device_ptr(const void* p, const char* what) const;

    // ---- decode steps as one CUDA graph ----
    // Runs `step` (the forward pass of one chunk at position p0, normally a decode step) as one
    // CUDA graph. Kernels that depend on the position read it from a device scalar, so the
    // graph of one step serves every later step with the same op sequence: `step` first runs
    // in a probe mode where ops only extend a signature (op, tensor addresses and shapes,
    // parameters, positions relative to p0); when it equals the instantiated graph's, the
    // position is written and the graph launched, else `step` runs again under stream capture
    // and the graph is updated in place or re-instantiated. Inside a step, upload() stages its
    // bytes in pinned memory at once, download() delivers its bytes when graph_step() returns,
    // and synchronize() is a no-op. Results are bit-identical to launching op by op.
    bool has_graph_steps() const override { return true; }
    void graph_step(int64_t p0, const std::function<void()>& step) override;
    graph_step_counts graph_counts() const override {
        return {graph_steps_, graph_replays_, graph_instantiations_};
    }

    // Device-to-device copy bandwidth in GB/s (read + write bytes / time) over a `bytes` buffer,
    // the roofline the benchmark compares itself with.
    double measure_copy_bandwidth(size_t bytes) override;

    const char* name() const override { return "cuda"; }
    bool supports(op_kind op) const override;

    void* alloc_buffer(size_t bytes) override;
    void free_buffer(void* base) override;
    void reserve(const limits& l) override;
    // 0: the kernels' scratch grows inside the ops to what a chunk needs (a few MiB).
    uint64_t reserve_bytes(const limits&) const override { return 0; }
    void upload(const tensor& dst, const void* src) override;
    void download(const tensor& src, void* dst) override;
    void synchronize() override;

    void get_rows(const tensor& w, const tensor& ids, const tensor& out, int n_rep) override;
    void copy(const tensor& src, const tensor& dst) override;
    void fill(const tensor& dst, float value) override;
    void add(const tensor& a, const tensor& b, const tensor& out, int rep) override;
    void swiglu(const tensor& g, const tensor& u, const tensor& out, float clamp) override;
    void project_out(const tensor& x, const tensor& v, float scale) override;

    void matmul(const tensor& w, const tensor& x, const tensor& y) override;
    void rms_norm(const tensor& x, const tensor& w, const tensor& out, uint32_t group,
                  float eps) override;
    void rope_tail(const tensor& x, uint32_t head_dim, const rope_params& rope, int64_t p0,
                   bool inverse) override;
    void fp8_kv_roundtrip(const tensor& x, uint32_t n_nope) override;
    void indexer_qat(const tensor& x, uint32_t head_dim) override;

    void hc_pre(const hc_params& p, const tensor& x, const tensor& fn, const tensor& scale,
                const tensor& base, const tensor& y, const tensor& post, const tensor& comb,
                const tensor& mix) override;
    void hc_post(const hc_params& p, const tensor& x, const tensor& f, const tensor& post,
                 const tensor& comb, const tensor& out) override;
    void hc_collapse(const hc_params& p, const tensor& x, const tensor& fn, const tensor& scale,
                     const tensor& base, const tensor& out, const tensor& mix) override;

    void kv_store(const tensor& kv, const tensor& ring, int64_t p0) override;
    void compressor(const compressor_params& p, const tensor& kvp, const tensor& sc,
                    const tensor& ape, const tensor& norm, const tensor& state_kv,
                    const tensor& state_score, const tensor& rows) override;
    void indexer_topk(const indexer_params& p, const tensor& qi, const tensor& wgt,
                      const tensor& rows, const tensor& sel) override;
    void sparse_attention(const attention_params& p, const tensor& q, const tensor& kv,
                          const tensor& ring, const tensor& comp, const tensor& sel,
                          const tensor& sinks, const tensor& out) override;

    void router(const router_params& p, const tensor& logits, const tensor& bias,
                const tensor& tid2eid, const tensor& ids, const tensor& sel,
                const tensor& weights) override;
    void moe(const tensor& x, const tensor& sel, const tensor& weights, const moe_weights& w,
             float clamp, const tensor& out, const moe_workspace& ws) override;

  private:
    struct region {
        uintptr_t host = 0;  // start of the range as the caller sees it
        size_t bytes = 0;
        uint8_t* dev = nullptr;  // device address of `host`
        bool owned = false;      // a mapped weight copy (freed with the backend)
    };
    // A tensor of the same shape whose data is the device address (empty stays empty).
    tensor dev(const tensor& t, const char* what) const;
    // Backend-owned scratch that grows to `bytes` (never inside a captured decode step).
    void* scratch(int slot, size_t bytes);

    // Pinned bytes for upload / download inside a graph step (bump-allocated per step).
    uint8_t* stage(size_t bytes);
    void begin_capture();
    void abandon_capture();
    void launch_step_graph();  // writes the position, launches, waits, delivers downloads
    // Graph-step signature (FNV-1a over the bytes of every op's launch-relevant inputs).
    bool graph_mode() const { return probing_ || capturing_; }
    void sig_bytes(const void* p, size_t n);
    void sig(op_kind op) { sig_bytes(&op, sizeof op); }
    void sig(const tensor& t);
    void sig(const rope_params& r);
    template <typename T>
    std::enable_if_t<std::is_arithmetic_v<T>> sig(T v) {
        sig_bytes(&v, sizeof v);
    }
    // Inside a graph step: signs the op and its arguments; true in the probe (launch nothing).
    template <typename... A>
    bool probe(op_kind op, const A&... a) {
        if (!graph_mode()) return false;
        sig(op);
        (sig(a), ...);
        return probing_;
    }
    // The position argument of a kernel: absolute (op by op) or relative to the step scalar.
    struct pos_arg {
        int64_t off = 0;
        const int64_t* dev = nullptr;
    };
    pos_arg pos(int64_t p0) {
        if (!graph_mode()) return pos_arg{p0, nullptr};
        sig(p0 - step_p0_);
        return pos_arg{p0 - step_p0_, pos_dev_};
    }
    // Scratch inside a graph step: in the probe only signed (nullptr), else grown as needed.
    void* step_scratch(int slot, size_t bytes);

    int device_ = 0;
    bool quiet_ = false;
    bool capturing_ = false;
    bool probing_ = false;
    void* graph_exec_ = nullptr;  // cudaGraphExec_t
    uint64_t sig_ = 0;
    uint64_t graph_sig_ = 0;
    int64_t step_p0_ = 0;
    int64_t* pos_dev_ = nullptr;   // device scalar: position of the current graph step
    int64_t* pos_host_ = nullptr;  // its pinned source
    uint64_t graph_steps_ = 0;
    uint64_t graph_replays_ = 0;
    uint64_t graph_instantiations_ = 0;
    uint8_t* pinned_ = nullptr;
    size_t pinned_bytes_ = 0;
    size_t pinned_used_ = 0;
    struct pending_copy {
        const uint8_t* from;  // pinned
        void* to;             // caller's host memory
        size_t row_bytes, rows;
    };
    std::vector<pending_copy> pending_;
    std::vector<void*> deferred_free_;     // scratch replaced inside a step, freed after it
    void* stream_ = nullptr;               // cudaStream_t
    std::map<uintptr_t, region> regions_;  // by start address: device buffers and mapped weights
    uint64_t mapped_bytes_ = 0;
    limits limits_;
    void* scratch_[4] = {nullptr, nullptr, nullptr, nullptr};
    size_t scratch_bytes_[4] = {0, 0, 0, 0};
};

// The factory the engine uses (--backend cuda): throws magnetar::Error without a usable device.
std::unique_ptr<cuda_backend> make_cuda_backend(const cuda_options& opts);

}  // namespace magnetar::backend
