// CPU backend: hyper-connection ops (spec model.md §5.2 pre-mix with Sinkhorn, §5.4 post-mix,
// §5.6 output-head collapse).
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"

namespace magnetar::backend {

namespace {

constexpr uint32_t kMaxHc = 8;

// 1 / sqrt(mean(f^2) + eps) over the flattened state of one token.
float flat_rms_inv(const float* f, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(f[i]) * f[i];
    return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
}

// y = sum_j pre_j * x[j] over the streams of one token.
void collapse_streams(const float* x, const float* pre, uint32_t n_hc, int64_t d, float* y) {
    for (int64_t i = 0; i < d; ++i) {
        float acc = pre[0] * x[i];
        for (uint32_t j = 1; j < n_hc; ++j) acc += pre[j] * x[j * d + i];
        y[i] = acc;
    }
}

}  // namespace

void cpu_backend::hc_pre(const hc_params& p, const tensor& x, const tensor& fn, const tensor& scale,
                         const tensor& base, const tensor& y, const tensor& post,
                         const tensor& comb, const tensor& mix) {
    const op_timer timer(*this, "hyper-connections");
    const uint32_t nh = p.n_hc;
    const int64_t d = p.n_embd;
    MAGNETAR_ASSERT(nh <= kMaxHc && x.ne[0] == nh * d && mix.ne[0] == (2 + nh) * nh,
                    "hc_pre: shapes");
    matmul(fn, x, mix);  // [n, (2+n_hc)*n_hc] = fn . f (before the RMS factor)
    const float* sc = scale.f32();
    const float* bs = base.f32();
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            float z[kMaxHc * kMaxHc];
            float pre[kMaxHc];
            for (int64_t t = r0; t < r1; ++t) {
                const float* f = x.f32_row(t);
                const float r = flat_rms_inv(f, nh * d, p.norm_eps);
                const float* m = mix.f32_row(t);
                float* po = post.f32_row(t);
                for (uint32_t j = 0; j < nh; ++j) {
                    pre[j] = cpu::sigmoid(m[j] * r * sc[0] + bs[j]) + p.hc_eps;
                    po[j] = 2.0f * cpu::sigmoid(m[nh + j] * r * sc[1] + bs[nh + j]);
                }
                for (uint32_t k = 0; k < nh * nh; ++k)
                    z[k] = m[2 * nh + k] * r * sc[2] + bs[2 * nh + k];
                cpu::sinkhorn(z, comb.f32_row(t), static_cast<int>(nh), p.hc_eps,
                              static_cast<int>(p.sinkhorn_iters));
                collapse_streams(f, pre, nh, d, y.f32_row(t));
            }
        },
        1);
}

void cpu_backend::hc_post(const hc_params& p, const tensor& x, const tensor& f, const tensor& post,
                          const tensor& comb, const tensor& out) {
    const op_timer timer(*this, "hyper-connections");
    const uint32_t nh = p.n_hc;
    const int64_t d = p.n_embd;
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            for (int64_t t = r0; t < r1; ++t) {
                const float* xs = x.f32_row(t);
                const float* ft = f.f32_row(t);
                const float* po = post.f32_row(t);
                const float* m = comb.f32_row(t);
                float* o = out.f32_row(t);
                for (uint32_t b = 0; b < nh; ++b) {
                    for (int64_t i = 0; i < d; ++i) {
                        float acc = po[b] * ft[i];
                        for (uint32_t a = 0; a < nh; ++a) acc += m[a * nh + b] * xs[a * d + i];
                        o[b * d + i] = acc;
                    }
                }
            }
        },
        1);
}

void cpu_backend::hc_collapse(const hc_params& p, const tensor& x, const tensor& fn,
                              const tensor& scale, const tensor& base, const tensor& out,
                              const tensor& mix) {
    const op_timer timer(*this, "hyper-connections");
    const uint32_t nh = p.n_hc;
    const int64_t d = p.n_embd;
    MAGNETAR_ASSERT(nh <= kMaxHc && mix.ne[0] == nh, "hc_collapse: shapes");
    matmul(fn, x, mix);
    const float s0 = scale.f32()[0];
    const float* bs = base.f32();
    pool_.parallel_for(
        x.n_rows(),
        [&](int64_t r0, int64_t r1, int) {
            float pre[kMaxHc];
            for (int64_t t = r0; t < r1; ++t) {
                const float* f = x.f32_row(t);
                const float r = flat_rms_inv(f, nh * d, p.norm_eps);
                const float* m = mix.f32_row(t);
                for (uint32_t j = 0; j < nh; ++j)
                    pre[j] = cpu::sigmoid(m[j] * r * s0 + bs[j]) + p.hc_eps;
                collapse_streams(f, pre, nh, d, out.f32_row(t));
            }
        },
        1);
}

}  // namespace magnetar::backend
