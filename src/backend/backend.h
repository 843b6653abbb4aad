// The backend op interface: everything the forward pass asks of a compute device.
//
// Owns: the list of ops (op_kind), their parameter structs, and the device / buffer / stream
// calls (allocate, upload, download, synchronize). The forward pass (src/graph) is written once
// against this class and never touches tensor bytes itself, so a device backend (CUDA) drops in
// behind the same calls. DeepSeek-V4-specific fused steps (HC pre/post, the compressor, the
// indexer top-k, sparse attention with sinks, routing, MoE) are listed ops, not backdoors.
//
// Conventions shared by every op:
//   * activations are F32, row-major, one row per token: `[n_tokens, width]` (ne[0] = width);
//     inputs may be column views (row stride nb[1] larger than the row) unless stated;
//   * weights are tensors over the model's bytes in their stored type (F32, F16, BF16, Q8_0,
//     Q2_K, Q4_K, IQ2_XXS); matrices are `[n_in, n_out]` in GGUF order, i.e. n_out rows;
//   * row r of a token batch is the token at absolute position p0 + r;
//   * every op computes each token's outputs with the same arithmetic whatever the batch size
//     or thread count (the basis of decode == prefill == chunked prefill, bit for bit);
//   * outputs never alias inputs unless the op says "in place".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace magnetar::backend {

enum class op_kind {
    get_rows,
    copy,
    fill,
    add,
    matmul,
    rms_norm,
    rope_tail,
    fp8_kv_roundtrip,
    indexer_qat,
    swiglu,
    hc_pre,
    hc_post,
    hc_collapse,
    kv_store,
    compressor,
    indexer_topk,
    sparse_attention,
    router,
    moe,
    project_out,  // directional steering (docs/steering.md)
    // DeepSeek V4.1 (spec v41.md); backends without them report supports() == false.
    round_bf16,
    qdq_rows,
    rope41,
    hc41_pre,
    hc41_collapse,
    compressor41,
    indexer41,
    attention41,
    moe41,
    engram_gather,
    engram_gate,
};

const char* op_name(op_kind op);
// The number of op kinds (op_kind values are 0 .. k_op_count - 1).
inline constexpr int k_op_count = static_cast<int>(op_kind::engram_gate) + 1;

// RoPE on the tail of each head (spec model.md §4.2): adjacent pairs, YaRN frequency blend when
// `yarn`, no magnitude factor.
struct rope_params {
    uint32_t n_rot = 0;  // rotated tail width
    float freq_base = 10000.0f;
    bool yarn = false;
    float yarn_factor = 1.0f;    // s
    uint64_t yarn_orig_ctx = 0;  // original context of the YaRN correction range
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
};

struct hc_params {
    uint32_t n_hc = 0;       // streams
    uint32_t n_embd = 0;     // D
    float norm_eps = 1e-6f;  // RMS eps of the flattened state
    float hc_eps = 1e-6f;    // pre-weight offset and Sinkhorn eps
    uint32_t sinkhorn_iters = 20;
};

// One compressor lane of a layer (spec §6).
struct compressor_params {
    uint32_t ratio = 0;  // 4 (two-lane overlap) or 128
    uint32_t width = 0;  // d: the head dim (main) or the indexer head dim
    int64_t p0 = 0;      // position of the first token of the batch
    float norm_eps = 1e-6f;
    rope_params rope;
    // Finalisation: main rows get the FP8 round trip on their first n_nope dims, indexer rows
    // the indexer QAT (Hadamard, then FP4) over all dims.
    bool indexer_qat = false;
    uint32_t n_nope = 0;
};

struct indexer_params {
    int64_t p0 = 0;
    uint32_t ratio = 4;
    uint32_t top_k = 0;
    uint32_t n_head = 0;        // indexer heads
    uint32_t head_dim = 0;      // indexer head dim
    float weight_scale = 1.0f;  // 1/sqrt(head_dim * n_head), applied to the head weights
};

