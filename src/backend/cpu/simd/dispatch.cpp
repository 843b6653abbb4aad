// CPUID-based choice of the kernel level (once per process), the MAGNETAR_SIMD override, the
// IQ2_XXS lookup tables, and the thread-pool drivers of simd.h. Compiled without ISA flags, so
// everything here runs on any x86-64 CPU.
#include <cpuid.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "backend/cpu/simd/simd_internal.h"
#include "core/error.h"
#include "quant/dot_ref.h"
#include "quant/fp16.h"
#include "quant/iq2_tables.h"

namespace magnetar::cpu::simd {

namespace {

bool has_f16c() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    return (c & bit_F16C) != 0;
}

struct cpu_features {
    bool avx2 = false;
    bool avx512 = false;      // F, BW, VL, DQ and VNNI
    bool avx512bf16 = false;  // AVX512-BF16 on top of avx512
};

const cpu_features& features() {
    static const cpu_features f = [] {
        cpu_features r;
        __builtin_cpu_init();
        r.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
        r.avx512 = r.avx2 && __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
        r.avx512bf16 = r.avx512 && __builtin_cpu_supports("avx512bf16");
#if defined(MAGNETAR_SIMD_EMULATE_AVX512)
        // Emulated-AVX-512 test build: the AVX-512 units run on SIMDe over AVX2.
        r.avx512 = r.avx2;
        r.avx512bf16 = r.avx2;
#endif
        return r;
    }();
    return f;
}

isa_level best_level() {
    const cpu_features& f = features();
    if (f.avx512) return isa_level::avx512;
    if (f.avx2) return isa_level::avx2;
    return isa_level::scalar;
}

// MAGNETAR_SIMD=off|avx2|avx512|auto caps the level (it never raises it above the CPU's).
isa_level choose_level() {
    const isa_level best = best_level();
    const char* env = std::getenv("MAGNETAR_SIMD");
    const std::string_view v = env ? env : "";
    isa_level cap = isa_level::avx512;
    if (v == "off" || v == "scalar") {
        cap = isa_level::scalar;
    } else if (v == "avx2") {
        cap = isa_level::avx2;
    } else if (!v.empty() && v != "auto" && v != "avx512") {
        std::fprintf(stderr,
                     "magnetar: warning: MAGNETAR_SIMD=%s not understood (off|avx2|avx512|auto), "
                     "using auto\n",
                     env);
    }
    return std::min(best, cap);
}

const detail::kernel_table& table_of(isa_level level) {
    switch (level) {
        case isa_level::scalar:
            return detail::table_scalar();
        case isa_level::avx2:
            return detail::table_avx2();
        case isa_level::avx512:
            return *detail::table_avx512();
    }
    return detail::table_scalar();
}

// Output rows handed to a thread in multiples of this (keeps decode tiles whole).
constexpr int64_t kRowUnit = 16;

// Rows below which a product is not worth waking another thread for.
int64_t min_units(int64_t work_per_row) {
    const int64_t rows = std::max<int64_t>(1, 262144 / std::max<int64_t>(1, work_per_row));
    return (rows + kRowUnit - 1) / kRowUnit;
}

}  // namespace

bool cpu_supports(isa_level level) {
    switch (level) {
        case isa_level::scalar:
            return true;
        case isa_level::avx2:
            return features().avx2;
        case isa_level::avx512:
            return features().avx512;
    }
    return false;
}

isa_level active_level() {
    static const isa_level level = choose_level();
    return level;
}

const char* level_name(isa_level level) {
    switch (level) {
        case isa_level::scalar:
            return "scalar";
        case isa_level::avx2:
            return "avx2";
        case isa_level::avx512:
            return "avx512";
    }
    return "?";
}

