"""Bit-level numerics of the DeepSeek V4.1 graph (v41.md §0.2, §3.2, §3.3, §4).

Owns: bf16 rounding, the element formats and their quantize-dequantize round trips computed
algorithmically in float32 (E4M3 satfinite RNE, E2M1 RNE with the stated ties, the UE8M0
power-of-two scale rule), the four linear precision classes (FP8 / FP4 / BF16 / F32), RMSNorm,
the RoPE tables (including YaRN) and their application, Sinkhorn, and the sparse attention core
with its 64-slot online softmax. Everything works on float32 torch tensors that hold the values
the spec describes (a "bf16" tensor is a float32 tensor whose values are bf16-representable).

Summation order (docs/v41.md "Against the reference"): every reduction is one sequential
float32 sum in index order (acc = acc + a_i * b_i, the product and the sum each rounded; the
matrix products are one such sum per output over the input index), except the RMSNorm
statistic, a sequential float64 sum of squares. The transcendentals are the C library's float
functions (expf, log1pf, cosf, sinf) on float32 arguments, and sigmoid(z) = 1 / (1 + expf(-z)),
silu(z) = z / (1 + expf(-z)). The engine computes in the same order when its CPU backend runs
in reference order, so the two agree bit for bit.

It knows nothing about GGUF files, tensor names or the layer schedule (see model.py).
"""

import ctypes
import ctypes.util
import math

import numpy as np
import torch

F32 = torch.float32

# fast_round_scale reciprocal constants (§4.1): float32(1/448) = 0x3b124925, float32(1/6) = 0x3e2aaaab.
R448 = float(np.float32(1.0 / 448.0))
R6 = float(np.float32(1.0 / 6.0))
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


# ---------------------------------------------------------------------------------------------
# Rounding helpers
# ---------------------------------------------------------------------------------------------


def bf16(x):
    """Round float32 values to bfloat16 (RNE; torch's conversion) and widen back exactly."""
    return x.to(torch.bfloat16).to(F32)


def f32(x):
    return torch.as_tensor(x, dtype=F32)


# ---------------------------------------------------------------------------------------------
# The shared order: C library float transcendentals and sequential float32 sums
# ---------------------------------------------------------------------------------------------


def _libm_ufunc(name):
    fn = getattr(_LIBM, name)
    fn.restype = ctypes.c_float
    fn.argtypes = [ctypes.c_float]
    return np.frompyfunc(fn, 1, 1)


_LIBM = ctypes.CDLL(ctypes.util.find_library("m"))
_EXPF, _LOG1PF, _COSF, _SINF = (_libm_ufunc(n) for n in ("expf", "log1pf", "cosf", "sinf"))


def _np32(x):
    if isinstance(x, torch.Tensor):
        x = x.detach().numpy()
    return np.asarray(x, dtype=np.float32)


def _apply(uf, x):
    a = _np32(x)
    return torch.from_numpy(np.asarray(uf(a), dtype=np.float32).reshape(a.shape))


def expf(x):
    """C expf of each float32 value (float32 tensor out)."""
    return _apply(_EXPF, x)


def log1pf(x):
    return _apply(_LOG1PF, x)


def cosf(x):
    return _apply(_COSF, x)


def sinf(x):
    return _apply(_SINF, x)


def sigmoid(z):
    """1 / (1 + expf(-z)) in float32."""
    z = f32(z)
    return torch.tensor(1.0, dtype=F32) / (torch.tensor(1.0, dtype=F32) + expf(-z))


def silu(z):
    """z / (1 + expf(-z)) in float32."""
    z = f32(z)
    return z / (torch.tensor(1.0, dtype=F32) + expf(-z))


def softplus(z):
    """Stable softplus: z above 20, expf(z) below -20, else log1pf(expf(z)) (float32)."""
    z = f32(z)
    return torch.where(z > 20.0, z, torch.where(z < -20.0, expf(z), log1pf(expf(z))))


