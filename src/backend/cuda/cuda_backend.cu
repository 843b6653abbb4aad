// CUDA backend: device and stream, buffers and the weight upload table, host <-> device copies,
// and the element-wise / row ops (get_rows, copy, fill, add, swiglu, matmul dispatch, RMS norm,
// RoPE, FP8 round trip, indexer QAT). HC ops live in hc.cu, attention-side ops in attention.cu,
// routing and MoE in moe.cu, the matrix kernels in matmul.cu.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/rowops.cuh"
#include "core/progress.h"

namespace magnetar::cuda {

void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
    throw Error(strfmt("CUDA error in %s (%s:%d): %s (%s)", what, file, line, cudaGetErrorString(e),
                       cudaGetErrorName(e)));
}

void init_device_tables();  // matmul.cu

rope_table make_rope_table(const backend::rope_params& rope) {
    MAGNETAR_ASSERT(rope.n_rot <= kMaxRot && rope.n_rot % 2 == 0, "cuda rope: n_rot too large");
    rope_table t;
    t.n_rot = rope.n_rot;
    cpu::rope_freqs(rope, t.omega);
    return t;
}

namespace {

// ---- element-wise kernels ----

__global__ void fill_kernel(mat d, float v) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= d.rows * d.cols) return;
    d.row(i / d.cols)[i % d.cols] = v;
}

__global__ void add_kernel(mat a, mat b, mat out, int rep) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= a.rows * a.cols) return;
    const int64_t r = i / a.cols, c = i % a.cols;
    out.row(r)[c] = a.row(r)[c] + b.row(r / rep)[c];
}

__global__ void swiglu_kernel(mat g, mat u, mat out, float clamp) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= g.rows * g.cols) return;
    const int64_t r = i / g.cols, c = i % g.cols;
    out.row(r)[c] = swiglu_f(g.row(r)[c], u.row(r)[c], clamp);
}

// One block per row: x_r -= scale * v * dot(v, x_r), the dot in double (cpu twin:
// cpu_backend::project_out; only the summation order differs).
__global__ void project_out_kernel(mat x, const float* v, float scale) {
    __shared__ double sh[32];
    float* xr = x.row(blockIdx.x);
    double d = 0.0;
    for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x)
        d += static_cast<double>(v[i]) * xr[i];
    d = block_sum_d(d, sh);
    const auto c = static_cast<float>(static_cast<double>(scale) * d);
    for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x) xr[i] -= c * v[i];
}

// One block per (row, group).
__global__ void rms_norm_kernel(mat x, const float* w, mat out, int64_t group, float eps) {
    __shared__ double sh[32];
    const int64_t r = blockIdx.x;
    const int64_t g = static_cast<int64_t>(blockIdx.y) * group;
    block_rms_norm(x.row(r) + g, w, out.row(r) + g, group, eps, sh);
}

__global__ void rope_kernel(mat x, int64_t head_dim, rope_table tab, kpos pos, bool inverse) {
    const int64_t half = tab.n_rot / 2;
    const int64_t n_heads = x.cols / head_dim;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= x.rows * n_heads * half) return;
    const int64_t r = i / (n_heads * half);
    const int64_t h = (i / half) % n_heads;
    const int j = static_cast<int>(i % half);
    float* t = x.row(r) + h * head_dim + (head_dim - tab.n_rot);
    rope_pair(t, j, tab, pos.get() + r, inverse);
}

__global__ void fp8_kernel(mat x, int64_t n_nope) {
    block_fp8_roundtrip(x.row(blockIdx.x), n_nope);
}

// One block per (row, head): Hadamard in shared memory, then FP4.
__global__ void indexer_qat_kernel(mat x, int64_t head_dim, float s) {
    extern __shared__ float buf[];
    float* v = x.row(blockIdx.x) + static_cast<int64_t>(blockIdx.y) * head_dim;
    for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) buf[i] = v[i];
    block_hadamard(buf, head_dim, s);
    block_fp4_roundtrip(buf, head_dim);
    for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) v[i] = buf[i];
}