namespace detail {

int slot_of(ggml_type t) {
    for (int slot = 0; slot < n_slots; ++slot) {
        if (kSlotTypes[slot] == t) return slot;
    }
    return -1;
}

const iq2_tables& iq2() {
    static const iq2_tables* tables = [] {
        auto* t = new iq2_tables;
        for (int g = 0; g < 256; ++g) {
            for (int j = 0; j < 8; ++j)
                t->grid[g][j] = static_cast<float>((kIq2xxsGrid[g] >> (8 * j)) & 0xFF);
        }
        for (uint32_t i = 0; i < 128; ++i) {
            const uint8_t s = iq2_ksign(i);
            for (int j = 0; j < 8; ++j) t->sign_mask[i][j] = ((s >> j) & 1) ? 0x80000000u : 0u;
        }
        return t;
    }();
    return *tables;
}

void matmul_via_rows(rows_fn fn, const tensor& w, const tensor& x, const tensor& y, int64_t r0,
                     int64_t r1) {
    const int64_t n_tok = x.ne[1];
    const float* xs[kTokenTile];
    float* ys[kTokenTile];
    for (int64_t t0 = 0; t0 < n_tok; t0 += kTokenTile) {
        const int64_t n = std::min(kTokenTile, n_tok - t0);
        for (int64_t t = 0; t < n; ++t) {
            xs[t] = x.f32_row(t0 + t);
            ys[t] = y.f32_row(t0 + t);
        }
        fn(w, xs, ys, n, r0, r1);
    }
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// f32-activation family
// ---------------------------------------------------------------------------------------------

matmul_fn matmul_at(isa_level level, ggml_type t) {
    const int slot = detail::slot_of(t);
    if (slot < 0 || !cpu_supports(level)) return nullptr;
    return table_of(level).matmul[slot];
}

matmul_fn simd_matmul_for(ggml_type t) {
    const isa_level level = active_level();
    if (level == isa_level::scalar) return nullptr;
    return matmul_at(level, t);
}

void matmul(thread_pool& pool, const tensor& w, const tensor& x, const tensor& y, matmul_fn fn) {
    MAGNETAR_ASSERT(x.ne[0] == w.ne[0] && y.ne[0] == w.ne[1] && y.ne[1] == x.ne[1],
                    "simd::matmul: shapes");
    if (!fn) fn = simd_matmul_for(w.type);
    if (!fn) fn = matmul_at(isa_level::scalar, w.type);
    MAGNETAR_ASSERT(fn != nullptr, "simd::matmul: no kernel for this weight type");
    const int64_t n_out = w.ne[1];
    const int64_t units = (n_out + kRowUnit - 1) / kRowUnit;
    pool.parallel_for(
        units,
        [&](int64_t u0, int64_t u1, int) {
            fn(w, x, y, u0 * kRowUnit, std::min(n_out, u1 * kRowUnit), nullptr);
        },
        min_units(w.ne[0] * x.ne[1]));
}

void matmul_experts(thread_pool& pool, const tensor& w, const tensor& x, const tensor& y,
                    const expert_routes& routes, isa_level level) {
    const int slot = detail::slot_of(w.type);
    MAGNETAR_ASSERT(slot >= 0 && cpu_supports(level),
                    "matmul_experts: no kernel for this type / level");
    const detail::rows_fn fn = table_of(level).rows[slot];
    const int64_t n_expert = w.ne[2];
    const int64_t n_out = w.ne[1];
    const int64_t n = routes.n_routes;

    // Routes grouped by expert (stable), as pointer arrays; reused buffers, grown only.
    thread_local std::vector<int64_t> start;
    thread_local std::vector<const float*> xs;
    thread_local std::vector<float*> ys;
    start.assign(static_cast<size_t>(n_expert + 1), 0);
    xs.resize(static_cast<size_t>(n));
    ys.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const int32_t e = routes.expert[i];
        MAGNETAR_ASSERT(e >= 0 && e < n_expert, "matmul_experts: expert id out of range");
        ++start[static_cast<size_t>(e) + 1];
    }
    for (int64_t e = 0; e < n_expert; ++e) start[e + 1] += start[e];
    {
        thread_local std::vector<int64_t> fill;
        fill.assign(start.begin(), start.end() - 1);
        for (int64_t i = 0; i < n; ++i) {
            const int64_t pos = fill[static_cast<size_t>(routes.expert[i])]++;
            xs[pos] = x.f32_row(routes.x_rows[i]);
            ys[pos] = y.f32_row(routes.y_rows[i]);
        }
    }

    // Work items: (expert, row chunk); chunks sized so every thread gets whole items.
    thread_local std::vector<int32_t> item_expert;
    item_expert.clear();
    for (int64_t e = 0; e < n_expert; ++e) {
        if (start[e + 1] > start[e]) item_expert.push_back(static_cast<int32_t>(e));
    }
    const int64_t n_used = static_cast<int64_t>(item_expert.size());
    if (n_used == 0) return;
    const int64_t chunk_units = std::max<int64_t>(
        1, ((n_out + kRowUnit - 1) / kRowUnit * n_used + pool.size() - 1) / pool.size() / n_used);
    const int64_t chunk = std::min(n_out, chunk_units * kRowUnit);
    const int64_t chunks_per_expert = (n_out + chunk - 1) / chunk;
    // Plain pointers: the workers must see this thread's buffers, not their own thread_locals.
    const float* const* xsp = xs.data();
    float* const* ysp = ys.data();
    const int64_t* sp = start.data();
    const int32_t* ie = item_expert.data();
    pool.parallel_for(n_used * chunks_per_expert, [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) {
            const int32_t e = ie[i / chunks_per_expert];
            const int64_t r0 = (i % chunks_per_expert) * chunk;
            tensor we = w;
            we.data = static_cast<uint8_t*>(w.data) + static_cast<size_t>(e) * w.nb[2];
            we.ne[2] = 1;
            fn(we, xsp + sp[e], ysp + sp[e], sp[e + 1] - sp[e], r0, std::min(n_out, r0 + chunk));
        }
    });
}