def seq_sum(x, dim=-1):
    """Sum over `dim` in index order, ((x_0 + x_1) + x_2) + ..., float32 (a cumulative sum is
    one sequential accumulation)."""
    a = _np32(x)
    return torch.from_numpy(np.ascontiguousarray(np.cumsum(a, axis=dim, dtype=np.float32).take(-1, axis=dim)))


def seq_matvec(w, x):
    """y[..., n] = sum_k w[n, k] * x[..., k], one sequential float32 sum per output over k
    ascending (products rounded, then added). w [N, K], x [..., K] -> [..., N]."""
    wn = _np32(w)
    xn = _np32(x)
    prod = xn[..., None, :] * wn                                   # [..., N, K]
    return torch.from_numpy(np.ascontiguousarray(np.cumsum(prod, axis=-1, dtype=np.float32)[..., -1]))


with np.errstate(over="ignore"):
    _POW2_NP = np.ldexp(np.float32(1.0), np.arange(-150, 129)).astype(np.float32)
_POW2 = torch.from_numpy(_POW2_NP)


def pow2(e):
    """2^e as float32 for an int tensor e (table lookup; exact, subnormals included,
    0 below 2^-149 and inf above 2^127)."""
    e = torch.as_tensor(e, dtype=torch.int64)
    return _POW2[torch.clamp(e, -150, 128) + 150]


def fast_round_scale(amax, recip):
    """UE8M0 scale exponent (§4.1): y = f32(amax * R); E = expfield(y) - 127 + (mantissa != 0).

    amax: float32 tensor of positive normal values; recip: R448 or R6. Returns int32 E.
    """
    y = amax.to(F32) * torch.tensor(recip, dtype=F32)
    bits = y.view(torch.int32)
    expo = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    return (expo - 127 + (mant != 0).to(torch.int32)).to(torch.int32)


def e4m3_rne(v):
    """E4M3 (float8_e4m3fn) satfinite: clamp to [-448, 448], RNE onto the grid, keep the sign
    of zero (§4.1). Returns the decoded values as float32."""
    v = v.to(F32)
    c = torch.clamp(v, -448.0, 448.0)
    mag = c.abs()
    _, e = torch.frexp(mag)                                   # mag = m * 2^e, m in [0.5, 1)
    ex = torch.clamp(e.to(torch.int32) - 1, min=-6)           # floor(log2 |v|), subnormals at -6
    step = pow2(ex - 3)
    q = torch.round(mag / step) * step                        # exact scaling; round half to even
    return torch.copysign(q, v)


def e2m1_rne(v):
    """E2M1 RNE for inputs already clamped to [-6, 6] (§4.1, §9.12): midpoints 0.25, 1.25,
    2.5, 5 go down, 0.75, 1.75, 3.5 go up (both to the even code); -0 is kept."""
    v = v.to(F32)
    m = v.abs()
    q = torch.where(m <= 0.25, 0.0, torch.where(m < 0.75, 0.5, torch.where(
        m <= 1.25, 1.0, torch.where(m < 1.75, 1.5, torch.where(
            m <= 2.5, 2.0, torch.where(m < 3.5, 3.0, torch.where(m <= 5.0, 4.0, 6.0)))))))
    return torch.copysign(q.to(F32), v)


def _blocks(x, block):
    if x.shape[-1] % block != 0:
        raise ValueError(f"QDQ: last dim {x.shape[-1]} is not a multiple of {block}")
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


def qdq_fp8(x, block=32):
    """§4.2 FP8 block QDQ (act_quant): per 32 values amax = max(max|x|, 1e-4), E from R448,
    q = E4M3(x * 2^-E), x^ = bf16(q * 2^E). x: [..., K].

    The hot path of every FP8-/FP4-linear, so it runs on numpy views (same float32 operations
    as e4m3_rne / fast_round_scale; numpy's per-call cost is far below torch's). q * 2^E has at
    most 4 significant bits, so the final bf16 rounding is exact and omitted."""
    xn = np.ascontiguousarray(x.detach().numpy(), dtype=np.float32)
    if xn.shape[-1] % block != 0:
        raise ValueError(f"QDQ: last dim {xn.shape[-1]} is not a multiple of {block}")
    b = xn.reshape(*xn.shape[:-1], xn.shape[-1] // block, block)
    amax = np.maximum(np.abs(b).max(axis=-1, keepdims=True), np.float32(1e-4))
    y = (amax * np.float32(R448)).astype(np.float32)
    bits = y.view(np.int32)
    e = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0)
    v = np.minimum(np.maximum(b * _POW2_NP[150 - e], np.float32(-448.0)), np.float32(448.0))
    mag = np.abs(v)
    _, fe = np.frexp(mag)
    step = _POW2_NP[np.maximum(fe - 1, -6) - 3 + 150]
    q = np.copysign(np.round(mag / step) * step, v)
    return torch.from_numpy((q * _POW2_NP[e + 150]).reshape(xn.shape))


