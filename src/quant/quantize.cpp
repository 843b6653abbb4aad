// Weight quantizers, ported from the algorithms of GGML's ggml-quants.c:
// - Q8_0: quantize_row_q8_0_ref (scale amax / 127, codes rounded half away from zero).
// - Q4_K / Q2_K without importance: per sub-block (min, scale) fits by make_qkx2_quants with
//   weights av_x + |x| (Q4_K) or |x| and absolute error (Q2_K); the sub-block scales and mins
//   are then quantized linearly to 6 / 4 bits against the largest one.
// - Q4_K / Q2_K with importance: weights imatrix * sqrt(sigma^2 + x^2), fits by
//   make_qkx3_quants, and the sub-block scales / mins quantized by make_qp_quants.
// - IQ2_XXS: signs chosen per group of 8 with even parity (flipping the least important
//   value), magnitudes searched on the E8-style lattice of 256 grid points through a map of
//   all 4^8 points to their nearest grid neighbours, scale refined over a few candidates.
// Codes are always requantized against the final (rounded) scales so the stored bytes decode
// to the best values those scales allow.
#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/fp8fp4.h"
#include "quant/iq2_tables.h"
#include "quant/row_kernels.h"

namespace magnetar {

namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, for |v| <= 2^22 (GGML's nearest_int).
inline int nearest_int(float v) {
    const float shifted = v + 12582912.0f;
    int32_t i;
    std::memcpy(&i, &shifted, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

// ---------------------------------------------------------------------------------------------
// Scale / min fits
// ---------------------------------------------------------------------------------------------

// Affine fit x ~ scale * L + min (min <= 0) with L in [0, nmax], weighted; tries nstep + 1
// candidate inverse scales around nmax / (max - min) and refits (scale, min) by weighted least
// squares for each. Returns scale; *neg_min = -min. qkx3 = true: the importance-weighted
// variant (max <= min is the degenerate case); weights must be non-null.
float fit_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                    float* neg_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                    bool use_mad, bool qkx3) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (qkx3 ? max <= min : max == min) {
        std::memset(L, 0, static_cast<size_t>(n));
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = static_cast<float>(nmax) / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *neg_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = std::max(0, std::min(nmax, l));
            Laux[i] = static_cast<uint8_t>(l);
            const float w = weights[i];
            const auto lf = static_cast<float>(l);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? std::fabs(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                std::memcpy(L, Laux, static_cast<size_t>(n));
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

// Quantizes n non-negative values to L in [0, nmax] with one scale, weighted: a few candidate
// scales, then coordinate-wise refinement of L. Returns the scale (GGML's make_qp_quants).
float fit_scale_nonneg(int n, int nmax, const float* x, uint8_t* L, const float* w) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
    if (max < kGroupMaxEps) {
        std::memset(L, 0, static_cast<size_t>(n));
        return 0.0f;
    }
    float iscale = static_cast<float>(nmax) / max;
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * static_cast<float>(l);
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale * x[i]));
        L[i] = static_cast<uint8_t>(l);
        const auto lf = static_cast<float>(l);
        sumlx += w[i] * x[i] * lf;
        suml2 += w[i] * lf * lf;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float wi = w[i];
            const auto li = static_cast<float>(L[i]);
            float slx = sumlx - wi * x[i] * li;
            float sl2 = suml2 - wi * li * li;
            if (slx > 0 && sl2 > 0) {
                const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    const auto nl = static_cast<float>(new_l);
                    slx += wi * x[i] * nl;
                    sl2 += wi * nl * nl;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<uint8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

// ---------------------------------------------------------------------------------------------
// Q8_0
// ---------------------------------------------------------------------------------------------

void quantize_q8_0_row(const float* x, block_q8_0* y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    }
}

// ---------------------------------------------------------------------------------------------
// Q4_K
// ---------------------------------------------------------------------------------------------

void q4_K_scale_min(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void q4_K_pack_scales(const uint8_t* ls, const uint8_t* lm, uint8_t* s) {
    std::memset(s, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
            s[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
        }
    }
}

void quantize_q4_K_row(const float* x, block_q4_K* y, int64_t n, const float* qw_row) {
    uint8_t L[QK_K], Laux[32], Ls[8], Lm[8];
    float weights[32], mins[8], scales[8], sw[8];
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        float sum_x2 = 0;
        for (int l = 0; l < QK_K; ++l) sum_x2 += x[l] * x[l];
        if (qw_row) {
            const float sigma2 = 2 * sum_x2 / QK_K;
            const float* qw = qw_row + b * QK_K;
            for (int j = 0; j < 8; ++j) {
                float sumw = 0;
                for (int l = 0; l < 32; ++l) {
                    weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
                    sumw += weights[l];
                }
                sw[j] = sumw;
                scales[j] = fit_scale_min(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                          -0.9f, 0.05f, 36, false, true);
            }
            const float d_block = fit_scale_nonneg(8, 63, scales, Ls, sw);
            const float m_block = fit_scale_nonneg(8, 63, mins, Lm, sw);
            q4_K_pack_scales(Ls, Lm, y[b].scales);
            y[b].d = f32_to_fp16(d_block);
            y[b].dmin = f32_to_fp16(m_block);
        } else {
            float max_scale = 0, max_min = 0;
            for (int j = 0; j < 8; ++j) {
                float s2 = 0;
                for (int l = 0; l < 32; ++l) s2 += x[32 * j + l] * x[32 * j + l];
                const float av_x = std::sqrt(s2 / 32);
                for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
                scales[j] = fit_scale_min(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                          -1.0f, 0.1f, 20, false, false);
                max_scale = std::max(max_scale, scales[j]);
                max_min = std::max(max_min, mins[j]);
            }
            const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
            const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
            for (int j = 0; j < 8; ++j) {
                Ls[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
                Lm[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
            }
            q4_K_pack_scales(Ls, Lm, y[b].scales);
            y[b].d = f32_to_fp16(max_scale / 63.0f);
            y[b].dmin = f32_to_fp16(max_min / 63.0f);
        }
        // Requantize against the stored scales.
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            q4_K_scale_min(j, y[b].scales, &sc, &m);
            const float d = fp16_to_f32(y[b].d) * sc;
            if (d == 0.0f) continue;
            const float dm = fp16_to_f32(y[b].dmin) * m;
            for (int i = 0; i < 32; ++i) {
                const int l = nearest_int((x[32 * j + i] + dm) / d);
                L[32 * j + i] = static_cast<uint8_t>(std::max(0, std::min(15, l)));
            }
        }
        uint8_t* q = y[b].qs;
        for (int j = 0; j < QK_K; j += 64) {
            for (int l = 0; l < 32; ++l)
                q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
            q += 32;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Q2_K
// ---------------------------------------------------------------------------------------------

void quantize_q2_K_row(const float* x, block_q2_K* y, int64_t n, const float* qw_row) {
    uint8_t L[QK_K], Laux[16], Ls[16], Lm[16];
    float weights[16], mins[16], scales[16], sw[16];
    constexpr float q4scale = 15.0f;
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        if (qw_row) {
            float sumx2 = 0;
            for (int j = 0; j < QK_K; ++j) sumx2 += x[j] * x[j];
            const float sigma2 = sumx2 / QK_K;
            const float* qw = qw_row + b * QK_K;
            for (int j = 0; j < 16; ++j) {
                float sumw = 0;
                for (int l = 0; l < 16; ++l) {
                    weights[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
                    sumw += weights[l];
                }
                sw[j] = sumw;
                scales[j] = fit_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                          -0.9f, 0.05f, 36, false, true);
            }
            const float dm = fit_scale_nonneg(16, 15, scales, Ls, sw);
            const float mm = fit_scale_nonneg(16, 15, mins, Lm, sw);
            y[b].d = f32_to_fp16(dm);
            y[b].dmin = f32_to_fp16(mm);
            for (int j = 0; j < 16; ++j)
                y[b].scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
        } else {
            float max_scale = 0, max_min = 0;
            for (int j = 0; j < 16; ++j) {
                for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
                scales[j] = fit_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                          -0.5f, 0.1f, 15, true, false);
                max_scale = std::max(max_scale, scales[j]);
                max_min = std::max(max_min, mins[j]);
            }
            if (max_scale > 0) {
                const float iscale = q4scale / max_scale;
                for (int j = 0; j < 16; ++j)
                    y[b].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
                y[b].d = f32_to_fp16(max_scale / q4scale);
            } else {
                std::memset(y[b].scales, 0, sizeof(y[b].scales));
                y[b].d = f32_to_fp16(0.0f);
            }
            if (max_min > 0) {
                const float iscale = q4scale / max_min;
                for (int j = 0; j < 16; ++j) {
                    y[b].scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
                }
                y[b].dmin = f32_to_fp16(max_min / q4scale);
            } else {
                y[b].dmin = f32_to_fp16(0.0f);
            }
        }
        const float dd = fp16_to_f32(y[b].d);
        const float dmm = fp16_to_f32(y[b].dmin);
        for (int j = 0; j < 16; ++j) {
            const float d = dd * static_cast<float>(y[b].scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float m = dmm * static_cast<float>(y[b].scales[j] >> 4);
            for (int i = 0; i < 16; ++i) {
                const int l = nearest_int((x[16 * j + i] + m) / d);
                L[16 * j + i] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
            }
        }
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                y[b].qs[j / 4 + l] = static_cast<uint8_t>(
                    L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// IQ2_XXS
// ---------------------------------------------------------------------------------------------

// The lattice in quantizer form: each grid point as 8 odd levels 1 / 3 / 5 (level l = 0..2
// stands for 2l + 1), a map from every 4^8 level pattern to its grid index or to its list of
// nearest grid points, built once from the format's grid.
struct iq2_lattice {
    int8_t grid[256][8];               // 2l + 1 per value
    std::vector<int32_t> map;          // [65536]: grid index >= 0, or -(offset into neighbours) - 1
    std::vector<uint16_t> neighbours;  // per off-grid pattern: count, then grid indices

    iq2_lattice() : map(1 << 16, -1) {
        for (int g = 0; g < 256; ++g) {
            uint16_t u = 0;
            for (int i = 0; i < 8; ++i) {
                const auto byte = static_cast<uint8_t>((kIq2xxsGrid[g] >> (8 * i)) & 0xFF);
                const int l = byte == 0x08 ? 0 : byte == 0x19 ? 1 : 2;
                grid[g][i] = static_cast<int8_t>(2 * l + 1);
                u = static_cast<uint16_t>(u | (l << (2 * i)));
            }
            map[u] = g;
        }
        // Off-grid patterns: every grid point at the smallest squared distance and at the next
        // one (two distance shells), in (distance, index) order.
        int d2[256];
        for (int u = 0; u < (1 << 16); ++u) {
            if (map[u] >= 0) continue;
            int pos[8];
            for (int i = 0; i < 8; ++i) pos[i] = 2 * ((u >> (2 * i)) & 3) + 1;
            int d0 = std::numeric_limits<int>::max();
            for (int g = 0; g < 256; ++g) {
                int d = 0;
                for (int i = 0; i < 8; ++i) d += (grid[g][i] - pos[i]) * (grid[g][i] - pos[i]);
                d2[g] = d;
                d0 = std::min(d0, d);
            }
            int d1 = std::numeric_limits<int>::max();
            for (int g = 0; g < 256; ++g) {
                if (d2[g] > d0) d1 = std::min(d1, d2[g]);
            }
            const size_t head = neighbours.size();
            map[u] = -static_cast<int32_t>(head) - 1;
            neighbours.push_back(0);
            for (const int shell : {d0, d1}) {
                for (int g = 0; g < 256; ++g) {
                    if (d2[g] == shell) neighbours.push_back(static_cast<uint16_t>(g));
                }
            }
            neighbours[head] = static_cast<uint16_t>(neighbours.size() - head - 1);
        }
    }

    // Best grid point among an off-grid pattern's neighbours for values xval (weighted, at
    // this scale); writes its levels to L and returns its index.
    int best_neighbour(int32_t map_entry, const float* xval, const float* w, float scale,
                       int8_t* L) const {
        const uint16_t* nb = neighbours.data() + (-map_entry - 1);
        float best_d2 = std::numeric_limits<float>::max();
        int best = -1;
        for (int j = 1; j <= nb[0]; ++j) {
            const int8_t* pg = grid[nb[j]];
            float d2 = 0;
            for (int i = 0; i < 8; ++i) {
                const float diff = scale * pg[i] - xval[i];
                d2 += w[i] * diff * diff;
            }
            if (d2 < best_d2) {
                best_d2 = d2;
                best = nb[j];
            }
        }
        MAGNETAR_ASSERT(best >= 0, "IQ2_XXS neighbour list is empty");
        for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((grid[best][i] - 1) / 2);
        return best;
    }

    // Grid index for 8 levels at scale; off-grid patterns go to their best neighbour.
    int lookup(const int8_t* levels, const float* xval, const float* w, float scale,
               int8_t* L) const {
        uint32_t u = 0;
        for (int i = 0; i < 8; ++i) u |= static_cast<uint32_t>(levels[i]) << (2 * i);
        const int32_t e = map[u];
        if (e >= 0) {
            if (L != levels) std::memcpy(L, levels, 8);
            return e;
        }
        return best_neighbour(e, xval, w, scale, L);
    }
};

const iq2_lattice& lattice() {
    static const iq2_lattice l;
    return l;
}

void quantize_iq2_xxs_row(const float* x, block_iq2_xxs* y, int64_t n, const float* qw_row) {
    constexpr int kMaxQ = 3;
    const iq2_lattice& lat = lattice();
    float scales[8], weight[32], xval[32], waux[32];
    int8_t L[32], Laux[32];
    uint8_t block_signs[4];
    uint32_t q2[16];
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float* xbl = x + QK_K * b;
        y[b].d = f32_to_fp16(0.0f);
        std::memset(q2, 0, sizeof(q2));
        float max_scale = 0;
        float sumx2 = 0;
        for (int i = 0; i < QK_K; ++i) sumx2 += xbl[i] * xbl[i];
        const float sigma2 = sumx2 / QK_K;
        for (int ib = 0; ib < 8; ++ib) {
            const float* xb = xbl + 32 * ib;
            for (int i = 0; i < 32; ++i) {
                const float qw = qw_row ? qw_row[QK_K * b + 32 * ib + i] : 1.0f;
                weight[i] = qw * std::sqrt(sigma2 + xb[i] * xb[i]);
                waux[i] = std::sqrt(weight[i]);
            }
            // Signs: an even number of negatives per group of 8; if odd, flip the value that
            // costs least.
            for (int k = 0; k < 4; ++k) {
                int nflip = 0;
                uint8_t s = 0;
                for (int i = 0; i < 8; ++i) {
                    if (xb[8 * k + i] >= 0) {
                        xval[8 * k + i] = xb[8 * k + i];
                    } else {
                        xval[8 * k + i] = -xb[8 * k + i];
                        ++nflip;
                        s = static_cast<uint8_t>(s | (1u << i));
                    }
                }
                if (nflip % 2) {
                    int imin = 0;
                    float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
                    for (int i = 1; i < 8; ++i) {
                        const float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                        if (ax < min) {
                            min = ax;
                            imin = i;
                        }
                    }
                    xval[8 * k + imin] = -xval[8 * k + imin];
                    s = static_cast<uint8_t>(s ^ (1u << imin));
                }
                block_signs[k] = s & 127;
            }
            float max = xval[0];
            for (int i = 1; i < 32; ++i) max = std::max(max, xval[i]);
            if (max < kGroupMaxEps) {
                scales[ib] = 0;
                continue;
            }
            uint8_t Lq[32];
            float scale = fit_scale_nonneg(32, kMaxQ + 1, xval, Lq, weight);
            const float eff_max = scale * kMaxQ;
            std::memset(L, 0, sizeof(L));
            float best = 0;
            for (int is = -6; is <= 6; ++is) {
                const float id = (2 * kMaxQ - 1 + static_cast<float>(is) * 0.1f) / eff_max;
                const float this_scale = 1 / id;
                for (int k = 0; k < 4; ++k) {
                    for (int i = 0; i < 8; ++i) {
                        const int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                        Laux[8 * k + i] = static_cast<int8_t>(std::max(0, std::min(kMaxQ - 1, l)));
                    }
                    lat.lookup(Laux + 8 * k, xval + 8 * k, waux + 8 * k, this_scale, Laux + 8 * k);
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < 32; ++i) {
                    const float q = static_cast<float>(2 * Laux[i] + 1);
                    sumqx += weight[i] * xval[i] * q;
                    sumq2 += weight[i] * q * q;
                }
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    std::memcpy(L, Laux, 32);
                }
            }
            if (scale > 0) {
                const float id = 1 / scale;
                for (int k = 0; k < 4; ++k) {
                    int8_t lv[8];
                    for (int i = 0; i < 8; ++i) {
                        const int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                        lv[i] = static_cast<int8_t>(std::max(0, std::min(kMaxQ - 1, l)));
                    }
                    lat.lookup(lv, xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < 32; ++i) {
                    const float q = static_cast<float>(2 * L[i] + 1);
                    sumqx += weight[i] * xval[i] * q;
                    sumq2 += weight[i] * q * q;
                }
                if (sumq2 > 0) scale = sumqx / sumq2;
            }
            if (scale < 0) {
                // Keep the stored scale non-negative: flip the signs instead.
                scale = -scale;
                for (int k = 0; k < 4; ++k)
                    block_signs[k] = static_cast<uint8_t>(~block_signs[k] & 127);
            }
            for (int k = 0; k < 4; ++k) {
                uint32_t u = 0;
                for (int i = 0; i < 8; ++i) u |= static_cast<uint32_t>(L[8 * k + i]) << (2 * i);
                const int32_t g = lat.map[u];
                MAGNETAR_ASSERT(g >= 0, "IQ2_XXS quantizer produced a point off the grid");
                q2[2 * ib] |= static_cast<uint32_t>(g) << (8 * k);
                q2[2 * ib + 1] |= static_cast<uint32_t>(block_signs[k]) << (7 * k);
            }
            scales[ib] = scale;
            max_scale = std::max(max_scale, scale);
        }
        if (max_scale == 0.0f) {
            std::memset(y[b].qs, 0, sizeof(y[b].qs));
            continue;
        }
        const float d = max_scale / 31;
        y[b].d = f32_to_fp16(d);
        const float id = 1 / d;
        for (int ib = 0; ib < 8; ++ib) {
            const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
            q2[2 * ib + 1] |= static_cast<uint32_t>(l) << 28;
        }
        std::memcpy(y[b].qs, q2, sizeof(q2));
    }
}

}  // namespace

namespace quant {

void from_float_f32(const float* x, void* y, int64_t n, const float*) {
    std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}
void from_float_f16(const float* x, void* y, int64_t n, const float*) {
    auto* out = static_cast<uint8_t*>(y);
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_fp16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
    }
}
void from_float_bf16(const float* x, void* y, int64_t n, const float*) {
    auto* out = static_cast<uint8_t*>(y);
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
    }
}
void from_float_q8_0(const float* x, void* y, int64_t n, const float*) {
    quantize_q8_0_row(x, static_cast<block_q8_0*>(y), n);
}
void from_float_q4_K(const float* x, void* y, int64_t n, const float* imatrix) {
    quantize_q4_K_row(x, static_cast<block_q4_K*>(y), n, imatrix);
}
void from_float_q2_K(const float* x, void* y, int64_t n, const float* imatrix) {
    quantize_q2_K_row(x, static_cast<block_q2_K*>(y), n, imatrix);
}
void from_float_iq2_xxs(const float* x, void* y, int64_t n, const float* imatrix) {
    quantize_iq2_xxs_row(x, static_cast<block_iq2_xxs*>(y), n, imatrix);
}
void from_float_mxfp4(const float* x, void* y, int64_t n, const float*) {
    quantize_row_mxfp4(x, static_cast<block_mxfp4*>(y), n);
}

}  // namespace quant

bool can_quantize_to(ggml_type t) {
    return has_scalar_kernels(t) && scalar_kernels_of(t).from_float != nullptr;
}

bool quantize_uses_imatrix(ggml_type t) {
    return has_scalar_kernels(t) && scalar_kernels_of(t).uses_imatrix;
}

size_t quantize_rows(ggml_type t, const float* src, void* dst, int64_t n_rows, int64_t n_per_row,
                     const float* imatrix) {
    MAGNETAR_ASSERT(can_quantize_to(t), "quantize_rows: unsupported target type");
    const from_float_fn from_float = scalar_kernels_of(t).from_float;
    const size_t rb = row_bytes(t, n_per_row);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t r = 0; r < n_rows; ++r) {
        from_float(src + r * n_per_row, out + static_cast<size_t>(r) * rb, n_per_row, imatrix);
    }
    return rb * static_cast<size_t>(n_rows);
}

}  // namespace magnetar
