// The CPU backend: every op of backend.h on the host, threaded with a persistent pool.
//
// Owns: the thread pool, per-thread scratch (sized by reserve(), never grown inside an op), and
// the dispatch of matmuls to one function per weight type (cpu/matmul.h). Weights are used in
// place from the memory-mapped file; quantized rows are dequantized block by block into
// scratch and multiplied with FLOAT activations (no activation quantization: the engine is
// compared with a float64 reference that dequantizes the same bytes).
// Does not own: the forward pass (src/graph) or cache layout (src/kv).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace magnetar::backend {

class cpu_backend : public backend {
  public:
    // reference: the reference order (diagnostics, and the V4.1 comparison with the PyTorch
    // reference, docs/v41.md "Against the reference"): every matmul through
    // cpu/ref/matmul_ref.h (one sequential fp32 sum per output, input index ascending) and the
    // V4.1 ops' dot products sequential too; slower, the default fast path is unchanged.
    // exact: float activations for quantized weights too (else int8 activations, simd.h
    // family (b)).
    explicit cpu_backend(int n_threads, bool reference = false, bool exact = false);
    ~cpu_backend() override;

    int n_threads() const { return pool_.size(); }
    thread_pool& pool() { return pool_; }
    // Per-thread scratch of reserve()'d size.
    float* scratch(int thread) const { return scratch_[static_cast<size_t>(thread)].get(); }
    size_t scratch_floats() const { return scratch_floats_; }

    const char* name() const override { return "cpu"; }
    bool supports(op_kind op) const override;

    void* alloc_buffer(size_t bytes) override;
    void free_buffer(void* base) override;
    void reserve(const limits& l) override;
    // All threads' scratch.
    uint64_t reserve_bytes(const limits& l) const override;
    // "cpu (2 threads, avx512, int8 activations)".
    std::string description() const override;
    void upload(const tensor& dst, const void* src) override;
    void download(const tensor& src, void* dst) override;
    void synchronize() override {}

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

    // DeepSeek V4.1 (cpu/v41_ops.cpp)
    void round_bf16(const tensor& x) override;
    void qdq_rows(const tensor& x, qdq_format fmt, const tensor& packed) override;
    void rope41(const tensor& x, uint32_t head_dim, const rope41_params& rope, int64_t p0,
                int64_t stride, bool inverse) override;
    void hc41_pre(const hc_params& p, const tensor& x, const tensor& fn, const tensor& scale,
                  const tensor& base, const tensor& carry, const tensor& y, const tensor& pre,
                  const tensor& post, const tensor& comb, const tensor& mix) override;
    void hc41_collapse(const hc_params& p, const tensor& x, const tensor& w,
                       const tensor& out) override;
    void compressor41(const compressor41_params& p, const tensor& a, const tensor& b,
                      const tensor& state_a, const tensor& state_b, const tensor& z) override;
    void indexer41(const indexer41_params& p, const tensor& qi, const tensor& w, const tensor& keys,
                   const tensor& cand_in, const tensor& cand_out, const tensor& sel) override;
    void attention41(const attention41_params& p, const tensor& q, const tensor& kv,
                     const tensor& ring, const tensor& comp, const tensor& sel, const tensor& sinks,
                     const tensor& out) override;
    void moe41(const tensor& xq, const tensor& sel, const tensor& weights, const moe_weights& w,
               float clamp, const tensor& out, const moe_workspace& ws) override;
    void engram_gather(const tensor& table, const tensor& idx, const tensor& out) override;
    void engram_gate(const engram_params& p, const tensor& x, const tensor& kv, const tensor& wq,
                     const tensor& out) override;

    void time_ops(bool on) override { time_ops_ = on; }
    std::vector<op_time> take_op_times() override;

    // The MoE ops' group: matmul() inside it counts as "<type> experts", not "<type> matmul".
    static constexpr std::string_view kMoeTimer = "moe";
    // Times the enclosing scope into group `name` (+ " " + `detail` when given) while time_ops
    // is on; a timer opened inside another moves its time out of the outer one's group.
    class op_timer {
      public:
        op_timer(cpu_backend& b, std::string_view name, std::string_view detail = {});
        ~op_timer();
        op_timer(const op_timer&) = delete;
        op_timer& operator=(const op_timer&) = delete;
        std::string_view name() const { return name_; }

      private:
        cpu_backend& b_;
        bool on_;
        std::string_view name_, detail_;
        op_timer* parent_ = nullptr;
        std::chrono::steady_clock::time_point t0_;
        std::chrono::nanoseconds inner_{0};  // time of the timers opened inside this one
    };

  private:
    struct aligned_free {
        void operator()(float* p) const;
    };
    thread_pool pool_;
    std::vector<std::unique_ptr<float[], aligned_free>> scratch_;
    size_t scratch_floats_ = 0;
    bool reference_ = false;
    bool exact_ = false;
    std::vector<uint8_t> act_;  // quantized activations of the current product (grows only)
    bool time_ops_ = false;
    op_timer* open_timer_ = nullptr;  // innermost timer open now
    std::vector<op_time> op_times_;   // groups timed since the last take_op_times()
};

}  // namespace magnetar::backend
