// CPU backend: memory, data movement, element-wise ops, matmul dispatch, norms, RoPE and the
// model-defined rounding ops. HC ops live in hc.cpp, attention-side ops in attention.cpp, the
// router and MoE in moe.cpp.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ref/matmul_ref.h"
#include "backend/cpu/simd/simd.h"
#include "core/error.h"
#include "core/format.h"
#include "core/types.h"
#include "quant/types.h"

namespace magnetar::backend {

namespace {

constexpr size_t kBufferAlign = 64;
constexpr uint32_t kMaxRot = 256;  // RoPE tail widths handled with stack tables

// Rows handed to one thread at least, so that small ops do not wake the pool.
int64_t rows_per_task(int64_t row_elems) {
    return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_elems));
}

}  // namespace

void cpu_backend::aligned_free::operator()(float* p) const {
    std::free(p);
}

cpu_backend::cpu_backend(int n_threads, bool reference, bool exact)
    : pool_(n_threads), reference_(reference), exact_(exact) {
    scratch_.resize(static_cast<size_t>(pool_.size()));
}

cpu_backend::~cpu_backend() = default;

std::string cpu_backend::description() const {
    return strfmt("cpu (%d thread%s, %s kernels, %s)", n_threads(), n_threads() == 1 ? "" : "s",
                  reference_ ? "reference" : cpu::simd::level_name(cpu::simd::active_level()),
                  exact_ || reference_ ? "float activations" : "int8 activations");
}

bool cpu_backend::supports(op_kind op) const {
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
            return true;
    }
    return false;
}

void* cpu_backend::alloc_buffer(size_t bytes) {
    // Running out of memory is the caller's input (a context too large for the host), not an
    // internal invariant: an error that session creation turns into a status.
    if (bytes > SIZE_MAX - kBufferAlign) {
        throw Error(
            strfmt("cannot allocate a host buffer of %zu bytes: the size overflows", bytes));
    }
    const size_t n = (std::max<size_t>(bytes, 1) + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    void* p = std::aligned_alloc(kBufferAlign, n);
    if (p == nullptr) {
        throw Error(
            strfmt("out of host memory: cannot allocate %.1f MiB (%zu bytes) for a backend buffer",
                   static_cast<double>(n) / (1024.0 * 1024.0), n));
    }
    return p;
}

void cpu_backend::free_buffer(void* base) {
    std::free(base);
}

namespace {

// Per-thread scratch floats for `l`: matmul row blocks, a few rows of the widest tensor
// (compressor lanes, HC streams, the V4.1 QDQ codes and attention key blocks), attention's key
// row pointers (2 floats each) and scores of a head pair, and the indexer's per-row state: V4
// scores plus their indices (2 per row), V4.1 (score, index) pairs plus block maxima (at most
// 4 per row).
int64_t scratch_need(const limits& l) {
    return std::max({cpu::matmul_scratch_floats(std::max<int64_t>(l.max_row, 1)), 4 * l.max_row,
                     4 * l.max_keys, 4 * l.max_index_rows}) +
           64;
}

}  // namespace

uint64_t cpu_backend::reserve_bytes(const limits& l) const {
    const int64_t need = scratch_need(l);
    if (static_cast<size_t>(need) <= scratch_floats_) return 0;
    return static_cast<uint64_t>(need) * sizeof(float) * scratch_.size();
}

void cpu_backend::reserve(const limits& l) {
    const int64_t need = scratch_need(l);
    if (static_cast<size_t>(need) <= scratch_floats_) return;
    if (static_cast<uint64_t>(need) > SIZE_MAX / sizeof(float)) {
        throw Error(strfmt("backend scratch of %lld floats per thread overflows",
                           static_cast<long long>(need)));
    }
    // All buffers first (alloc_buffer throws when the host has no memory left), then the new
    // size: a failed reserve leaves the old, consistent scratch.
    std::vector<std::unique_ptr<float[], aligned_free>> grown(scratch_.size());
    for (auto& s : grown)
        s.reset(static_cast<float*>(alloc_buffer(static_cast<size_t>(need) * sizeof(float))));
    scratch_ = std::move(grown);
    scratch_floats_ = static_cast<size_t>(need);
}

void cpu_backend::upload(const tensor& dst, const void* src) {
    const size_t rb = row_bytes(dst.type, dst.ne[0]);
    const auto* s = static_cast<const uint8_t*>(src);
    for (int64_t r = 0; r < dst.n_rows(); ++r)
        std::memcpy(dst.row_ptr(r), s + static_cast<size_t>(r) * rb, rb);
}

void cpu_backend::download(const tensor& src, void* dst) {
    const size_t rb = row_bytes(src.type, src.ne[0]);
    auto* d = static_cast<uint8_t*>(dst);
    for (int64_t r = 0; r < src.n_rows(); ++r)
        std::memcpy(d + static_cast<size_t>(r) * rb, src.row_ptr(r), rb);
}

void cpu_backend::get_rows(const tensor& w, const tensor& ids, const tensor& out, int n_rep) {
    const op_timer timer(*this, "element-wise");
    const int64_t n = ids.ne[0];
    const int64_t width = w.ne[0];
    // out is contiguous [n, n_rep, width], whatever its nominal row width.
    MAGNETAR_ASSERT(out.n_elements() == n * n_rep * width && out.rows_contiguous() &&
                        out.nb[1] == static_cast<size_t>(out.ne[0]) * 4,
                    "get_rows: output shape");
    float* base = out.f32();
    pool_.parallel_for(
        n,
        [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) {
                float* first = base + i * n_rep * width;
                cpu::dequant_row(w, ids.i32()[i], first);
                for (int r = 1; r < n_rep; ++r) {
                    std::memcpy(first + r * width, first, static_cast<size_t>(width) * 4);
                }
            }
        },
        rows_per_task(width * n_rep));
}