__global__ void touch_kernel(float* p, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) p[i] = static_cast<float>(i & 1023);
}

constexpr int kBlock = 256;

}  // namespace
}  // namespace magnetar::cuda

namespace magnetar::backend {

using cuda::as_imat;
using cuda::as_mat;
using cuda::grid_for;
using cuda::kBlock;

namespace {

cudaStream_t st(void* s) {
    return static_cast<cudaStream_t>(s);
}

}  // namespace

bool cuda_device_available(std::string* why, int device) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why) *why = strfmt("%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        cudaGetLastError();  // clear the sticky-free error state for later calls
        return false;
    }
    if (n == 0) {
        if (why) *why = "the driver reports no CUDA device";
        return false;
    }
    if (device < 0 || device >= n) {
        if (why) *why = strfmt("device %d requested, %d present", device, n);
        return false;
    }
    return true;
}

cuda_backend::cuda_backend(const cuda_options& opts) : device_(opts.device), quiet_(opts.quiet) {
    std::string why;
    if (!cuda_device_available(&why, opts.device)) throw Error("no CUDA device: " + why);
    MAGNETAR_CUDA_CHECK(cudaSetDevice(device_));
    cudaStream_t s = nullptr;
    MAGNETAR_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = s;
    cuda::init_device_tables();
    pinned_bytes_ = size_t{16} << 20;  // ids and a few logit rows per decode step
    void* pinned = nullptr;
    MAGNETAR_CUDA_CHECK(cudaMallocHost(&pinned, pinned_bytes_));
    pinned_ = static_cast<uint8_t*>(pinned);
    MAGNETAR_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(int64_t)));
    pos_host_ = static_cast<int64_t*>(pinned);
    MAGNETAR_CUDA_CHECK(cudaMalloc(&pos_dev_, sizeof(int64_t)));
}

cuda_backend::~cuda_backend() {
    cudaSetDevice(device_);
    if (capturing_) abandon_capture();
    if (stream_) cudaStreamSynchronize(st(stream_));
    if (graph_exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec_));
    if (pinned_) cudaFreeHost(pinned_);
    if (pos_host_) cudaFreeHost(pos_host_);
    if (pos_dev_) cudaFree(pos_dev_);
    for (void* p : deferred_free_) cudaFree(p);
    for (auto& [k, r] : regions_) {
        if (r.owned) cudaFree(r.dev);
    }
    for (void* p : scratch_) {
        if (p) cudaFree(p);
    }
    if (stream_) cudaStreamDestroy(st(stream_));
}

