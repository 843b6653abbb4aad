// DeepSeek V4.1 rotary embedding (spec v41 §3.3): see rope41.h.
//
// The fp32 steps are written one operation per statement (and the project compiles with
// -ffp-contract=off), so every f32(...) of the spec is one rounding here too.
#include "backend/rope41.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "quant/fp8fp4.h"

namespace magnetar::rope41 {

namespace {

void check_n_rot(int n_rot) {
    if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > 65536) {
        throw Error("rope41: n_rot must be a positive even number, got " + std::to_string(n_rot));
    }
}

}  // namespace

yarn_range yarn_correction_range(int n_rot, double theta, const yarn_params& yarn) {
    check_n_rot(n_rot);
    if (!(theta > 1.0) || yarn.orig_ctx == 0 || !(yarn.beta_fast > 0) || !(yarn.beta_slow > 0)) {
        throw Error("rope41: YaRN needs theta > 1, an original context > 0 and positive betas");
    }
    const double two_pi = 2.0 * 3.14159265358979323846;
    const double ln_theta = std::log(theta);
    auto cd = [&](double beta) {
        return static_cast<double>(n_rot) *
               std::log(static_cast<double>(yarn.orig_ctx) / (beta * two_pi)) / (2.0 * ln_theta);
    };
    yarn_range r;
    r.lo = std::max(std::floor(cd(yarn.beta_fast)), 0.0);
    r.hi = std::min(std::ceil(cd(yarn.beta_slow)), static_cast<double>(n_rot - 1));
    return r;
}

std::vector<float> inv_freq(int n_rot, double theta, const yarn_params* yarn) {
    check_n_rot(n_rot);
    std::vector<float> inv(static_cast<size_t>(n_rot / 2));
    inv_freq(n_rot, theta, yarn, inv.data());
    return inv;
}

void inv_freq(int n_rot, double theta, const yarn_params* yarn, float* inv) {
    check_n_rot(n_rot);
    if (!(theta > 0.0) || !std::isfinite(theta)) {
        throw Error("rope41: theta must be positive and finite");
    }
    const int half = n_rot / 2;
    const float dr = static_cast<float>(n_rot);
    for (int i = 0; i < half; ++i) {
        const float e = static_cast<float>(2 * i) / dr;
        const float pw = static_cast<float>(std::pow(theta, static_cast<double>(e)));
        inv[i] = 1.0f / pw;
    }
    if (yarn == nullptr || yarn->orig_ctx == 0) return;
    if (!(yarn->factor > 0.0f)) throw Error("rope41: YaRN factor must be positive");
    const yarn_range r = yarn_correction_range(n_rot, theta, *yarn);
    const float span = static_cast<float>(std::max(r.hi - r.lo, 0.001));
    const float lo = static_cast<float>(r.lo);
    for (int i = 0; i < half; ++i) {
        const float num = static_cast<float>(i) - lo;
        const float ramp = std::clamp(num / span, 0.0f, 1.0f);
        const float sm = 1.0f - ramp;
        const float f = inv[i];
        const float scaled = f / yarn->factor;
        const float one_minus_sm = 1.0f - sm;
        const float a = scaled * one_minus_sm;
        const float b = f * sm;
        inv[i] = a + b;
    }
}

void cos_sin(int64_t pos, const float* inv_freq, int n_pairs, float* cs) {
    const float p = static_cast<float>(pos);
    for (int i = 0; i < n_pairs; ++i) {
        const float th = p * inv_freq[i];
        cs[2 * i] = std::cos(th);
        cs[2 * i + 1] = std::sin(th);
    }
}

void apply(float* x, int n_rot, int64_t pos, const float* inv_freq, bool inverse) {
    check_n_rot(n_rot);
    const float p = static_cast<float>(pos);
    for (int i = 0; i < n_rot / 2; ++i) {
        const float th = p * inv_freq[i];
        const float c = std::cos(th);
        const float s = inverse ? -std::sin(th) : std::sin(th);
        const float x0 = x[2 * i];
        const float x1 = x[2 * i + 1];
        const float y0 = x0 * c - x1 * s;
        const float y1 = x0 * s + x1 * c;
        x[2 * i] = quant::round_bf16(y0);
        x[2 * i + 1] = quant::round_bf16(y1);
    }
}

void apply_heads(float* x, int64_t n_heads, int64_t head_dim, int n_rot, int64_t pos,
                 const float* inv_freq, bool inverse) {
    check_n_rot(n_rot);
    if (head_dim < n_rot) {
        throw Error("rope41: head_dim " + std::to_string(head_dim) + " is smaller than n_rot " +
                    std::to_string(n_rot));
    }
    for (int64_t h = 0; h < n_heads; ++h) {
        apply(x + h * head_dim + (head_dim - n_rot), n_rot, pos, inv_freq, inverse);
    }
}

}  // namespace magnetar::rope41