def qdq_nvfp4(x, block=16):
    """§4.3 FP4 with an E4M3 scale per 16 (main compressed KV): true fp32 divisions."""
    b = _blocks(x.to(F32), block)
    amax = torch.clamp(b.abs().amax(dim=-1, keepdim=True), min=float(np.float32(6.0 * 2.0 ** -9)))
    s = e4m3_rne(amax / 6.0)
    v = torch.clamp(b / s, -6.0, 6.0)
    return bf16(e2m1_rne(v) * s).reshape(x.shape)


def qdq_mxfp4(x, block=32):
    """§4.4 MXFP4: E2M1 with a UE8M0 scale per 32 (index queries and index keys)."""
    b = _blocks(x.to(F32), block)
    amax = torch.clamp(b.abs().amax(dim=-1, keepdim=True), min=float(np.float32(6.0 * 2.0 ** -126)))
    e = fast_round_scale(amax, R6)
    c = e2m1_rne(torch.clamp(b * pow2(-e), -6.0, 6.0))
    return bf16(c * pow2(e)).reshape(x.shape)


# ---------------------------------------------------------------------------------------------
# Linear precision classes (§0.2, §4.6)
# ---------------------------------------------------------------------------------------------


def fp8_linear(w, x, act_qdq=True):
    """FP8-/FP4-linear: x [..., K] (bf16 values) is FP8-QDQ'd per 32; w [N, K] holds the exact
    dequantized weight (E4M3 or E2M1 times its power-of-two scale). One sequential fp32 sum per
    output, bf16 output [..., N]."""
    xq = qdq_fp8(x) if act_qdq else x.to(F32)
    return bf16(seq_matvec(w, xq))


def fp8_linear_grouped(w, x, act_qdq=True):
    """A different FP8-/FP4-linear per group: w [G, N, K], x [G, K] -> [G, N] (bf16 values).
    Bit-identical to G separate fp8_linear calls."""
    xq = qdq_fp8(x) if act_qdq else x.to(F32)
    wn = _np32(w)
    prod = _np32(xq)[:, None, :] * wn                              # [G, N, K]
    return bf16(torch.from_numpy(np.ascontiguousarray(np.cumsum(prod, axis=-1, dtype=np.float32)[..., -1])))


def bf16_linear(w, x):
    """BF16-linear: exact bf16 products, sequential fp32 accumulation, bf16 output."""
    return bf16(seq_matvec(w, x))


def f32_linear(w, x):
    """F32-linear: fp32 products and sequential accumulation, fp32 output."""
    return seq_matvec(w, x)


def rms_norm(x, w, eps):
    """§0.2: y = bf16(f32(w) * (f32(x) * r)), one rounding, with the statistic in float64:
    r = f32(1 / sqrt(ss / n + eps)), ss the sequential float64 sum of the squares (exact
    products)."""
    xn = _np32(x)
    xd = xn.astype(np.float64)
    ss = np.cumsum(xd * xd, axis=-1)[..., -1:]
    e = np.float64(np.float32(eps))
    r = (np.float64(1.0) / np.sqrt(ss / np.float64(xn.shape[-1]) + e)).astype(np.float32)
    return bf16(w * torch.from_numpy(np.ascontiguousarray(xn * r)))