struct attention_params {
    int64_t p0 = 0;
    uint32_t n_head = 0;
    uint32_t head_dim = 0;
    uint32_t window = 0;  // raw rows visible to a query, itself included
    uint32_t ratio = 0;   // 0: raw window only
    uint32_t top_k = 0;   // ratio 4: indexer budget
    float scale = 1.0f;   // softmax scale 1/sqrt(head_dim)
};

struct router_params {
    uint32_t n_used = 0;    // k
    float scale = 1.0f;     // route scale
    bool normalize = true;  // renormalise the chosen weights to sum to one
    // V4.1 (v41 §3.8): divide by (sum + 1e-20) instead of max(sum, 2^-14).
    bool v41_renorm = false;
};

// ---- DeepSeek V4.1 parameter structs (spec v41.md) ----

// Run-time QDQ formats (v41 §4.5) and their canonical packed rows (§5.4).
enum class qdq_format {
    fp8_b32,       // E4M3 with a UE8M0 scale per 32: activations, window rows
    fp4_e4m3_b16,  // E2M1 with an E4M3 scale per 16: main compressed KV rows
    mxfp4_b32,     // E2M1 with a UE8M0 scale per 32: index queries and keys
};

// RoPE of V4.1 (§3.3): inv_freq by the spec's fp32 recipe (YaRN when yarn_orig_ctx > 0), angle
// f32(f32(p) * inv_freq), interleaved pairs on the last n_rot dims, bf16 output.
struct rope41_params {
    uint32_t n_rot = 0;
    float freq_base = 10000.0f;
    uint64_t yarn_orig_ctx = 0;  // 0: no YaRN
    float yarn_factor = 1.0f;
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
};

// Ratio >= 2 compressor pooling (§3.4).
struct compressor41_params {
    uint32_t ratio = 2;
    int64_t p0 = 0;  // position of the first row of the batch
};

// Indexer scores, candidate blocks, masking and top-k of one query batch (§3.5, §3.6, §5.3).
struct indexer41_params {
    int64_t p0 = 0;
    uint32_t ratio = 1;
    uint32_t n_head = 0;           // HI
    uint32_t head_dim = 0;         // DI
    uint32_t top_k = 0;            // K: sel has K columns
    float weight_scale = 1.0f;     // head weights become bf16(w * scale) (DI^-1/2 HI^-1/2)
    uint32_t cand_blocks = 0;      // NB (candidate source / Reindex only)
    uint32_t cand_block_size = 0;  // B
};

// Sparse attention with a sink over the R decode layout (§3.3, §5.2).
struct attention41_params {
    int64_t p0 = 0;
    uint32_t n_head = 0;
    uint32_t head_dim = 0;
    uint32_t window = 0;  // W: window part of the list, W slots
    float scale = 1.0f;   // f32(Dh^-1/2)
    // DSpark draft block (§3.10, §5.2) when >= 0: every query's list is ring slots
    // 0 .. ring_slots - 1 in slot order, then every row of kv (the block, both ways).
    int64_t ring_slots = -1;
};

struct engram_params {
    uint32_t n_hc = 0;
    uint32_t n_embd = 0;
    float norm_eps = 1e-20f;
};

// Routed expert tensors of one layer: [D, F, E], [D, F, E], [F, D, E].
struct moe_weights {
    tensor gate_exps, up_exps, down_exps;
};

// Scratch of one MoE call for n tokens with k experts each (from the caller's arena).
struct moe_workspace {
    tensor xg;       // [n*k, D]  token rows gathered per expert
    tensor g, u;     // [n*k, F]
    tensor contrib;  // [n*k, D]  each slot's expert output
    tensor slots;    // [2*n*k + E + 1] I32: expert-sorted slot order, slot -> row, offsets
};

// The most one call can need from per-thread scratch, declared before the first op so that ops
// never allocate.
struct limits {
    int64_t max_row = 0;         // longest weight row (elements) any matmul dequantizes
    int64_t max_keys = 0;        // keys one query attends (raw window + compressed rows)
    int64_t max_index_rows = 0;  // indexer rows one query scores
};

