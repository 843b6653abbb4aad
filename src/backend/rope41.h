// DeepSeek V4.1 rotary embedding (spec v41 §3.3): the inv_freq table, fp32 step by step as the
// reference computes it (so the released and tiny tables come out bit-exact), with the YaRN
// blend of the compressed-attention layers, and the rotation of the last n_rot channels of a
// head as interleaved pairs (2i, 2i+1), forward and inverse, rounded to bf16.
//
// Owns: the scalar implementation of these numerics, used by the CPU backend's rope41 op and
// the tests. Does not own: which table a layer uses (the graph).
#pragma once

#include <cstdint>
#include <vector>

namespace magnetar::rope41 {

// YaRN parameters (rope.scaling.*). orig_ctx == 0 means no YaRN. There is no mscale term.
struct yarn_params {
    uint64_t orig_ctx = 0;  // original_seq_len
    float factor = 1.0f;    // rope_factor
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
};

// The pair range of the YaRN ramp: lo = max(floor(cd(beta_fast)), 0),
// hi = min(ceil(cd(beta_slow)), n_rot - 1), cd(b) = n_rot ln(orig / (b 2 pi)) / (2 ln theta),
// all in double. Released (n_rot 64, theta 160000, orig 65536): lo 15, hi 25.
struct yarn_range {
    double lo = 0;
    double hi = 0;
};
yarn_range yarn_correction_range(int n_rot, double theta, const yarn_params& yarn);

// inv_freq[i], i = 0 .. n_rot/2 - 1:
//   e = f32(f32(2i) / f32(n_rot)); inv = f32(1 / f32(theta^e)), theta^e in double;
//   with YaRN: ramp = clamp(f32(f32(i - lo) / f32(max(hi - lo, 0.001))), 0, 1), sm = f32(1 - ramp),
//   inv = f32(f32(f32(inv / factor) * f32(1 - sm)) + f32(inv * sm)).
// yarn == nullptr or yarn->orig_ctx == 0: no YaRN. Throws Error for an odd or non-positive
// n_rot or a non-positive theta / factor.
std::vector<float> inv_freq(int n_rot, double theta, const yarn_params* yarn);
// The same table written to inv[0 .. n_rot/2 - 1] (no allocation: the CPU backend's rope41 op
// keeps it on the stack).
void inv_freq(int n_rot, double theta, const yarn_params* yarn, float* inv);

// cs[2i] = cos(theta_i), cs[2i+1] = sin(theta_i) (fp32), theta_i = f32(f32(pos) * inv_freq[i]).
void cos_sin(int64_t pos, const float* inv_freq, int n_pairs, float* cs);

// Rotates the n_rot values at x (interleaved pairs) in place at position pos:
//   forward  y0 = x0 c - x1 s, y1 = x0 s + x1 c; inverse uses -s. fp32 arithmetic on the bf16
//   inputs, each result rounded to bf16.
void apply(float* x, int n_rot, int64_t pos, const float* inv_freq, bool inverse);

// Applies `apply` to the last n_rot channels of each of n_heads heads of head_dim values,
// heads head_dim apart (a [n_heads, head_dim] row of one token).
void apply_heads(float* x, int64_t n_heads, int64_t head_dim, int n_rot, int64_t pos,
                 const float* inv_freq, bool inverse);

}  // namespace magnetar::rope41