std::string cuda_backend::device_description() const {
    cudaDeviceProp prop{};
    MAGNETAR_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    return strfmt("%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                  static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

memory_info cuda_backend::memory() const {
    memory_info m;
    m.host = false;
    size_t free_b = 0, total_b = 0;
    MAGNETAR_CUDA_CHECK(cudaSetDevice(device_));
    MAGNETAR_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    m.total = total_b;
    m.available = free_b;
    m.where = device_description();
    return m;
}

void cuda_backend::place_weights(const std::vector<weight_region>& regions, bool quiet) {
    uint64_t need = 0;
    for (const weight_region& r : regions) need += r.bytes;
    const memory_info mem = memory();
    if (need > mem.available) {
        throw Error(strfmt("cuda: the weights need %.2f GiB of device memory, %s has %.2f GiB free",
                           static_cast<double>(need) / (1024.0 * 1024.0 * 1024.0),
                           mem.where.c_str(),
                           static_cast<double>(mem.available) / (1024.0 * 1024.0 * 1024.0)));
    }
    for (const weight_region& r : regions) map_host_region(r.data, r.bytes, r.label, quiet);
}

bool cuda_backend::supports(op_kind op) const {
    // Every DeepSeek V4 op; the V4.1 ops are not implemented here yet and keep the interface's
    // throwing defaults.
    switch (op) {
        case op_kind::get_rows:
        case op_kind::copy:
        case op_kind::fill:
        case op_kind::add:
        case op_kind::matmul:
        case op_kind::rms_norm:
        case op_kind::rope_tail:
        case op_kind::fp8_kv_roundtrip:
        case op_kind::indexer_qat:
        case op_kind::swiglu:
        case op_kind::hc_pre:
        case op_kind::hc_post:
        case op_kind::hc_collapse:
        case op_kind::kv_store:
        case op_kind::compressor:
        case op_kind::indexer_topk:
        case op_kind::sparse_attention:
        case op_kind::router:
        case op_kind::moe:
        case op_kind::project_out:
            return true;
        case op_kind::round_bf16:
        case op_kind::qdq_rows:
        case op_kind::rope41:
        case op_kind::hc41_pre:
        case op_kind::hc41_collapse:
        case op_kind::compressor41:
        case op_kind::indexer41:
        case op_kind::attention41:
        case op_kind::moe41:
        case op_kind::engram_gather:
        case op_kind::engram_gate:
            return false;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Buffers and the upload table
// ---------------------------------------------------------------------------------------------

void* cuda_backend::alloc_buffer(size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (e != cudaSuccess) {
        cudaGetLastError();
        throw Error(strfmt("cuda: cannot allocate %.1f MiB of device memory: %s",
                           static_cast<double>(bytes) / (1024.0 * 1024.0), cudaGetErrorString(e)));
    }
    const auto a = reinterpret_cast<uintptr_t>(p);
    regions_[a] = region{a, std::max<size_t>(bytes, 256), static_cast<uint8_t*>(p), false};
    return p;
}

void cuda_backend::free_buffer(void* base) {
    if (!base) return;
    const auto it = regions_.find(reinterpret_cast<uintptr_t>(base));
    MAGNETAR_ASSERT(it != regions_.end() && !it->second.owned, "cuda free_buffer: unknown buffer");
    synchronize();
    regions_.erase(it);
    MAGNETAR_CUDA_CHECK(cudaFree(base));
}

void cuda_backend::map_host_region(const void* host, size_t bytes, const std::string& label,
                                   bool quiet) {
    const auto h = reinterpret_cast<uintptr_t>(host);
    auto next = regions_.lower_bound(h);
    const bool overlaps_next = next != regions_.end() && next->first < h + bytes;
    const bool overlaps_prev =
        next != regions_.begin() && std::prev(next)->first + std::prev(next)->second.bytes > h;
    if (overlaps_next || overlaps_prev) throw Error("cuda: " + label + " overlaps a mapped region");
    uint8_t* dev = nullptr;
    const cudaError_t e = cudaMalloc(&dev, std::max<size_t>(bytes, 256));
    if (e != cudaSuccess) {
        cudaGetLastError();
        throw Error(strfmt("cuda: cannot allocate %.2f GiB of device memory for %s: %s",
                           static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0), label.c_str(),
                           cudaGetErrorString(e)));
    }
    Progress bar("upload " + label, bytes, Progress::Unit::bytes, quiet_ || quiet);
    constexpr size_t kPiece = size_t{64} << 20;
    const auto* src = static_cast<const uint8_t*>(host);
    for (size_t off = 0; off < bytes; off += kPiece) {
        const size_t n = std::min(kPiece, bytes - off);
        MAGNETAR_CUDA_CHECK(cudaMemcpy(dev + off, src + off, n, cudaMemcpyHostToDevice));
        bar.add(n);
    }
    bar.finish();
    regions_[h] = region{h, bytes, dev, true};
    mapped_bytes_ += bytes;
}

const void* cuda_backend::device_ptr(const void* p, const char* what) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = regions_.upper_bound(a);
    if (it != regions_.begin()) {
        --it;
        const region& r = it->second;
        if (a < r.host + r.bytes) return r.dev + (a - r.host);
    }
    magnetar::assert_fail("tensor in device memory", __FILE__, __LINE__,
                          strfmt("cuda %s: a tensor is neither in a device buffer nor in a mapped "
                                 "weight region (map the model with map_host_region first)",
                                 what)
                              .c_str());
}

tensor cuda_backend::dev(const tensor& t, const char* what) const {
    if (!t.data) return t;
    tensor d = t;
    d.data = const_cast<void*>(device_ptr(t.data, what));
    return d;
}

void* cuda_backend::scratch(int slot, size_t bytes) {
    if (bytes > scratch_bytes_[slot]) {
        synchronize();
        // Inside a graph step earlier captured nodes may use the old buffer: free it after.
        if (scratch_[slot] && capturing_)
            deferred_free_.push_back(scratch_[slot]);
        else if (scratch_[slot])
            MAGNETAR_CUDA_CHECK(cudaFree(scratch_[slot]));
        scratch_[slot] = nullptr;
        const size_t n = std::max(bytes, scratch_bytes_[slot] * 2);
        MAGNETAR_CUDA_CHECK(cudaMalloc(&scratch_[slot], n));
        scratch_bytes_[slot] = n;
    }
    return scratch_[slot];
}

void cuda_backend::reserve(const limits& l) {
    limits_.max_row = std::max(limits_.max_row, l.max_row);
    limits_.max_keys = std::max(limits_.max_keys, l.max_keys);
    limits_.max_index_rows = std::max(limits_.max_index_rows, l.max_index_rows);
}

void cuda_backend::synchronize() {
    if (graph_mode()) return;
    MAGNETAR_CUDA_CHECK(cudaStreamSynchronize(st(stream_)));
}

// ---------------------------------------------------------------------------------------------
// Graph steps
// ---------------------------------------------------------------------------------------------

uint8_t* cuda_backend::stage(size_t bytes) {
    const size_t at = (pinned_used_ + 255) / 256 * 256;
    if (at + bytes > pinned_bytes_) {
        throw Error(
            strfmt("cuda graph step: %zu bytes of host transfers exceed the %zu-byte "
                   "pinned staging area (graph steps are meant for decode)",
                   at + bytes, pinned_bytes_));
    }
    pinned_used_ = at + bytes;
    return pinned_ + at;
}

void cuda_backend::abandon_capture() {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(st(stream_), &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    capturing_ = false;
    pending_.clear();
    pinned_used_ = 0;
    // The stream may have been invalidated by the failed capture: nothing of it is reused.
    if (graph_exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec_));
    graph_exec_ = nullptr;
}

void cuda_backend::sig_bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) {
        sig_ ^= b[i];
        sig_ *= 0x100000001b3ull;
    }
}