// Where a backend's buffers live and how much memory is there (backend::memory()).
struct memory_info {
    bool host = true;        // alloc_buffer() memory is host memory
    uint64_t total = 0;      // bytes of that memory (0: unknown)
    uint64_t available = 0;  // bytes a new allocation can still have (0: unknown)
    std::string where;       // "host", or the device ("NVIDIA H200 (sm_90, 139.8 GiB)")
};

// One tensor-data section of a memory-mapped model file: every weight tensor lies in one.
struct weight_region {
    const void* data = nullptr;
    size_t bytes = 0;
    std::string label;  // the file's path, for the progress bar and errors
};

// Counters of backend::graph_step().
struct graph_step_counts {
    uint64_t steps = 0;           // graph_step() calls
    uint64_t replays = 0;         // steps that launched an instantiated graph unchanged
    uint64_t instantiations = 0;  // graphs built (first step and every op-sequence change)
};

// Wall time of one named group of ops (time_ops): "q8_0 matmul", "iq2_xxs experts", ...
struct op_time {
    std::string name;
    uint64_t calls = 0;
    double seconds = 0;
};

class backend {
  public:
    virtual ~backend() = default;

    virtual const char* name() const = 0;
    virtual bool supports(op_kind op) const = 0;

    // ---- device, buffers, stream ----
    // Throws magnetar::Error when the memory cannot be had (never aborts: the size comes from
    // the caller's context and the model's shape).
    virtual void* alloc_buffer(size_t bytes) = 0;
    virtual void free_buffer(void* base) = 0;
    // Grows per-thread scratch to cover `l` (never shrinks). Not called in the decode loop.
    // Throws magnetar::Error (as alloc_buffer) and then keeps the scratch it had.
    virtual void reserve(const limits& l) = 0;
    // Host <-> device copies of whole contiguous tensors.
    virtual void upload(const tensor& dst, const void* src) = 0;
    virtual void download(const tensor& src, void* dst) = 0;
    // Waits until every op issued so far has finished.
    virtual void synchronize() = 0;
    // Bytes reserve(l) would allocate in all, 0 when the scratch already covers l: for sizing
    // a session before any of it is allocated.
    virtual uint64_t reserve_bytes(const limits& l) const = 0;
    // Where alloc_buffer() memory lives, and how much of it there is. The default describes
    // this host's memory (physical, or the cgroup limit when lower).
    virtual memory_info memory() const;
    // One line for banners: "cpu (2 threads, AVX-512)", "NVIDIA H200 (sm_90, 139.8 GiB)".
    virtual std::string description() const { return name(); }

    // ---- weights ----
    // Makes the model's weights readable by the ops; called once at load, before any op.
    // regions: the tensor-data sections of the mapped files. The default reads the weights in
    // place from the mapping (host backends); a device backend copies them into its memory (a
    // progress bar unless quiet) and throws magnetar::Error when they do not fit.
    virtual void place_weights(const std::vector<weight_region>& regions, bool quiet);
    // Weight bytes held in the backend's own memory (0: read in place from the mapping).
    virtual uint64_t placed_weight_bytes() const { return 0; }

    // ---- optional capabilities ----
    // Decode steps as one device graph (CUDA graphs): graph_step(p0, step) runs `step` (the
    // forward pass of one chunk at position p0) so that its results are bit-identical to
    // running it op by op. The default just runs it; has_graph_steps() says whether it does
    // more than that.
    virtual bool has_graph_steps() const { return false; }
    virtual void graph_step(int64_t p0, const std::function<void()>& step) { step(); }
    virtual graph_step_counts graph_counts() const { return {}; }
    // Copy bandwidth of the backend's memory in GB/s (bytes read + written over a `bytes`
    // buffer), the roofline benchmarks compare with; 0 when the backend has no probe.
    virtual double measure_copy_bandwidth(size_t bytes) { return 0.0; }
    // Per-op wall time (the decode-step breakdown of `bench`): while on, the backend adds the
    // wall time of its products and heavy ops to named groups; take_op_times() returns the
    // groups timed since the last call (slowest first) and clears them. Ops run inside another
    // timed op count once, in the inner group. Nothing is timed (and the list is empty) on
    // backends without timing.
    virtual void time_ops(bool on) {}
    virtual std::vector<op_time> take_op_times() { return {}; }

