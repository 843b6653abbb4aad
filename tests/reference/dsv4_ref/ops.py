"""The DeepSeek V4 primitive operations, one function per op (model.md §4, §5, §6, §12).

Owns: the math of every op the forward pass is built from, written for clarity, on torch
tensors of any floating dtype (the reference runs them in float64 by default). Every function
keeps the dtype of its inputs. It does not know about GGUF files, tensor names or caches across
layers (see model.py).

The signatures of the public functions are a stable interface: the per-op tests of the engine
(tests/ops/op_cases.py) import them to compute expected outputs. See docs/reference.md.
"""

import functools
import math

import numpy as np
import torch

# ---------------------------------------------------------------------------------------------
# Linear map
# ---------------------------------------------------------------------------------------------


def linear(w, x):
    """y = W x for a weight w [out, in] and x [..., in] -> [..., out] (no bias, §12.8).

    Evaluated with numpy's einsum: with the reference BLAS of the Debian builds it is about
    twice as fast as torch's matrix-vector product for these small shapes; same dtype.
    """
    return torch.from_numpy(np.einsum("oi,...i->...o", w.detach().numpy(), x.detach().numpy()))


# ---------------------------------------------------------------------------------------------
# Norms and activations (§4.1, §4.5)
# ---------------------------------------------------------------------------------------------


def rms_norm(x, w=None, eps=1e-6):
    """RMSNorm over the last dim: x / sqrt(mean(x^2) + eps), times w when given.

    x: [..., n]; w: [n] or None (unweighted, as for the HC flat norm and the per-head q norm).
    """
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y if w is None else y * w


def softplus_stable(z):
    """softplus(z) = ln(1 + e^z): z for z > 20, e^z for z < -20, log1p(e^z) otherwise (§4.5)."""
    mid = torch.log1p(torch.exp(torch.clamp(z, -20.0, 20.0)))
    return torch.where(z > 20, z, torch.where(z < -20, torch.exp(z), mid))


def silu(z):
    return z * torch.sigmoid(z)


def swiglu_clamped(gate, up, clamp):
    """silu(min(gate, c)) * clamp(up, -c, c) (§4.5): the gate is clamped from above only."""
    return silu(torch.clamp(gate, max=clamp)) * torch.clamp(up, -clamp, clamp)


