// Shared helpers of the SIMD kernel tests (simd_kernels_test.cpp and
// simd_mxfp4_index_test.cpp): the SIMD levels this CPU runs, weight / activation / output
// buffers with padded strides, and the |dot| tolerance scale.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/simd/simd.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "quant/dot_ref.h"
#include "quant/types.h"

namespace magnetar::test {

inline std::vector<cpu::simd::isa_level> simd_levels() {
    std::vector<cpu::simd::isa_level> out;
    for (cpu::simd::isa_level l : {cpu::simd::isa_level::avx2, cpu::simd::isa_level::avx512}) {
        if (cpu::simd::cpu_supports(l)) out.push_back(l);
    }
    return out;
}

// A weight matrix of n_out rows: its bytes and the tensor viewing them.
struct weights {
    std::vector<uint8_t> bytes;
    tensor w;
};

// Activations [n_in, n_tok] with a row stride of n_in + gap floats; the gaps hold NaN so a
// kernel reading past a row shows up.
struct acts {
    std::vector<float> data;
    tensor x;
};

inline acts random_acts(int64_t n_in, int64_t n_tok, uint64_t seed, int64_t gap = 0) {
    acts a;
    const int64_t ld = n_in + gap;
    a.data.assign(static_cast<size_t>(ld * n_tok), std::nanf(""));
    Rng rng(seed);
    for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t i = 0; i < n_in; ++i)
            a.data[static_cast<size_t>(t * ld + i)] = 2.0f * rng.uniform01() - 1.0f;
    }
    a.x = make_tensor(a.data.data(), ggml_type::F32, n_in, n_tok);
    a.x.nb[1] = static_cast<size_t>(ld) * sizeof(float);
    a.x.nb[2] = a.x.nb[3] = a.x.nb[1] * static_cast<size_t>(n_tok);
    return a;
}

struct outs {
    std::vector<float> data;
    tensor y;
};

inline outs make_outs(int64_t n_out, int64_t n_tok, int64_t gap = 3) {
    outs o;
    const int64_t ld = n_out + gap;
    o.data.assign(static_cast<size_t>(ld * n_tok), -7.0f);
    o.y = make_tensor(o.data.data(), ggml_type::F32, n_out, n_tok);
    o.y.nb[1] = static_cast<size_t>(ld) * sizeof(float);
    o.y.nb[2] = o.y.nb[3] = o.y.nb[1] * static_cast<size_t>(n_tok);
    return o;
}

// |dot| tolerance of the README: 1e-5 of the row's sum of absolute products.
inline double abs_sum(ggml_type wt, const void* w, const void* act, int64_t n) {
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    to_float_of(wt)(w, a.data(), n);
    to_float_of(dot_partner_type(wt))(act, b.data(), n);
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(a[i]) * b[i]);
    return s;
}

}  // namespace magnetar::test