    // ---- element-wise and data movement ----
    // out [n, n_rep, w.ne[0]] = dequantized rows ids[i] of w, each written n_rep times.
    virtual void get_rows(const tensor& w, const tensor& ids, const tensor& out, int n_rep) = 0;
    // dst = src (same shape; either may be a view).
    virtual void copy(const tensor& src, const tensor& dst) = 0;
    virtual void fill(const tensor& dst, float value) = 0;
    // out = a + b. b has a.n_rows() / rep rows: row i of a pairs with row i / rep of b.
    virtual void add(const tensor& a, const tensor& b, const tensor& out, int rep) = 0;
    // out = silu(min(g, c)) * clamp(u, -c, c) (spec §4.5).
    virtual void swiglu(const tensor& g, const tensor& u, const tensor& out, float clamp) = 0;

    // ---- linear algebra ----
    // y [n, n_out] = x [n, n_in] times the rows of w: y[t][o] = dot(w row o, x row t).
    virtual void matmul(const tensor& w, const tensor& x, const tensor& y) = 0;
    // Each `group`-wide segment of each row divided by its RMS (eps inside the root), times w
    // when w is given (w has `group` elements). In place allowed.
    virtual void rms_norm(const tensor& x, const tensor& w, const tensor& out, uint32_t group,
                          float eps) = 0;
    // In place: rotates the last rope.n_rot dims of every head_dim-wide head of row r by
    // position p0 + r (inverse: by minus that angle).
    virtual void rope_tail(const tensor& x, uint32_t head_dim, const rope_params& rope, int64_t p0,
                           bool inverse) = 0;
    // In place: FP8 E4M3 round trip of the first n_nope dims of each row, blocks of 64 (§4.3).
    virtual void fp8_kv_roundtrip(const tensor& x, uint32_t n_nope) = 0;
    // In place: per head_dim-wide head, Hadamard rotation then FP4 E2M1 round trip (§4.4).
    virtual void indexer_qat(const tensor& x, uint32_t head_dim) = 0;

    // ---- hyper-connections (spec §5.2, §5.4, §5.6) ----
    // x [n, n_hc*D] -> sublayer input y [n, D] (unnormalised), post [n, n_hc], comb
    // [n, n_hc*n_hc] (Sinkhorn output, row a = source stream). mix [n, (2+n_hc)*n_hc] is
    // workspace.
    virtual void hc_pre(const hc_params& p, const tensor& x, const tensor& fn, const tensor& scale,
                        const tensor& base, const tensor& y, const tensor& post, const tensor& comb,
                        const tensor& mix) = 0;
    // out[b] = post_b * f + sum_a comb[a][b] * x[a]; out [n, n_hc*D].
    virtual void hc_post(const hc_params& p, const tensor& x, const tensor& f, const tensor& post,
                         const tensor& comb, const tensor& out) = 0;
    // Output-head collapse: out [n, D] = sum_j pre_j x[j]; mix [n, n_hc] is workspace.
    virtual void hc_collapse(const hc_params& p, const tensor& x, const tensor& fn,
                             const tensor& scale, const tensor& base, const tensor& out,
                             const tensor& mix) = 0;