void cpu_backend::copy(const tensor& src, const tensor& dst) {
    const op_timer timer(*this, "element-wise");
    MAGNETAR_ASSERT(src.ne[0] == dst.ne[0] && src.n_rows() == dst.n_rows() && src.type == dst.type,
                    "copy: shapes differ");
    const size_t rb = row_bytes(src.type, src.ne[0]);
    for (int64_t r = 0; r < src.n_rows(); ++r) std::memmove(dst.row_ptr(r), src.row_ptr(r), rb);
}

void cpu_backend::fill(const tensor& dst, float value) {
    for (int64_t r = 0; r < dst.n_rows(); ++r) std::fill_n(dst.f32_row(r), dst.ne[0], value);
}

void cpu_backend::add(const tensor& a, const tensor& b, const tensor& out, int rep) {
    const op_timer timer(*this, "element-wise");
    const int64_t w = a.ne[0];
    MAGNETAR_ASSERT(b.ne[0] == w && out.ne[0] == w && b.n_rows() * rep == a.n_rows(),
                    "add: shapes");
    pool_.parallel_for(
        a.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            for (int64_t r = r0; r < r1; ++r) {
                const float* x = a.f32_row(r);
                const float* y = b.f32_row(r / rep);
                float* o = out.f32_row(r);
                for (int64_t i = 0; i < w; ++i) o[i] = x[i] + y[i];
            }
        },
        rows_per_task(w));
}

void cpu_backend::swiglu(const tensor& g, const tensor& u, const tensor& out, float clamp) {
    const op_timer timer(*this, "element-wise");
    const int64_t w = g.ne[0];
    pool_.parallel_for(
        g.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            for (int64_t r = r0; r < r1; ++r) {
                const float* gr = g.f32_row(r);
                const float* ur = u.f32_row(r);
                float* o = out.f32_row(r);
                for (int64_t i = 0; i < w; ++i) o[i] = cpu::swiglu_clamped(gr[i], ur[i], clamp);
            }
        },
        rows_per_task(w));
}

void cpu_backend::project_out(const tensor& x, const tensor& v, float scale) {
    const op_timer timer(*this, "element-wise");
    const int64_t w = x.ne[0];
    MAGNETAR_ASSERT(v.type == ggml_type::F32 && v.ne[0] == w && v.n_rows() == 1,
                    "project_out: v must be one F32 row of x's width");
    const float* vd = v.f32_row(0);
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            for (int64_t r = r0; r < r1; ++r) {
                float* xr = x.f32_row(r);
                double d = 0.0;
                for (int64_t i = 0; i < w; ++i) d += static_cast<double>(vd[i]) * xr[i];
                const auto c = static_cast<float>(static_cast<double>(scale) * d);
                for (int64_t i = 0; i < w; ++i) xr[i] -= c * vd[i];
            }
        },
        rows_per_task(w));
}

namespace {

// Quantized weights whose rows the int8-activation kernels take (whole blocks, a kernel at the
// active level).
bool q8_path(const tensor& w) {
    // The int8-activation family serves the weight types whose dot partner is a quantized
    // activation (Q8_0 or Q8_K, quant's table); the float types keep f32 activations.
    const scalar_kernels& k = scalar_kernels_of(w.type);
    if (k.dot == nullptr || !type_traits_of(k.dot_partner).is_quantized) return false;
    const int64_t block = type_traits_of(w.type).block_elems;
    return w.ne[0] % block == 0 && cpu::simd::active_level() != cpu::simd::isa_level::scalar &&
           cpu::simd::q8_matmul_at(cpu::simd::active_level(), w.type) != nullptr;
}

}  // namespace

cpu_backend::op_timer::op_timer(cpu_backend& b, std::string_view name, std::string_view detail)
    : b_(b), on_(b.time_ops_), name_(name), detail_(detail) {
    if (!on_) return;
    parent_ = b_.open_timer_;
    b_.open_timer_ = this;
    t0_ = std::chrono::steady_clock::now();
}