def rms_inv_f32(x, eps):
    """1 / sqrt(ss / n + eps) over the last dim, all in float32 with ss a sequential sum (the
    statistic of the mHC mixes and the Engram gate). Returns [..., 1]."""
    xn = _np32(x)
    ss = np.cumsum(xn * xn, axis=-1, dtype=np.float32)[..., -1:]
    v = ss / np.float32(xn.shape[-1]) + np.float32(eps)
    return torch.from_numpy(np.ascontiguousarray(np.float32(1.0) / np.sqrt(v)))


# ---------------------------------------------------------------------------------------------
# RoPE (§3.3)
# ---------------------------------------------------------------------------------------------


def inv_freq(n_rot, base, yarn=None):
    """The fp32 inv_freq table of §3.3 (n_rot/2 entries) as a float32 numpy array.

    yarn = (factor, orig_ctx, beta_fast, beta_slow) or None. The recipe reproduces R's torch
    fp32 table: exponent in fp32, theta^e in double rounded to fp32, reciprocal in fp32."""
    half = n_rot // 2
    out = np.empty(half, dtype=np.float32)
    for i in range(half):
        e = np.float32(np.float32(2 * i) / np.float32(n_rot))
        pw = np.float32(float(base) ** float(e))
        out[i] = np.float32(np.float32(1.0) / pw)
    if yarn is None:
        return out
    factor, orig, beta_fast, beta_slow = yarn
    if orig <= 0:
        return out

    def cd(beta):
        return n_rot * math.log(orig / (beta * 2.0 * math.pi)) / (2.0 * math.log(base))

    lo = max(math.floor(cd(beta_fast)), 0)
    hi = min(math.ceil(cd(beta_slow)), n_rot - 1)
    den = np.float32(max(hi - lo, 0.001))
    fac = np.float32(factor)
    res = np.empty(half, dtype=np.float32)
    for i in range(half):
        ramp = np.float32(np.float32(i - lo) / den)
        ramp = np.float32(min(max(ramp, np.float32(0.0)), np.float32(1.0)))
        sm = np.float32(np.float32(1.0) - ramp)
        a = np.float32(np.float32(out[i] / fac) * np.float32(np.float32(1.0) - sm))
        b = np.float32(out[i] * sm)
        res[i] = np.float32(a + b)
    return res