void cuda_backend::sig(const tensor& t) {
    sig_bytes(&t.data, sizeof t.data);
    sig_bytes(&t.type, sizeof t.type);
    sig_bytes(t.ne, sizeof t.ne);
    sig_bytes(t.nb, sizeof t.nb);
}

void cuda_backend::sig(const rope_params& r) {
    sig(r.n_rot);
    sig(r.freq_base);
    sig(r.yarn);
    sig(r.yarn_factor);
    sig(r.yarn_orig_ctx);
    sig(r.beta_fast);
    sig(r.beta_slow);
}

void* cuda_backend::step_scratch(int slot, size_t bytes) {
    if (probing_) {
        sig_bytes(&scratch_[slot], sizeof(void*));
        sig(bytes > scratch_bytes_[slot]);
        return nullptr;
    }
    void* p = scratch(slot, bytes);
    if (capturing_) {
        sig_bytes(&p, sizeof p);
        sig(false);
    }
    return p;
}

void cuda_backend::begin_capture() {
    MAGNETAR_CUDA_CHECK(cudaStreamBeginCapture(st(stream_), cudaStreamCaptureModeRelaxed));
    capturing_ = true;
}

void cuda_backend::launch_step_graph() {
    *pos_host_ = step_p0_;
    MAGNETAR_CUDA_CHECK(
        cudaMemcpyAsync(pos_dev_, pos_host_, sizeof(int64_t), cudaMemcpyHostToDevice, st(stream_)));
    MAGNETAR_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec_), st(stream_)));
    synchronize();
    ++graph_steps_;
    for (const pending_copy& c : pending_) std::memcpy(c.to, c.from, c.row_bytes * c.rows);
    pending_.clear();
    pinned_used_ = 0;
    for (void* p : deferred_free_) MAGNETAR_CUDA_CHECK(cudaFree(p));
    deferred_free_.clear();
}