cpu_backend::op_timer::~op_timer() {
    if (!on_) return;
    const std::chrono::nanoseconds total = std::chrono::steady_clock::now() - t0_;
    b_.open_timer_ = parent_;
    if (parent_ != nullptr) parent_->inner_ += total;
    std::string key(name_);
    if (!detail_.empty()) {
        key += ' ';
        key += detail_;
    }
    auto it = std::find_if(b_.op_times_.begin(), b_.op_times_.end(),
                           [&](const op_time& t) { return t.name == key; });
    if (it == b_.op_times_.end()) {
        b_.op_times_.push_back({std::move(key), 0, 0.0});
        it = b_.op_times_.end() - 1;
    }
    ++it->calls;
    it->seconds += std::chrono::duration<double>(total - inner_).count();
}

std::vector<op_time> cpu_backend::take_op_times() {
    std::vector<op_time> out = std::move(op_times_);
    op_times_.clear();
    std::stable_sort(out.begin(), out.end(),
                     [](const op_time& a, const op_time& b) { return a.seconds > b.seconds; });
    return out;
}

void cpu_backend::matmul(const tensor& w, const tensor& x, const tensor& y) {
    // Products inside the MoE op are the routed experts' (their group says so).
    const bool expert = open_timer_ != nullptr && open_timer_->name() == kMoeTimer;
    const op_timer timer(*this, type_name(static_cast<uint32_t>(w.type)),
                         expert ? "experts" : "matmul");
    MAGNETAR_ASSERT(x.ne[0] == w.ne[0] && y.ne[0] == w.ne[1] && y.n_rows() == x.n_rows(),
                    "matmul: shapes");
    MAGNETAR_ASSERT(x.ne[2] == 1 && y.ne[2] == 1 && x.ne[3] == 1 && y.ne[3] == 1,
                    "matmul: activations must be 2-D");
    if (!reference_ && !exact_ && q8_path(w)) {
        const size_t need =
            static_cast<size_t>(x.ne[1]) * cpu::simd::act_row_bytes(w.type, w.ne[0]);
        if (act_.size() < need) act_.resize(need);
        cpu::simd::q8_matmul(pool_, w, x, y, act_.data(), cpu::simd::active_level());
        return;
    }
    const cpu::matmul_fn fn = reference_ ? cpu::ref::matmul_ref : cpu::matmul_for(w.type);
    MAGNETAR_ASSERT(fn != nullptr, "matmul: no kernel for this weight type");
    const int64_t work_per_row = w.ne[0] * x.ne[1];
    const int64_t min_rows = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, work_per_row));
    pool_.parallel_for(
        w.ne[1], [&](int64_t r0, int64_t r1, int th) { fn(w, x, y, r0, r1, scratch(th)); },
        min_rows);
}

void cpu_backend::rms_norm(const tensor& x, const tensor& w, const tensor& out, uint32_t group,
                           float eps) {
    const op_timer timer(*this, "element-wise");
    const int64_t width = x.ne[0];
    MAGNETAR_ASSERT(width % group == 0 && out.ne[0] == width, "rms_norm: shapes");
    const float* wd = w ? w.f32() : nullptr;
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            for (int64_t r = r0; r < r1; ++r) {
                for (int64_t g = 0; g < width; g += group) {
                    cpu::rms_norm_row(x.f32_row(r) + g, wd, out.f32_row(r) + g, group, eps);
                }
            }
        },
        rows_per_task(width));
}

void cpu_backend::rope_tail(const tensor& x, uint32_t head_dim, const rope_params& rope, int64_t p0,
                            bool inverse) {
    const op_timer timer(*this, "element-wise");
    MAGNETAR_ASSERT(rope.n_rot <= kMaxRot && rope.n_rot <= head_dim && x.ne[0] % head_dim == 0,
                    "rope_tail: shapes");
    double omega[kMaxRot / 2];
    cpu::rope_freqs(rope, omega);
    const int64_t n_heads = x.ne[0] / head_dim;
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            float cs[kMaxRot];
            for (int64_t r = r0; r < r1; ++r) {
                cpu::rope_angles(omega, rope.n_rot, p0 + r, inverse, cs);
                for (int64_t h = 0; h < n_heads; ++h) {
                    cpu::rope_apply(x.f32_row(r) + h * head_dim, head_dim, rope.n_rot, cs);
                }
            }
        },
        rows_per_task(x.ne[0]));
}

void cpu_backend::fp8_kv_roundtrip(const tensor& x, uint32_t n_nope) {
    const op_timer timer(*this, "element-wise");
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            for (int64_t r = r0; r < r1; ++r) cpu::fp8_roundtrip(x.f32_row(r), n_nope);
        },
        rows_per_task(x.ne[0]));
}

void cpu_backend::indexer_qat(const tensor& x, uint32_t head_dim) {
    const op_timer timer(*this, "element-wise");
    const int64_t n_heads = x.ne[0] / head_dim;
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            for (int64_t r = r0; r < r1; ++r) {
                for (int64_t h = 0; h < n_heads; ++h) {
                    float* v = x.f32_row(r) + h * head_dim;
                    cpu::hadamard(v, head_dim);
                    cpu::fp4_roundtrip(v, head_dim);
                }
            }
        },
        rows_per_task(x.ne[0]));
}

}  // namespace magnetar::backend