class Rope:
    """One RoPE table; rotates the last n_rot channels in interleaved pairs (§3.3)."""

    def __init__(self, n_rot, base, yarn=None):
        self.n_rot = n_rot
        self.freq = torch.from_numpy(inv_freq(n_rot, base, yarn))   # [n_rot/2] fp32
        self._cache = {}

    def cos_sin(self, pos):
        cs = self._cache.get(pos)
        if cs is None:
            theta = torch.tensor(float(pos), dtype=F32) * self.freq  # single fp32 product
            cs = (cosf(theta), sinf(theta))
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[pos] = cs
        return cs

    def apply(self, x, pos, inverse=False):
        """x [..., hd] (bf16 values); rotates x[..., hd-n_rot:] at position pos; bf16 out."""
        c, s = self.cos_sin(pos)
        if inverse:
            s = -s
        n = self.n_rot
        head, tail = x[..., :-n], x[..., -n:]
        pr = tail.reshape(*tail.shape[:-1], n // 2, 2)
        a, b = pr[..., 0], pr[..., 1]
        rot = torch.stack((a * c - b * s, a * s + b * c), dim=-1).reshape(tail.shape)
        return torch.cat((head, bf16(rot)), dim=-1)


# ---------------------------------------------------------------------------------------------
# Hyper-connections (§3.2)
# ---------------------------------------------------------------------------------------------


def sinkhorn(z, eps, iters):
    """§3.2 Sinkhorn in fp32: row softmax + eps, column normalisation, then (iters - 1) times
    rows then columns, each with + eps in the denominator. z: [n, n] float32."""
    zn = z.detach().numpy().astype(np.float32)
    e32 = np.float32(eps)

    def rows(c):
        return np.cumsum(c, axis=1, dtype=np.float32)[:, -1:]

    def cols(c):
        return np.cumsum(c, axis=0, dtype=np.float32)[-1:, :]

    ex = expf(zn - zn.max(axis=1, keepdims=True)).numpy()
    c = ex / rows(ex) + e32
    c = c / (cols(c) + e32)
    for _ in range(iters - 1):
        c = c / (rows(c) + e32)
        c = c / (cols(c) + e32)
    return torch.from_numpy(c.astype(np.float32))


def hc_mixes(X, fn, base, scale, n, norm_eps, hc_eps, iters):
    """§3.2 mixes(X): X [n, D] bf16 values; fn [M, n*D]; base [M]; scale [3].
    Returns (pre [n], post [n], C [n, n]) in fp32."""
    x = X.reshape(-1).to(F32)
    rho = rms_inv_f32(x, norm_eps)
    m = f32_linear(fn, x) * rho
    pre = sigmoid(m[:n] * scale[0] + base[:n]) + torch.tensor(hc_eps, dtype=F32)
    post = 2.0 * sigmoid(m[n:2 * n] * scale[1] + base[n:2 * n])
    z = (m[2 * n:] * scale[2] + base[2 * n:]).reshape(n, n)
    return pre, post, sinkhorn(z, hc_eps, iters)


def collapse(X, w):
    """bf16(sum_i w_i * X_i), summed over the copies in ascending order. X [n, D], w [n]."""
    acc = w[0] * X[0]
    for i in range(1, X.shape[0]):
        acc = acc + w[i] * X[i]
    return bf16(acc)


def expand(Y, X, post, C):
    """X'_j = bf16(post_j * Y + sum_i C_ij * X_i) (§3.2). Y [D]; X [n, D]; C [n, n]."""
    acc = post[:, None] * Y[None, :]
    for i in range(X.shape[0]):
        acc = acc + C[i][:, None] * X[i][None, :]
    return bf16(acc)


# ---------------------------------------------------------------------------------------------
# Sparse attention with a sink (§3.3, §5.2)
# ---------------------------------------------------------------------------------------------


def sparse_attention(q, rows, valid, sinks, head_dim, block=64):
    """Online softmax over blocks of `block` list slots, sink in the denominator only.

    q [H, Dh] bf16 values; rows [S, Dh] (K = V) bf16 values for every list slot (anything for
    EMPTY slots); valid [S] bool; sinks [H] fp32. Probabilities are rounded to bf16 before P.V.
    Per block: scores by sequential dot products, then scaled; the running sum and output
    rescaled by expf(m - m_new); then the slots' terms added one slot after another.
    Returns o [H, Dh] (bf16 values)."""
    qn = _np32(q)
    H = qn.shape[0]
    tau = np.float32(head_dim ** -0.5)
    m = np.full((H,), np.float32(-1e30), dtype=np.float32)
    den = np.zeros(H, dtype=np.float32)
    acc = np.zeros((H, qn.shape[1]), dtype=np.float32)
    rn = _np32(rows)
    vn = np.asarray(valid, dtype=bool)
    S = rn.shape[0]
    for b0 in range(0, S, block):
        vb = vn[b0:b0 + block]
        if not vb.any():
            continue                                          # an all-EMPTY block is a no-op
        kb = rn[b0:b0 + block][vb]                            # [nv, Dh]
        prod = qn[:, None, :] * kb[None, :, :]                # [H, nv, Dh]
        s = np.cumsum(prod, axis=-1, dtype=np.float32)[..., -1] * tau   # dot first, then scale
        m_new = np.maximum(m, s.max(axis=1))
        a = expf(m - m_new).numpy()
        p = expf(s - m_new[:, None]).numpy()
        den = den * a + np.cumsum(p, axis=1, dtype=np.float32)[:, -1]
        acc = acc * a[:, None]
        pb = bf16(torch.from_numpy(p)).numpy()
        for j in range(kb.shape[0]):
            acc = acc + pb[:, j:j + 1] * kb[j][None, :]
        m = m_new
    den = den + expf(_np32(sinks) - m).numpy()
    return bf16(torch.from_numpy(acc / den[:, None]))