    // ---- attention caches and attention (spec §5.3, §6) ----
    // Writes the rows of a batch (kv [n, hd], positions p0..) into the raw ring [cap, hd] at
    // index position mod cap (only the last cap rows of the batch land).
    virtual void kv_store(const tensor& kv, const tensor& ring, int64_t p0) = 0;
    // Streams a batch of projected tokens through one compressor lane. kvp, sc [n, coff*d]
    // (sc without the positional bias: the op adds ape[p mod ratio]); state_kv, state_score
    // [coff*ratio, coff*d] carry the frontier between batches; each completed block is pooled,
    // normalised with norm [d], RoPE'd at its first position, rounded (FP8 or indexer QAT) and
    // written to rows [cap, d] at its row index.
    virtual void compressor(const compressor_params& p, const tensor& kvp, const tensor& sc,
                            const tensor& ape, const tensor& norm, const tensor& state_kv,
                            const tensor& state_score, const tensor& rows) = 0;
    // Lightning indexer (§5.3e): for each query, scores the visible indexer rows with
    // sum_h (wgt_h * weight_scale) * relu(qi_h . k) and writes the top_k row indices, ascending,
    // to sel [n, top_k] (ties to the lower index); all -1 when every visible row fits the budget.
    virtual void indexer_topk(const indexer_params& p, const tensor& qi, const tensor& wgt,
                              const tensor& rows, const tensor& sel) = 0;
    // One softmax with sinks over the raw window (batch rows kv for positions >= p0, ring rows
    // before) and the visible compressed rows (all, or the indexer selection sel when it is not
    // all -1). q, out [n, n_head*head_dim].
    virtual void sparse_attention(const attention_params& p, const tensor& q, const tensor& kv,
                                  const tensor& ring, const tensor& comp, const tensor& sel,
                                  const tensor& sinks, const tensor& out) = 0;

    // ---- mixture of experts (spec §5.5) ----
    // Scores sqrt(softplus(logits)) [n, E]; selection from tid2eid (hash layers: table row of
    // ids[t]) or the top k of score + bias (ties to the lower expert id, descending order);
    // weights renormalised and scaled. sel [n, k] (I32), weights [n, k].
    virtual void router(const router_params& p, const tensor& logits, const tensor& bias,
                        const tensor& tid2eid, const tensor& ids, const tensor& sel,
                        const tensor& weights) = 0;
    // out [n, D] = sum over slots i (in order) of down_e(w_i * swiglu(gate_e x, up_e x)),
    // e = sel[t][i]. Tokens are grouped by expert so each expert's weights are read once.
    virtual void moe(const tensor& x, const tensor& sel, const tensor& weights,
                     const moe_weights& w, float clamp, const tensor& out,
                     const moe_workspace& ws) = 0;

    // ---- directional steering (docs/steering.md) ----
    // In place: every row x_r of x [n, w] becomes x_r - scale * v * dot(v, x_r), v [w] F32 (a
    // unit direction: scale 1 removes the component along v, a negative scale amplifies it).
    // The dot product is summed in float64 in index order.
    virtual void project_out(const tensor& x, const tensor& v, float scale) = 0;