void cuda_backend::graph_step(int64_t p0, const std::function<void()>& step) {
    MAGNETAR_ASSERT(!graph_mode(), "graph_step: steps do not nest");
    synchronize();
    constexpr uint64_t kSeed = 0xcbf29ce484222325ull;
    step_p0_ = p0;
    // Probe: the ops only sign themselves (and stage uploads / note downloads).
    if (graph_exec_) {
        sig_ = kSeed;
        pinned_used_ = 0;
        pending_.clear();
        probing_ = true;
        try {
            step();
        } catch (...) {
            probing_ = false;
            pending_.clear();
            throw;
        }
        probing_ = false;
        if (sig_ == graph_sig_) {
            ++graph_replays_;
            launch_step_graph();
            return;
        }
    }
    // Capture the step and update (or instantiate) the graph.
    sig_ = kSeed;
    pinned_used_ = 0;
    pending_.clear();
    begin_capture();
    try {
        step();
    } catch (...) {
        abandon_capture();
        throw;
    }
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(st(stream_), &g);
    capturing_ = false;
    if (e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        pending_.clear();
        cuda::throw_cuda_error(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    auto exec = static_cast<cudaGraphExec_t>(graph_exec_);
    bool updated = false;
    if (exec) {
        cudaGraphExecUpdateResultInfo info{};
        updated = cudaGraphExecUpdate(exec, g, &info) == cudaSuccess;
        if (!updated) {
            cudaGetLastError();
            cudaGraphExecDestroy(exec);
            exec = nullptr;
            graph_exec_ = nullptr;
        }
    }
    if (!updated) {
        const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
        if (ie != cudaSuccess) {
            cudaGraphDestroy(g);
            pending_.clear();
            cuda::throw_cuda_error(ie, "cudaGraphInstantiate", __FILE__, __LINE__);
        }
        ++graph_instantiations_;
    }
    cudaGraphDestroy(g);
    graph_exec_ = exec;
    graph_sig_ = sig_;
    launch_step_graph();
}

double cuda_backend::measure_copy_bandwidth(size_t bytes) {
    MAGNETAR_ASSERT(!graph_mode(), "measure_copy_bandwidth inside a graph step");
    void* a = nullptr;
    void* b = nullptr;
    MAGNETAR_CUDA_CHECK(cudaMalloc(&a, bytes));
    MAGNETAR_CUDA_CHECK(cudaMalloc(&b, bytes));
    cuda::
        touch_kernel<<<grid_for(static_cast<int64_t>(bytes / 4), kBlock), kBlock, 0, st(stream_)>>>(
            static_cast<float*>(a), static_cast<int64_t>(bytes / 4));
    MAGNETAR_CUDA_LAUNCHED("touch");
    MAGNETAR_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st(stream_)));
    synchronize();
    constexpr int kReps = 10;
    cudaEvent_t e0, e1;
    MAGNETAR_CUDA_CHECK(cudaEventCreate(&e0));
    MAGNETAR_CUDA_CHECK(cudaEventCreate(&e1));
    MAGNETAR_CUDA_CHECK(cudaEventRecord(e0, st(stream_)));
    for (int i = 0; i < kReps; ++i)
        MAGNETAR_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st(stream_)));
    MAGNETAR_CUDA_CHECK(cudaEventRecord(e1, st(stream_)));
    MAGNETAR_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    MAGNETAR_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * static_cast<double>(bytes) * kReps / (static_cast<double>(ms) * 1e-3) / 1e9;
}

