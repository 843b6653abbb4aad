// Scalar numerics of the CPU backend (see kernels.h for the contracts).
#include "backend/cpu/kernels.h"

#include <algorithm>
#include <cstring>

#include "quant/fp16.h"
#include "quant/types.h"

namespace magnetar::cpu {

float pow2_ceil(float v) {
    const uint32_t bits = f32_to_bits(v);
    uint32_t exp = (bits >> 23) & 0xffu;
    const uint32_t mant = bits & 0x7fffffu;
    if (exp == 0) return bits_to_f32(1u << 23);  // subnormal: the smallest normal power, 2^-126
    if (mant != 0) ++exp;
    return bits_to_f32(exp << 23);
}

float e4m3_round(float v) {
    const float a = std::fabs(v);
    float q;
    if (a < 0.015625f) {
        // Subnormal codes m * 2^-9, m = 0..7 (and 8 = the smallest normal).
        q = std::nearbyint(a * 512.0f) * (1.0f / 512.0f);
    } else {
        int e;
        std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): binade [2^(e-1), 2^e)
        const float step = std::ldexp(1.0f, e - 1 - 3);
        q = std::nearbyint(a / step) * step;  // exact scaling; ties to the even mantissa
    }
    return v < 0.0f ? -q : q;
}

float e2m1_round(float v) {
    // Magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}; midpoints tie to the even code index.
    const float a = std::fabs(v);
    float q;
    if (a <= 0.25f) {
        q = 0.0f;
    } else if (a < 0.75f) {
        q = 0.5f;
    } else if (a <= 1.25f) {
        q = 1.0f;
    } else if (a < 1.75f) {
        q = 1.5f;
    } else if (a <= 2.5f) {
        q = 2.0f;
    } else if (a < 3.5f) {
        q = 3.0f;
    } else if (a <= 5.0f) {
        q = 4.0f;
    } else {
        q = 6.0f;
    }
    return v < 0.0f ? -q : q;
}

namespace {

template <float (*round_fn)(float)>
void block_roundtrip(float* x, int64_t n, float amax_floor, float max_code, float inv_max) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    amax = std::max(amax, amax_floor);
    const float scale = pow2_ceil(amax * inv_max);
    for (int64_t i = 0; i < n; ++i) {
        float v = x[i] / scale;
        v = std::min(std::max(v, -max_code), max_code);
        x[i] = round_fn(v) * scale;
    }
}

}  // namespace

void fp8_roundtrip(float* x, int64_t n) {
    for (int64_t b = 0; b < n; b += 64) {
        block_roundtrip<e4m3_round>(x + b, std::min<int64_t>(64, n - b), 1e-4f, 448.0f,
                                    1.0f / 448.0f);
    }
}

void fp4_roundtrip(float* x, int64_t n) {
    const float floor = 6.0f * std::ldexp(1.0f, -126);
    for (int64_t b = 0; b < n; b += 32) {
        block_roundtrip<e2m1_round>(x + b, std::min<int64_t>(32, n - b), floor, 6.0f, 1.0f / 6.0f);
    }
}