// ---------------------------------------------------------------------------------------------
// q8-activation family
// ---------------------------------------------------------------------------------------------

size_t act_row_bytes(ggml_type wt, int64_t n) {
    return row_bytes(dot_partner_type(wt), n);
}

void quantize_act(ggml_type wt, const float* x, void* dst, int64_t n, isa_level level) {
    const detail::kernel_table& k = table_of(cpu_supports(level) ? level : isa_level::scalar);
    // The partner types are the activation formats (quant/quantize_act.h); a new weight type
    // reuses one of them.
    const ggml_type partner = dot_partner_type(wt);
    if (partner == ggml_type::Q8_0) return k.quantize_q8_0(x, dst, n);
    if (partner == ggml_type::Q8_K) return k.quantize_q8_K(x, dst, n);
    auto* h = static_cast<uint16_t*>(dst);
    if (partner == ggml_type::F16) {
        for (int64_t i = 0; i < n; ++i) h[i] = f32_to_fp16(x[i]);
        return;
    }
    if (partner == ggml_type::BF16) {
        for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
        return;
    }
    MAGNETAR_ASSERT(partner == ggml_type::F32, "quantize_act: no partner type");
    std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

vec_dot_fn vec_dot_at(isa_level level, ggml_type wt) {
    const int slot = detail::slot_of(wt);
    if (slot < 0 || !cpu_supports(level)) return nullptr;
    if (wt == ggml_type::BF16 && level == isa_level::avx512 && features().avx512bf16) {
        return detail::bf16_dot_avx512bf16();
    }
    return table_of(level).dot[slot];
}

q8_matmul_fn q8_matmul_at(isa_level level, ggml_type wt) {
    const int slot = detail::slot_of(wt);
    if (slot < 0 || !cpu_supports(level)) return nullptr;
    if (wt == ggml_type::BF16 && level == isa_level::avx512 && features().avx512bf16) {
        return detail::bf16_matmul_avx512bf16();
    }
    return table_of(level).q8_matmul[slot];
}

void q8_matmul(thread_pool& pool, const tensor& w, const tensor& x, const tensor& y, void* act,
               isa_level level) {
    MAGNETAR_ASSERT(x.ne[0] == w.ne[0] && y.ne[0] == w.ne[1] && y.ne[1] == x.ne[1],
                    "q8_matmul: shapes");
    const q8_matmul_fn fn = q8_matmul_at(level, w.type);
    MAGNETAR_ASSERT(fn != nullptr, "q8_matmul: no kernel for this weight type / level");
    const int64_t n_in = w.ne[0];
    const int64_t n_tok = x.ne[1];
    const size_t stride = act_row_bytes(w.type, n_in);
    auto* a = static_cast<uint8_t*>(act);
    pool.parallel_for(
        n_tok,
        [&](int64_t t0, int64_t t1, int) {
            for (int64_t t = t0; t < t1; ++t)
                quantize_act(w.type, x.f32_row(t), a + static_cast<size_t>(t) * stride, n_in,
                             level);
        },
        std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n_in)));
    const int64_t n_out = w.ne[1];
    const int64_t units = (n_out + kRowUnit - 1) / kRowUnit;
    pool.parallel_for(
        units,
        [&](int64_t u0, int64_t u1, int) {
            fn(w, act, stride, y, u0 * kRowUnit, std::min(n_out, u1 * kRowUnit));
        },
        min_units(n_in * n_tok));
}

index_scores_fn index_scores_at(isa_level level) {
    if (!cpu_supports(level)) return nullptr;
    return table_of(level).index_scores;
}

index_scores_fn index_scores() {
    static const index_scores_fn fn = table_of(active_level()).index_scores;
    return fn;
}

uint64_t stream_sum(const void* data, size_t bytes) {
    MAGNETAR_ASSERT(bytes % 256 == 0, "stream_sum: size must be a multiple of 256 bytes");
    return table_of(active_level()).stream_sum(data, bytes);
}

uint64_t peak_int8(uint64_t rounds, uint64_t* macs) {
    return table_of(active_level()).peak_int8(rounds, macs);
}

uint64_t peak_f32(uint64_t rounds, uint64_t* macs) {
    return table_of(active_level()).peak_f32(rounds, macs);
}

}  // namespace magnetar::cpu::simd