# ---------------------------------------------------------------------------------------------
# RoPE on the tail of a head, with optional YaRN (§4.2)
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def rope_frequencies(n_rot, base, yarn=None):
    """Per-pair angular frequencies omega_j, j = 0 .. n_rot/2 - 1, as float64 numpy.

    yarn = (factor, orig_ctx, beta_fast, beta_slow) or None. The YaRN correction range uses
    the RoPE width n_rot as its dimension (§4.2) and clamps hi to n_rot - 1.
    """
    j = np.arange(n_rot // 2, dtype=np.float64)
    theta = base ** (-2.0 * j / n_rot)
    if yarn is None:
        return theta
    factor, orig_ctx, beta_fast, beta_slow = yarn

    def corr(beta):
        return n_rot * math.log(orig_ctx / (2.0 * math.pi * beta)) / (2.0 * math.log(base))

    lo = max(0.0, math.floor(corr(beta_fast)))
    hi = min(float(n_rot - 1), math.ceil(corr(beta_slow)))
    r = np.clip((j - lo) / max(hi - lo, 0.001), 0.0, 1.0)
    return theta * (1.0 - r) + (theta / factor) * r


@functools.lru_cache(maxsize=64)
def _rope_cos_sin(pos, n_rot, base, yarn, dtype):
    """cos and sin of phi_j = pos * omega_j (float64), cast to dtype; cached per position."""
    phi = pos * rope_frequencies(n_rot, base, yarn)
    return torch.from_numpy(np.cos(phi)).to(dtype), torch.from_numpy(np.sin(phi)).to(dtype)


def rope_tail(x, pos, n_rot, base, yarn=None, inverse=False):
    """Rotate the last n_rot dims of x[..., hd] in adjacent pairs (t_2j, t_2j+1) (§4.2).

    pos: an int, or a tensor of positions broadcastable to x.shape[:-1].
    yarn: (factor, orig_ctx, beta_fast, beta_slow) or None. No magnitude factor is applied.
    inverse: rotate by -phi (used on the attention output tails).
    The angles phi_j = pos * omega_j are computed in float64, then cos/sin are cast to x.dtype.
    """
    yarn = None if yarn is None else tuple(float(v) for v in yarn)
    if isinstance(pos, int):
        cos, sin = _rope_cos_sin(pos, int(n_rot), float(base), yarn, x.dtype)
    else:
        omega = torch.from_numpy(rope_frequencies(int(n_rot), float(base), yarn))  # [n_rot/2]
        phi = torch.as_tensor(pos, dtype=torch.float64).unsqueeze(-1) * omega      # [..., n_rot/2]
        cos, sin = torch.cos(phi).to(x.dtype), torch.sin(phi).to(x.dtype)
    if inverse:
        sin = -sin
    head, tail = x[..., :-n_rot], x[..., -n_rot:]
    pairs = tail.reshape(*tail.shape[:-1], n_rot // 2, 2)                   # [..., n_rot/2, 2]
    a, b = pairs[..., 0], pairs[..., 1]
    rot = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return torch.cat((head, rot.reshape(tail.shape)), dim=-1)


# ---------------------------------------------------------------------------------------------
# Model-defined FP8 / FP4 round trips and the Hadamard rotation (§4.3, §4.4, §12.3)
# ---------------------------------------------------------------------------------------------


def pow2_scale(amax, inv_max):
    """Smallest power of two >= float32(amax) * float32(inv_max), the product taken in float32.

    This is §12.3: the exponent of the float32 product, plus one if any mantissa bit is set.
    amax: tensor of positive values (any dtype). Returns float64.
    """
    prod = amax.to(torch.float32) * torch.tensor(inv_max, dtype=torch.float32)
    mant, expo = torch.frexp(prod)                     # prod = mant * 2^expo, mant in [0.5, 1)
    expo = expo.to(torch.float64)
    exact_pow2 = mant == 0.5
    return torch.where(exact_pow2, torch.pow(2.0, expo - 1), torch.pow(2.0, expo))


def e4m3_round(v):
    """Round |v| <= 448 to the nearest FP8 E4M3FN value, ties to the even code (§4.3)."""
    v64 = v.to(torch.float64)
    mag = v64.abs()
    _, expo = torch.frexp(mag)                         # mag in [2^(expo-1), 2^expo)
    # Spacing of representable values: 2^(e-3) in the normal binade [2^e, 2^(e+1)), with
    # e = expo - 1 >= -6; below 2^-6 (subnormals) the spacing is fixed at 2^-9.
    e = torch.clamp(expo.to(torch.float64) - 1, min=-6.0)
    step = torch.pow(2.0, e - 3)
    q = torch.round(mag / step) * step                 # torch.round: half to even
    # An even multiple of step is an even code (codes count up by one per step in a binade,
    # and a binade starts at an even code), so half-to-even on the multiple is ties-to-even.
    return (torch.sign(v64) * q).to(v.dtype)


def fp8_e4m3_roundtrip(x, n_nope, block=64):
    """FP8 E4M3 "QAT" round trip on x[..., :n_nope] in blocks of 64; the rest is untouched.

    Per block: amax = max(max|x|, 1e-4); scale = pow2 >= amax * (1/448) (§12.3);
    x = e4m3_round(clamp(x / scale, -448, 448)) * scale.
    """
    assert n_nope % block == 0, "fp8_e4m3_roundtrip: n_nope must be a multiple of the block"
    head, tail = x[..., :n_nope], x[..., n_nope:]
    blocks = head.reshape(*head.shape[:-1], n_nope // block, block)        # [..., nb, 64]
    amax = torch.clamp(blocks.abs().amax(dim=-1, keepdim=True), min=1e-4)
    scale = pow2_scale(amax, 1.0 / 448.0).to(x.dtype)
    v = torch.clamp(blocks / scale, -448.0, 448.0)
    out = (e4m3_round(v) * scale).reshape(head.shape)
    return torch.cat((out, tail), dim=-1)


def e2m1_round(v):
    """Round |v| <= 6 to the nearest E2M1 magnitude {0,.5,1,1.5,2,3,4,6}, ties to the even code."""
    v64 = v.to(torch.float64)
    mag = v64.abs()
    below2 = torch.round(mag * 2.0) / 2.0              # codes 0..4 (step 0.5): index = 2|v|
    two_to_4 = torch.round(mag)                        # codes 4..6 (2, 3, 4): index = |v| + 2
    four_to_6 = torch.where(mag <= 5.0, torch.full_like(mag, 4.0), torch.full_like(mag, 6.0))
    q = torch.where(mag < 2.0, below2, torch.where(mag < 4.0, two_to_4, four_to_6))
    return (torch.sign(v64) * q).to(v.dtype)


def fp4_e2m1_roundtrip(x, block=32):
    """FP4 E2M1 round trip in blocks of 32 over the last dim (§4.4, scale rule §12.3)."""
    assert x.shape[-1] % block == 0, "fp4_e2m1_roundtrip: last dim must be a multiple of the block"
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // block, block)          # [..., nb, 32]
    amax = torch.clamp(blocks.abs().amax(dim=-1, keepdim=True), min=6.0 * 2.0 ** -126)
    scale = pow2_scale(amax, 1.0 / 6.0).to(x.dtype)
    v = torch.clamp(blocks / scale, -6.0, 6.0)
    return (e2m1_round(v) * scale).reshape(x.shape)


@functools.lru_cache(maxsize=None)
def hadamard_matrix(n, dtype=torch.float64):
    """Sylvester Hadamard matrix H[i][j] = (-1)^popcount(i & j), unnormalised, [n, n]."""
    i = np.arange(n)
    bits = np.bitwise_and(i[:, None], i[None, :])
    parity = np.zeros_like(bits)
    while bits.any():
        parity ^= bits & 1
        bits = bits >> 1
    return torch.from_numpy(1.0 - 2.0 * parity).to(dtype)


def hadamard(x):
    """Normalised Sylvester Walsh-Hadamard transform over the last dim (a power of two):
    y_i = (1/sqrt(n)) * sum_j (-1)^popcount(i & j) x_j."""
    n = x.shape[-1]
    assert n & (n - 1) == 0, "hadamard: last dim must be a power of two"
    h = hadamard_matrix(n, x.dtype)
    return (x @ h) * (1.0 / math.sqrt(n))


def indexer_qat(x, use_fp4=True):
    """Indexer QAT of a vector (or a batch of them): Hadamard, then the FP4 round trip (§4.4)."""
    y = hadamard(x)
    return fp4_e2m1_roundtrip(y) if use_fp4 else y


# ---------------------------------------------------------------------------------------------
# Hyper-connections (§5.2, §5.4, §5.6)
# ---------------------------------------------------------------------------------------------


def sinkhorn(z, eps, iters):
    """Sinkhorn normalisation of z [n_hc, n_hc] (a = source row, b = destination column).

    Row softmax plus eps, column normalisation, then (iters - 1) times row then column
    normalisation, each with + eps in the denominator. Returns M [n_hc, n_hc].
    """
    # Computed on the numpy view of the small matrix (same dtype, same operations): numpy's
    # per-call overhead is far below torch's, and this loop runs twice per layer and token.
    zn = z.detach().cpu().numpy()
    e = np.exp(zn - zn.max(axis=1, keepdims=True))
    m = e / e.sum(axis=1, keepdims=True) + eps
    m = m / (m.sum(axis=0, keepdims=True) + eps)
    for _ in range(iters - 1):
        m = m / (m.sum(axis=1, keepdims=True) + eps)
        m = m / (m.sum(axis=0, keepdims=True) + eps)
    return torch.from_numpy(m.astype(zn.dtype, copy=False))


def hc_pre(X, fn, scale, base, eps, iters, norm_eps=1e-6):
    """HC pre-mix of one site (§5.2).

    X: [n_hc, D] HC state; fn: [(2 + n_hc) * n_hc, n_hc * D]; scale: [3]; base: [(2+n_hc)*n_hc].
    eps: the HC epsilon (pre-weight offset and Sinkhorn); norm_eps: the flat RMS norm epsilon.
    Returns (y [D], post [n_hc], M [n_hc, n_hc]), y = sum_j pre_j X[j].
    """
    n_hc = X.shape[0]
    f = X.reshape(-1)                                                       # [n_hc * D]
    r = torch.rsqrt(f.pow(2).mean() + norm_eps)
    mix = linear(fn, f) * r                                                 # [(2+n_hc)*n_hc]
    pre = torch.sigmoid(mix[:n_hc] * scale[0] + base[:n_hc]) + eps
    post = 2.0 * torch.sigmoid(mix[n_hc:2 * n_hc] * scale[1] + base[n_hc:2 * n_hc])
    z = (mix[2 * n_hc:] * scale[2] + base[2 * n_hc:]).reshape(n_hc, n_hc)
    M = sinkhorn(z, eps, iters)
    y = pre @ X                                                             # [D]
    return y, post, M


def hc_post(X, f, post, M):
    """HC post-mix (§5.4): X'[b] = post_b * f + sum_a M[a][b] * X[a]. Returns [n_hc, D]."""
    return post[:, None] * f[None, :] + M.transpose(0, 1) @ X


def hc_head(X, fn, scale, base, eps, norm_eps=1e-6):
    """Output-head HC collapse (§5.6): h = sum_j pre_j X[j], no Sinkhorn, no post.

    fn: [n_hc, n_hc * D]; scale: [1]; base: [n_hc]. Returns h [D].
    """
    f = X.reshape(-1)
    r = torch.rsqrt(f.pow(2).mean() + norm_eps)
    pre = torch.sigmoid(linear(fn, f) * r * scale[0] + base) + eps
    return pre @ X


# ---------------------------------------------------------------------------------------------
# Compressor with frontier state (§6)
# ---------------------------------------------------------------------------------------------


class Compressor:
    """One compressor lane of one layer (§6), fed one token at a time.

    ratio: 4 (two-lane overlap, coff = 2) or any other R (no overlap, coff = 1).
    wkv, wgate: [coff*d, D]; ape: [R, coff*d]; norm_w: [d].
    rope_args: (n_rot, base, yarn) for rope_tail, applied at position c*R to the last n_rot dims.
    fp8_nope: for the main lane, the number of leading dims that get the FP8 round trip
      (d - n_rot); None for no FP8 round trip.
    indexer_qat: for the indexer lane, apply Hadamard then FP4 to the whole row.
    use_fp4: with indexer_qat, False skips the FP4 step (Hadamard only).
    State (public, for tests): state_kv, state_score, each [coff*R, coff*d]; initialised to
    0 / -inf. R = 4 writes rows 4..7 and moves them to 0..3 after each emission; other R write
    row p mod R. Unwritten rows may hold stale data (harmless, §6.5).
    """

    def __init__(self, ratio, wkv, wgate, ape, norm_w, rope_args, fp8_nope, indexer_qat,
                 use_fp4=True, norm_eps=1e-6):
        self.ratio = ratio
        self.coff = 2 if ratio == 4 else 1
        self.wkv, self.wgate, self.ape, self.norm_w = wkv, wgate, ape, norm_w
        self.d = norm_w.shape[0]
        assert wkv.shape[0] == self.coff * self.d and ape.shape == (ratio, self.coff * self.d)
        self.rope_args = rope_args
        self.fp8_nope = fp8_nope
        self.indexer_qat = indexer_qat
        self.use_fp4 = use_fp4
        self.norm_eps = norm_eps
        rows, width = self.coff * ratio, self.coff * self.d
        self.state_kv = torch.zeros(rows, width, dtype=wkv.dtype)
        self.state_score = torch.full((rows, width), -math.inf, dtype=wkv.dtype)

    def project(self, p, x):
        """kvp = Wkv x, sc = Wg x + ape[p mod R] (§6.1). x: [D]."""
        kvp = linear(self.wkv, x)
        sc = linear(self.wgate, x) + self.ape[p % self.ratio]
        return kvp, sc

    def pool(self):
        """Per-channel softmax pooling over the block's candidates (§6.2, §6.3). Returns [d]."""
        d, R = self.d, self.ratio
        if self.coff == 2:
            kv = torch.cat((self.state_kv[:R, :d], self.state_kv[R:, d:]), dim=0)      # [2R, d]
            sc = torch.cat((self.state_score[:R, :d], self.state_score[R:, d:]), dim=0)
        else:
            kv, sc = self.state_kv, self.state_score                                   # [R, d]
        w = torch.softmax(sc, dim=0)
        return (w * kv).sum(dim=0)

    def finalise(self, pool, c):
        """Norm, RoPE at position c*R, then FP8 (main) or Hadamard + FP4 (indexer) (§6.4)."""
        row = rms_norm(pool, self.norm_w, self.norm_eps)
        n_rot, base, yarn = self.rope_args
        row = rope_tail(row, c * self.ratio, n_rot, base, yarn)
        if self.fp8_nope is not None:
            row = fp8_e4m3_roundtrip(row, self.fp8_nope)
        if self.indexer_qat:
            row = indexer_qat(row, self.use_fp4)
        return row

    def push(self, p, x):
        """Feed the token at position p (its attention-normed x [D]); return the row it
        completes ([d], compressed row index c = (p+1)/R - 1) or None."""
        R = self.ratio
        kvp, sc = self.project(p, x)
        slot = (R + p % R) if self.coff == 2 else (p % R)
        self.state_kv[slot] = kvp
        self.state_score[slot] = sc
        if (p + 1) % R != 0:
            return None
        row = self.finalise(self.pool(), (p + 1) // R - 1)
        if self.coff == 2:
            self.state_kv[:R] = self.state_kv[R:].clone()
            self.state_score[:R] = self.state_score[R:].clone()
        return row


# ---------------------------------------------------------------------------------------------
# Indexer scoring and top-k (§5.3e, §12.2)
# ---------------------------------------------------------------------------------------------


def indexer_scores(qi, wgt, rows):
    """score_s = sum_h wgt_h * max(0, qi_h . k_s).

    qi: [IH, Id] (after RoPE and QAT); wgt: [IH], already scaled by 1/sqrt(Id) * 1/sqrt(IH);
    rows: [n, Id]. Returns [n].
    """
    dots = torch.relu(rows @ qi.transpose(0, 1))                            # [n, IH]
    return dots @ wgt


def topk_lower_index(scores, k):
    """Indices of the k largest scores, ties broken towards the lower index, ascending.

    scores: 1-D tensor. Returns a LongTensor of min(k, n) indices in ascending order.
    """
    order = np.argsort(-scores.detach().cpu().numpy(), kind="stable")   # desc., ties: lower first
    return torch.from_numpy(np.sort(order[:k]).astype(np.int64))


# ---------------------------------------------------------------------------------------------
# Attention core (§5.3f)
# ---------------------------------------------------------------------------------------------


def sink_attention(q, kv, sinks, scale):
    """Softmax attention with a per-head sink logit in the denominator.

    q: [H, hd]; kv: [n, hd] (keys and values are the same rows); sinks: [H]; scale: float.
    Returns [H, hd]: o_h = sum_i exp(s_i - m) v_i / (exp(sink_h - m) + sum_i exp(s_i - m)),
    s_i = (q_h . v_i) * scale, m = max(sink_h, max_i s_i).
    """
    s = (q @ kv.transpose(0, 1)) * scale                                    # [H, n]
    m = torch.maximum(sinks, s.amax(dim=1)) if s.shape[1] > 0 else sinks    # [H]
    e = torch.exp(s - m[:, None])
    den = torch.exp(sinks - m) + e.sum(dim=1)
    return (e @ kv) / den[:, None]


# ---------------------------------------------------------------------------------------------
# MoE routing (§5.5)
# ---------------------------------------------------------------------------------------------


def router_scores(logits):
    """s_e = sqrt(softplus(logit_e)) with the stable softplus."""
    return torch.sqrt(softplus_stable(logits))


def route(logits, bias, tid2eid_row, k, scale, normalize):
    """Expert selection and routing weights (§5.5).

    logits: [E] router logits; bias: [E] selection bias (exp_probs_b) or None;
    tid2eid_row: the hash table row of the current token (at least k ids) for hash-routed
    layers, else None; k: experts used; scale: expert_weights_scale; normalize: divide by the
    sum of the selected unbiased scores.
    Returns (sel [k] LongTensor, weights [k]). sel is in selection order: descending biased
    score with ties towards the lower expert id, or table order for hash layers.
    """
    s = router_scores(logits)
    if tid2eid_row is not None:
        sel = torch.as_tensor(tid2eid_row[:k], dtype=torch.int64)
    else:
        biased = s if bias is None else s + bias
        order = np.argsort(-biased.detach().cpu().numpy(), kind="stable")
        sel = torch.from_numpy(order[:k].astype(np.int64))
    w = s[sel]
    if normalize:
        w = w / w.sum()
    return sel, w * scale