    // ---- DeepSeek V4.1 (spec v41.md). Activations hold bf16 values in F32 tensors where the
    // spec rounds to bf16. The defaults throw: a backend lists what it implements in supports().
    // In place: every element rounded to bf16 (RNE).
    virtual void round_bf16(const tensor& x);
    // In place: QDQ of every row in `fmt` blocks (§4.2-§4.4). When `packed` is given (I8 rows of
    // the canonical §5.4 width), row r's codes and scales are also written to packed row r.
    virtual void qdq_rows(const tensor& x, qdq_format fmt, const tensor& packed);
    // In place: V4.1 RoPE of the last n_rot dims of every head_dim-wide head of row r, at
    // position p0 + r * stride (inverse: the opposite angle); bf16 output.
    virtual void rope41(const tensor& x, uint32_t head_dim, const rope41_params& rope, int64_t p0,
                        int64_t stride, bool inverse);
    // Single-pass mHC at one site (§3.2): from the stream x [n, n_hc*D] the mixes pre, post
    // [n, n_hc] and comb [n, n_hc*n_hc] (Sinkhorn); y [n, D] = bf16(sum_i carry_i x_i) with the
    // carried pre of the previous site. mix [n, (2+n_hc)*n_hc] is workspace.
    virtual void hc41_pre(const hc_params& p, const tensor& x, const tensor& fn,
                          const tensor& scale, const tensor& base, const tensor& carry,
                          const tensor& y, const tensor& pre, const tensor& post,
                          const tensor& comb, const tensor& mix);
    // out [n, D] = bf16(sum_i w_i x_i), w [n, n_hc].
    virtual void hc41_collapse(const hc_params& p, const tensor& x, const tensor& w,
                               const tensor& out);
    // Ratio >= 2 pooling (§3.4): a, b [n, Dh] fp32 rows of positions p0..; the pending rows of
    // earlier calls wait in state_a / state_b [ratio, Dh] at slot pos mod ratio. Each group
    // completed in this batch gives one row of z (bf16 of the per-channel softmax pool), in
    // order: z has floor((p0+n)/r) - floor(p0/r) rows.
    virtual void compressor41(const compressor41_params& p, const tensor& a, const tensor& b,
                              const tensor& state_a, const tensor& state_b, const tensor& z);
    // Index scores of queries qi [n, HI*DI] (MXFP4 QDQ'd) with head weights w [n, HI] (bf16,
    // scaled inside by weight_scale with a bf16 rounding) against
    // the packed index keys [rows, DI/2 + DI/32] (I8), entries j < floor((p0+n)/r); sel [n, K]
    // gets each query's top min(K, visible) entries ascending, -1 padded. cand_out (candidate
    // source, I32 [n, NB]) receives the kept blocks ascending (-1 padded), computed from the
    // unmasked scores; cand_in (Reindex) masks entries outside its blocks before the top-k.
    virtual void indexer41(const indexer41_params& p, const tensor& qi, const tensor& w,
                           const tensor& keys, const tensor& cand_in, const tensor& cand_out,
                           const tensor& sel);
    // Attention of q [n, H*Dh] (bf16 values) over the list "window part (W slots, R decode
    // layout) ++ selected compressed entries" in 64-slot blocks with bf16 probabilities in P.V
    // and the sink in the denominator (§3.3, §5.2). Window rows of positions >= p0 come from
    // kv [n, Dh] (QDQ'd F32), earlier ones from the packed ring [W, Dh + Dh/32] (I8, row pos mod
    // W); compressed entries sel [n, K] (-1 = empty) are rows of the packed comp [rows, Dh/2 +
    // Dh/16] (I8). out [n, H*Dh] = bf16(acc / den) (before the inverse RoPE).
    virtual void attention41(const attention41_params& p, const tensor& q, const tensor& kv,
                             const tensor& ring, const tensor& comp, const tensor& sel,
                             const tensor& sinks, const tensor& out);
    // Routed experts of V4.1 (§3.8): xq the FP8-QDQ'd input; per slot y = w_i * swiglu, rounded
    // to bf16 and FP8-QDQ'd for the down projection, whose output is rounded to bf16; out [n, D]
    // (fp32) = sum of the slots in ascending expert id.
    virtual void moe41(const tensor& xq, const tensor& sel, const tensor& weights,
                       const moe_weights& w, float clamp, const tensor& out,
                       const moe_workspace& ws);
    // Engram row lookup (§3.9.4): out [n, C*ED] = rows idx [n, C] (I32, global row ids) of the
    // row264 table (I8 [ED + ED/32, rows]), dequantized (exact in bf16).
    virtual void engram_gather(const tensor& table, const tensor& idx, const tensor& out);
    // Engram gate and update (§3.9.4): x, out [n, n_hc*D]; kv [n, (n_hc+1)*D] (keys then the
    // value); wq [n_hc, D] = f32(q_weight) * f32(k_weight). out may alias x.
    virtual void engram_gate(const engram_params& p, const tensor& x, const tensor& kv,
                             const tensor& wq, const tensor& out);
};

// The ops of `ops` that `be` does not implement (supports() false), in the order given.
std::vector<op_kind> missing_ops(const backend& be, const std::vector<op_kind>& ops);

}  // namespace magnetar::backend