// ---------------------------------------------------------------------------------------------
// Host <-> device
// ---------------------------------------------------------------------------------------------

namespace {

// Rows of t as (first row pointer, pitch, row bytes, rows) for a 2-D copy.
struct rows2d {
    uint8_t* p;
    size_t pitch;
    size_t row_bytes;
    size_t rows;
};

rows2d rows_of(const tensor& t) {
    MAGNETAR_ASSERT(t.ne[2] * t.ne[3] == 1 || t.rows_contiguous(), "cuda copy: rows must fold");
    const size_t rb = row_bytes(t.type, t.ne[0]);
    const size_t pitch = t.n_rows() > 1 ? t.nb[1] : rb;
    return rows2d{static_cast<uint8_t*>(t.data), pitch, rb, static_cast<size_t>(t.n_rows())};
}

}  // namespace

void cuda_backend::upload(const tensor& dst, const void* src) {
    if (!dst.data || !src) return;
    const rows2d d = rows_of(dev(dst, "upload"));
    if (graph_mode()) {
        // The graph reads the pinned copy when it runs (the probe stages at the same offset).
        uint8_t* pin = stage(d.row_bytes * d.rows);
        std::memcpy(pin, src, d.row_bytes * d.rows);
        src = pin;
        sig_bytes(&src, sizeof src);
        if (probe(op_kind::copy, dst)) return;
    }
    MAGNETAR_CUDA_CHECK(cudaMemcpy2DAsync(d.p, d.pitch, src, d.row_bytes, d.row_bytes, d.rows,
                                          cudaMemcpyHostToDevice, st(stream_)));
    // The source may be a temporary of the caller.
    synchronize();
}

void cuda_backend::download(const tensor& src, void* dst) {
    if (!src.data || !dst) return;
    const rows2d s = rows_of(dev(src, "download"));
    if (graph_mode()) {
        uint8_t* pin = stage(s.row_bytes * s.rows);
        pending_.push_back(pending_copy{pin, dst, s.row_bytes, s.rows});
        dst = pin;
        sig_bytes(&dst, sizeof dst);
        if (probe(op_kind::copy, src)) return;
    }
    MAGNETAR_CUDA_CHECK(cudaMemcpy2DAsync(dst, s.row_bytes, s.p, s.pitch, s.row_bytes, s.rows,
                                          cudaMemcpyDeviceToHost, st(stream_)));
    synchronize();
}

// ---------------------------------------------------------------------------------------------
// Element-wise and data movement
// ---------------------------------------------------------------------------------------------

void cuda_backend::get_rows(const tensor& w, const tensor& ids, const tensor& out, int n_rep) {
    const int64_t n = ids.ne[0];
    const int64_t width = w.ne[0];
    MAGNETAR_ASSERT(out.n_elements() == n * n_rep * width && out.rows_contiguous() &&
                        out.nb[1] == static_cast<size_t>(out.ne[0]) * 4,
                    "get_rows: output shape");
    if (probe(op_kind::get_rows, w, ids, out, n_rep)) return;
    const tensor wd = dev(w, "get_rows");
    cuda::launch_get_rows(static_cast<const uint8_t*>(wd.data), w.type, w.nb[1], width,
                          static_cast<const int32_t*>(dev(ids, "get_rows").data), n,
                          static_cast<float*>(dev(out, "get_rows").data), n_rep, st(stream_));
}

void cuda_backend::copy(const tensor& src, const tensor& dst) {
    MAGNETAR_ASSERT(src.ne[0] == dst.ne[0] && src.n_rows() == dst.n_rows() && src.type == dst.type,
                    "copy: shapes differ");
    if (src.n_rows() == 0) return;
    if (probe(op_kind::copy, src, dst)) return;
    const rows2d s = rows_of(dev(src, "copy"));
    const rows2d d = rows_of(dev(dst, "copy"));
    MAGNETAR_CUDA_CHECK(cudaMemcpy2DAsync(d.p, d.pitch, s.p, s.pitch, s.row_bytes, s.rows,
                                          cudaMemcpyDeviceToDevice, st(stream_)));
}