void hadamard(float* x, int64_t n) {
    for (int64_t h = 1; h < n; h *= 2) {
        for (int64_t i = 0; i < n; i += 2 * h) {
            for (int64_t j = i; j < i + h; ++j) {
                const float a = x[j];
                const float b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
    const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void rope_freqs(const backend::rope_params& rope, double* omega) {
    const uint32_t half = rope.n_rot / 2;
    const double base = rope.freq_base;
    const double dim = rope.n_rot;
    double lo = 0.0, hi = 0.0;
    if (rope.yarn) {
        const double pi = 3.14159265358979323846;
        auto corr = [&](double beta) {
            return dim * std::log(static_cast<double>(rope.yarn_orig_ctx) / (2.0 * pi * beta)) /
                   (2.0 * std::log(base));
        };
        lo = std::max(0.0, std::floor(corr(rope.beta_fast)));
        hi = std::min(dim - 1.0, std::ceil(corr(rope.beta_slow)));
    }
    for (uint32_t j = 0; j < half; ++j) {
        const double theta = std::pow(base, -2.0 * j / dim);
        if (!rope.yarn) {
            omega[j] = theta;
            continue;
        }
        double r = (j - lo) / std::max(hi - lo, 0.001);
        r = std::min(std::max(r, 0.0), 1.0);
        omega[j] = theta * (1.0 - r) + theta / rope.yarn_factor * r;
    }
}

void rope_angles(const double* omega, uint32_t n_rot, int64_t p, bool inverse, float* cs) {
    for (uint32_t j = 0; j < n_rot / 2; ++j) {
        const double phi = static_cast<double>(p) * omega[j];
        cs[2 * j] = static_cast<float>(std::cos(phi));
        const float s = static_cast<float>(std::sin(phi));
        cs[2 * j + 1] = inverse ? -s : s;
    }
}

void rope_apply(float* x, uint32_t head_dim, uint32_t n_rot, const float* cs) {
    float* t = x + (head_dim - n_rot);
    for (uint32_t j = 0; j < n_rot / 2; ++j) {
        const float a = t[2 * j];
        const float b = t[2 * j + 1];
        const float c = cs[2 * j];
        const float s = cs[2 * j + 1];
        t[2 * j] = a * c - b * s;
        t[2 * j + 1] = a * s + b * c;
    }
}

void sinkhorn(const float* z, float* m, int n, float eps, int iters) {
    // Row softmax (over destinations b), plus eps.
    for (int a = 0; a < n; ++a) {
        float mx = z[a * n];
        for (int b = 1; b < n; ++b) mx = std::max(mx, z[a * n + b]);
        float s = 0.0f;
        for (int b = 0; b < n; ++b) {
            m[a * n + b] = std::exp(z[a * n + b] - mx);
            s += m[a * n + b];
        }
        for (int b = 0; b < n; ++b) m[a * n + b] = m[a * n + b] / s + eps;
    }
    auto col_norm = [&] {
        for (int b = 0; b < n; ++b) {
            float s = 0.0f;
            for (int a = 0; a < n; ++a) s += m[a * n + b];
            for (int a = 0; a < n; ++a) m[a * n + b] = m[a * n + b] / (s + eps);
        }
    };
    col_norm();
    for (int it = 1; it < iters; ++it) {
        for (int a = 0; a < n; ++a) {
            float s = 0.0f;
            for (int b = 0; b < n; ++b) s += m[a * n + b];
            for (int b = 0; b < n; ++b) m[a * n + b] = m[a * n + b] / (s + eps);
        }
        col_norm();
    }
}

void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    if (w) {
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r * w[i];
    } else {
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r;
    }
}

void dequant_row(const tensor& w, int64_t r, float* dst) {
    const uint8_t* src = w.row_ptr(r);
    if (w.type == ggml_type::F32) {
        std::memcpy(dst, src, static_cast<size_t>(w.ne[0]) * 4);
        return;
    }
    to_float_of(w.type)(src, dst, w.ne[0]);
}

tensor expert_view(const tensor& w, int64_t e) {
    tensor v = w;
    v.data = static_cast<uint8_t*>(w.data) + static_cast<size_t>(e) * w.nb[2];
    v.ne[2] = 1;
    v.nb[3] = v.nb[2];
    return v;
}

void sort_slots_by_expert(const tensor& sel, int64_t n_expert, int32_t* order, int32_t* row_of,
                          int32_t* start) {
    const int64_t n = sel.n_rows();
    const int64_t k = sel.ne[0];
    std::fill_n(start, n_expert + 1, 0);
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < k; ++i) ++start[sel.i32_row(t)[i] + 1];
    }
    for (int64_t e = 0; e < n_expert; ++e) start[e + 1] += start[e];
    // Place the pairs with running cursors (start[e] advances to start[e + 1]; restored below).
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < k; ++i) {
            const int32_t e = sel.i32_row(t)[i];
            const int32_t r = start[e]++;
            order[r] = static_cast<int32_t>(t * k + i);
            row_of[t * k + i] = r;
        }
    }
    for (int64_t e = n_expert; e > 0; --e) start[e] = start[e - 1];
    start[0] = 0;
}

}  // namespace magnetar::cpu