void cuda_backend::fill(const tensor& dst, float value) {
    if (probe(op_kind::fill, dst, value)) return;
    const cuda::mat d = as_mat(dev(dst, "fill"));
    const int64_t n = d.rows * d.cols;
    if (n == 0) return;
    cuda::fill_kernel<<<grid_for(n, kBlock), kBlock, 0, st(stream_)>>>(d, value);
    MAGNETAR_CUDA_LAUNCHED("fill");
}

void cuda_backend::add(const tensor& a, const tensor& b, const tensor& out, int rep) {
    const int64_t w = a.ne[0];
    MAGNETAR_ASSERT(b.ne[0] == w && out.ne[0] == w && b.n_rows() * rep == a.n_rows(),
                    "add: shapes");
    if (probe(op_kind::add, a, b, out, rep)) return;
    const int64_t n = a.n_rows() * w;
    if (n == 0) return;
    cuda::add_kernel<<<grid_for(n, kBlock), kBlock, 0, st(stream_)>>>(
        as_mat(dev(a, "add")), as_mat(dev(b, "add")), as_mat(dev(out, "add")), rep);
    MAGNETAR_CUDA_LAUNCHED("add");
}

void cuda_backend::swiglu(const tensor& g, const tensor& u, const tensor& out, float clamp) {
    if (probe(op_kind::swiglu, g, u, out, clamp)) return;
    const int64_t n = g.n_rows() * g.ne[0];
    if (n == 0) return;
    cuda::swiglu_kernel<<<grid_for(n, kBlock), kBlock, 0, st(stream_)>>>(
        as_mat(dev(g, "swiglu")), as_mat(dev(u, "swiglu")), as_mat(dev(out, "swiglu")), clamp);
    MAGNETAR_CUDA_LAUNCHED("swiglu");
}

void cuda_backend::project_out(const tensor& x, const tensor& v, float scale) {
    MAGNETAR_ASSERT(v.type == ggml_type::F32 && v.ne[0] == x.ne[0] && v.n_rows() == 1,
                    "project_out: v must be one F32 row of x's width");
    if (probe(op_kind::project_out, x, v, scale)) return;
    if (x.n_rows() == 0) return;
    const int threads = x.ne[0] >= 1024 ? 256 : 128;
    cuda::project_out_kernel<<<static_cast<unsigned>(x.n_rows()), threads, 0, st(stream_)>>>(
        as_mat(dev(x, "project_out")), static_cast<const float*>(dev(v, "project_out").data),
        scale);
    MAGNETAR_CUDA_LAUNCHED("project_out");
}

// ---------------------------------------------------------------------------------------------
// Linear algebra, norms, RoPE, rounding
// ---------------------------------------------------------------------------------------------

void cuda_backend::matmul(const tensor& w, const tensor& x, const tensor& y) {
    MAGNETAR_ASSERT(x.ne[0] == w.ne[0] && y.ne[0] == w.ne[1] && y.n_rows() == x.n_rows(),
                    "matmul: shapes");
    MAGNETAR_ASSERT(x.ne[2] == 1 && y.ne[2] == 1 && x.ne[3] == 1 && y.ne[3] == 1,
                    "matmul: activations must be 2-D");
    if (probe(op_kind::matmul, w, x, y)) return;
    cuda::matmul_args a;
    a.w = static_cast<const uint8_t*>(dev(w, "matmul").data);
    a.type = w.type;
    a.w_nb1 = w.nb[1];
    a.w_nb2 = w.nb[2];
    a.n_in = w.ne[0];
    a.n_out = w.ne[1];
    a.x = as_mat(dev(x, "matmul"));
    a.y = as_mat(dev(y, "matmul"));
    cuda::launch_matmul(a, st(stream_));
}

void cuda_backend::rms_norm(const tensor& x, const tensor& w, const tensor& out, uint32_t group,
                            float eps) {
    const int64_t width = x.ne[0];
    MAGNETAR_ASSERT(group > 0 && width % group == 0 && out.ne[0] == width, "rms_norm: shapes");
    MAGNETAR_ASSERT(!w || (w.type == ggml_type::F32 && w.ne[0] >= group), "rms_norm: F32 weight");
    if (probe(op_kind::rms_norm, x, w, out, group, eps)) return;
    if (x.n_rows() == 0) return;
    const dim3 grid(static_cast<unsigned>(x.n_rows()), static_cast<unsigned>(width / group));
    const int threads = group >= 512 ? 256 : (group >= 128 ? 128 : 32);
    cuda::rms_norm_kernel<<<grid, threads, 0, st(stream_)>>>(
        as_mat(dev(x, "rms_norm")),
        w ? static_cast<const float*>(dev(w, "rms_norm").data) : nullptr,
        as_mat(dev(out, "rms_norm")), group, eps);
    MAGNETAR_CUDA_LAUNCHED("rms_norm");
}

void cuda_backend::rope_tail(const tensor& x, uint32_t head_dim, const rope_params& rope,
                             int64_t p0, bool inverse) {
    MAGNETAR_ASSERT(
        rope.n_rot <= cuda::kMaxRot && rope.n_rot <= head_dim && x.ne[0] % head_dim == 0,
        "rope_tail: shapes");
    const int64_t n = x.n_rows() * (x.ne[0] / head_dim) * (rope.n_rot / 2);
    if (n == 0) return;
    const bool probing = probe(op_kind::rope_tail, x, head_dim, rope, inverse);
    const pos_arg pa = pos(p0);
    if (probing) return;
    cuda::rope_kernel<<<grid_for(n, kBlock), kBlock, 0, st(stream_)>>>(
        as_mat(dev(x, "rope_tail")), head_dim, cuda::make_rope_table(rope),
        cuda::kpos{pa.off, pa.dev}, inverse);
    MAGNETAR_CUDA_LAUNCHED("rope_tail");
}

void cuda_backend::fp8_kv_roundtrip(const tensor& x, uint32_t n_nope) {
    if (x.n_rows() == 0 || n_nope == 0) return;
    if (probe(op_kind::fp8_kv_roundtrip, x, n_nope)) return;
    cuda::fp8_kernel<<<static_cast<unsigned>(x.n_rows()), 128, 0, st(stream_)>>>(
        as_mat(dev(x, "fp8_kv_roundtrip")), n_nope);
    MAGNETAR_CUDA_LAUNCHED("fp8_kv_roundtrip");
}

void cuda_backend::indexer_qat(const tensor& x, uint32_t head_dim) {
    MAGNETAR_ASSERT(head_dim > 0 && (head_dim & (head_dim - 1)) == 0 && x.ne[0] % head_dim == 0 &&
                        head_dim <= 8192,
                    "indexer_qat: head_dim must be a power of two dividing the row");
    if (probe(op_kind::indexer_qat, x, head_dim)) return;
    if (x.n_rows() == 0) return;
    const dim3 grid(static_cast<unsigned>(x.n_rows()), static_cast<unsigned>(x.ne[0] / head_dim));
    cuda::indexer_qat_kernel<<<grid, 128, head_dim * sizeof(float), st(stream_)>>>(
        as_mat(dev(x, "indexer_qat")), head_dim, cuda::hadamard_scale(head_dim));
    MAGNETAR_CUDA_LAUNCHED("indexer_qat");
}

std::unique_ptr<cuda_backend> make_cuda_backend(const cuda_options& opts) {
    return std::make_unique<cuda_backend>(opts);
}

}  // namespace magnetar::backend
