"""Independent dequantizers for the GGML block formats of model.md §9 (and the V4.1 formats
of v41.md §2.3: MXFP4, I8 and the Engram row264 rows).

Owns: turning a tensor's raw bytes (from gguf.py) into float32 values, vectorised with numpy.
Each function reproduces GGML's reference dequantizer bit for bit (proved by selftest.py against
golden files produced by GGML), including its float32 operation order. It does not know about
tensor names or shapes beyond "a whole number of blocks".
"""

import numpy as np

QK_K = 256

# GGML's iq2xxs_grid (ggml-common.h): 256 entries of 8 packed byte magnitudes (8, 25 or 43),
# byte j (little-endian) is the magnitude of value j of a group of 8.
IQ2XXS_GRID = [
    0x0808080808080808, 0x080808080808082b, 0x0808080808081919, 0x0808080808082b08,
    0x0808080808082b2b, 0x0808080808190819, 0x0808080808191908, 0x08080808082b0808,
    0x08080808082b082b, 0x08080808082b2b08, 0x08080808082b2b2b, 0x0808080819080819,
    0x0808080819081908, 0x0808080819190808, 0x0808080819192b08, 0x08080808192b0819,
    0x08080808192b1908, 0x080808082b080808, 0x080808082b08082b, 0x080808082b082b2b,
    0x080808082b2b082b, 0x0808081908080819, 0x0808081908081908, 0x0808081908190808,
    0x0808081908191919, 0x0808081919080808, 0x080808192b081908, 0x080808192b192b08,
    0x0808082b08080808, 0x0808082b0808082b, 0x0808082b082b082b, 0x0808082b2b08082b,
    0x0808190808080819, 0x0808190808081908, 0x0808190808190808, 0x08081908082b0819,
    0x08081908082b1908, 0x0808190819080808, 0x080819081908082b, 0x0808190819082b08,
    0x08081908192b0808, 0x080819082b080819, 0x080819082b081908, 0x080819082b190808,
    0x080819082b2b1908, 0x0808191908080808, 0x080819190808082b, 0x0808191908082b08,
    0x08081919082b0808, 0x080819191908192b, 0x08081919192b2b19, 0x080819192b080808,
    0x080819192b190819, 0x0808192b08082b19, 0x0808192b08190808, 0x0808192b19080808,
    0x0808192b2b081908, 0x0808192b2b2b1908, 0x08082b0808080808, 0x08082b0808081919,
    0x08082b0808082b08, 0x08082b0808191908, 0x08082b08082b2b08, 0x08082b0819080819,
    0x08082b0819081908, 0x08082b0819190808, 0x08082b081919082b, 0x08082b082b082b08,
    0x08082b1908081908, 0x08082b1919080808, 0x08082b2b0808082b, 0x08082b2b08191908,
    0x0819080808080819, 0x0819080808081908, 0x0819080808190808, 0x08190808082b0819,
    0x0819080819080808, 0x08190808192b0808, 0x081908082b081908, 0x081908082b190808,
    0x081908082b191919, 0x0819081908080808, 0x0819081908082b08, 0x08190819082b0808,
    0x0819081919190808, 0x0819081919192b2b, 0x081908192b080808, 0x0819082b082b1908,
    0x0819082b19081919, 0x0819190808080808, 0x0819190808082b08, 0x08191908082b0808,
    0x08191908082b1919, 0x0819190819082b19, 0x081919082b080808, 0x0819191908192b08,
    0x08191919192b082b, 0x0819192b08080808, 0x0819192b0819192b, 0x08192b0808080819,
    0x08192b0808081908, 0x08192b0808190808, 0x08192b0819080808, 0x08192b082b080819,
    0x08192b1908080808, 0x08192b1908081919, 0x08192b192b2b0808, 0x08192b2b19190819,
    0x082b080808080808, 0x082b08080808082b, 0x082b080808082b2b, 0x082b080819081908,
    0x082b0808192b0819, 0x082b08082b080808, 0x082b08082b08082b, 0x082b0819082b2b19,
    0x082b081919082b08, 0x082b082b08080808, 0x082b082b0808082b, 0x082b190808080819,
    0x082b190808081908, 0x082b190808190808, 0x082b190819080808, 0x082b19081919192b,
    0x082b191908080808, 0x082b191919080819, 0x082b1919192b1908, 0x082b192b2b190808,
    0x082b2b0808082b08, 0x082b2b08082b0808, 0x082b2b082b191908, 0x082b2b2b19081908,
    0x1908080808080819, 0x1908080808081908, 0x1908080808190808, 0x1908080808192b08,
    0x19080808082b0819, 0x19080808082b1908, 0x1908080819080808, 0x1908080819082b08,
    0x190808081919192b, 0x19080808192b0808, 0x190808082b080819, 0x190808082b081908,
    0x190808082b190808, 0x1908081908080808, 0x19080819082b0808, 0x19080819192b0819,
    0x190808192b080808, 0x190808192b081919, 0x1908082b08080819, 0x1908082b08190808,
    0x1908082b19082b08, 0x1908082b1919192b, 0x1908082b192b2b08, 0x1908190808080808,
    0x1908190808082b08, 0x19081908082b0808, 0x190819082b080808, 0x190819082b192b19,
    0x190819190819082b, 0x19081919082b1908, 0x1908192b08080808, 0x19082b0808080819,
    0x19082b0808081908, 0x19082b0808190808, 0x19082b0819080808, 0x19082b0819081919,
    0x19082b1908080808, 0x19082b1919192b08, 0x19082b19192b0819, 0x19082b192b08082b,
    0x19082b2b19081919, 0x19082b2b2b190808, 0x1919080808080808, 0x1919080808082b08,
    0x1919080808190819, 0x1919080808192b19, 0x19190808082b0808, 0x191908082b080808,
    0x191908082b082b08, 0x1919081908081908, 0x191908191908082b, 0x191908192b2b1908,
    0x1919082b2b190819, 0x191919082b190808, 0x191919082b19082b, 0x1919191908082b2b,
    0x1919192b08080819, 0x1919192b19191908, 0x19192b0808080808, 0x19192b0808190819,
    0x19192b0808192b19, 0x19192b08192b1908, 0x19192b1919080808, 0x19192b2b08082b08,
    0x192b080808081908, 0x192b080808190808, 0x192b080819080808, 0x192b0808192b2b08,
    0x192b081908080808, 0x192b081919191919, 0x192b082b08192b08, 0x192b082b192b0808,
    0x192b190808080808, 0x192b190808081919, 0x192b191908190808, 0x192b19190819082b,
    0x192b19192b081908, 0x192b2b081908082b, 0x2b08080808080808, 0x2b0808080808082b,
    0x2b08080808082b2b, 0x2b08080819080819, 0x2b0808082b08082b, 0x2b08081908081908,
    0x2b08081908192b08, 0x2b08081919080808, 0x2b08082b08190819, 0x2b08190808080819,
    0x2b08190808081908, 0x2b08190808190808, 0x2b08190808191919, 0x2b08190819080808,
    0x2b081908192b0808, 0x2b08191908080808, 0x2b0819191908192b, 0x2b0819192b191908,
    0x2b08192b08082b19, 0x2b08192b19080808, 0x2b08192b192b0808, 0x2b082b080808082b,
    0x2b082b1908081908, 0x2b082b2b08190819, 0x2b19080808081908, 0x2b19080808190808,
    0x2b190808082b1908, 0x2b19080819080808, 0x2b1908082b2b0819, 0x2b1908190819192b,
    0x2b1908192b080808, 0x2b19082b19081919, 0x2b19190808080808, 0x2b191908082b082b,
    0x2b19190819081908, 0x2b19191919190819, 0x2b192b082b080819, 0x2b192b19082b0808,
    0x2b2b08080808082b, 0x2b2b080819190808, 0x2b2b08082b081919, 0x2b2b081908082b19,
    0x2b2b082b08080808, 0x2b2b190808192b08, 0x2b2b2b0819190808, 0x2b2b2b1908081908,

]


def _ksigns_iq2xs():
    """ksigns_iq2xs[i] = i with bit 7 set when popcount(i) is odd (model.md §9)."""
    return np.array([i | (0x80 if bin(i).count("1") % 2 else 0) for i in range(128)], dtype=np.uint8)


_GRID_BYTES = np.array(IQ2XXS_GRID, dtype="<u8").view(np.uint8).reshape(256, 8)  # [256, 8]
_KSIGNS = _ksigns_iq2xs()                                                             # [128]


def _f16(raw_u8):
    """Little-endian binary16 bytes -> float32 (exact, subnormals included)."""
    return np.frombuffer(raw_u8, dtype="<f2").astype(np.float32)


def dequant_f32(raw):
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def dequant_f16(raw):
    return _f16(raw)


def dequant_bf16(raw):
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32)


def dequant_i32(raw):
    return np.frombuffer(raw, dtype="<i4").copy()


def dequant_q8_0(raw):
    """Q8_0: 34 bytes per 32 values, `f16 d; int8 q[32]`; x = d * q."""
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)          # [nb, 34]
    d = _f16(blocks[:, 0:2].copy())[:, None]                            # [nb, 1]
    q = blocks[:, 2:34].view(np.int8).astype(np.float32)                # [nb, 32]
    return (q * d).reshape(-1)


def dequant_q2_k(raw):
    """Q2_K: 84 bytes per 256 values, `u8 scales[16]; u8 qs[64]; f16 d; f16 dmin`."""
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 84)          # [nb, 84]
    nb = blocks.shape[0]
    scales = blocks[:, 0:16]                                            # [nb, 16]
    qs = blocks[:, 16:80].reshape(nb, 2, 1, 32)                         # [nb, half, 1, l]
    d = _f16(blocks[:, 80:82].copy()).reshape(nb, 1, 1, 1, 1)
    dmin = _f16(blocks[:, 82:84].copy()).reshape(nb, 1, 1, 1, 1)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    codes = ((qs >> shifts) & 3).astype(np.float32)                     # [nb, half, group, 32]
    codes = codes.reshape(nb, 2, 4, 2, 16)                              # [nb, half, group, sub, 16]
    sb = scales.reshape(nb, 2, 4, 2, 1)                                 # scale byte 8n + 2g + sub
    dl = d * (sb & 15).astype(np.float32)                               # float32 products, as GGML
    ml = dmin * (sb >> 4).astype(np.float32)
    return (dl * codes - ml).astype(np.float32).reshape(-1)


def _q4_k_scale_min(sc):
    """The 8 six-bit (scale, min) pairs of a Q4_K block from its 12 scale bytes. sc: [nb, 12]."""
    sc = sc.astype(np.uint8)
    scale = np.empty((sc.shape[0], 8), dtype=np.uint8)
    mn = np.empty((sc.shape[0], 8), dtype=np.uint8)
    scale[:, 0:4] = sc[:, 0:4] & 63
    mn[:, 0:4] = sc[:, 4:8] & 63
    scale[:, 4:8] = (sc[:, 8:12] & 15) | ((sc[:, 0:4] >> 6) << 4)
    mn[:, 4:8] = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return scale, mn


def dequant_q4_k(raw):
    """Q4_K: 144 bytes per 256 values, `f16 d; f16 dmin; u8 sc[12]; u8 qs[128]`."""
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 144)         # [nb, 144]
    nb = blocks.shape[0]
    d = _f16(blocks[:, 0:2].copy()).reshape(nb, 1, 1)
    dmin = _f16(blocks[:, 2:4].copy()).reshape(nb, 1, 1)
    scale, mn = _q4_k_scale_min(blocks[:, 4:16])                        # [nb, 8] each
    qs = blocks[:, 16:144].reshape(nb, 4, 1, 32)                        # [nb, chunk, 1, l]
    nib = np.concatenate([qs & 15, qs >> 4], axis=2).astype(np.float32)  # [nb, chunk, lo/hi, 32]
    nib = nib.reshape(nb, 8, 32)                                        # sub-block 2k + hi
    d1 = d * scale.reshape(nb, 8, 1).astype(np.float32)
    m1 = dmin * mn.reshape(nb, 8, 1).astype(np.float32)
    return (d1 * nib - m1).astype(np.float32).reshape(-1)


def dequant_iq2_xxs(raw):
    """IQ2_XXS: 66 bytes per 256 values, `f16 d; u16 qs[32]` (8 sub-blocks of 8 bytes)."""
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 66)          # [nb, 66]
    nb = blocks.shape[0]
    d = _f16(blocks[:, 0:2].copy()).reshape(nb, 1, 1, 1)
    sub = blocks[:, 2:66].reshape(nb, 8, 8)                             # [nb, ib32, 8 bytes]
    grid_idx = sub[:, :, 0:4]                                           # a0: 4 grid indices
    a1 = sub[:, :, 4:8].copy().view("<u4").reshape(nb, 8)               # [nb, ib32]
    s = (a1 >> 28).astype(np.float32).reshape(nb, 8, 1, 1)
    db = d * (np.float32(0.5) + s) * np.float32(0.25)                   # GGML's float32 order
    sign_idx = (a1[:, :, None] >> (7 * np.arange(4, dtype=np.uint32))) & 127   # [nb, ib32, 4]
    signs = _KSIGNS[sign_idx]                                           # [nb, ib32, 4]
    bits = (signs[..., None] >> np.arange(8, dtype=np.uint8)) & 1       # [nb, ib32, 4, 8]
    sign = np.where(bits == 1, np.float32(-1.0), np.float32(1.0))
    mag = _GRID_BYTES[grid_idx].astype(np.float32)                      # [nb, ib32, 4, 8]
    return ((db * mag) * sign).astype(np.float32).reshape(-1)


# ---------------------------------------------------------------------------------------------
# DeepSeek V4.1 formats (v41.md §2.3): MXFP4 routed experts and the Engram row264 tables
# ---------------------------------------------------------------------------------------------

# GGML's MXFP4 value table (2x E2M1, paired with a halved E8M0 scale).
_MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def _e8m0_pow2(e, bias):
    """2^(e - bias) as float32 for uint8 exponent bytes (exact; subnormal results included)."""
    return np.ldexp(np.float32(1.0), e.astype(np.int32) - bias).astype(np.float32)


def dequant_mxfp4(raw):
    """MXFP4 (GGML type 39): 17 bytes per 32 values, `u8 e; u8 qs[16]`; element j is the low
    nibble of qs[j], element j + 16 the high nibble; x = table[code] * 2^(e - 128)."""
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 17)          # [nb, 17]
    scale = _e8m0_pow2(blocks[:, 0], 128)[:, None]                      # [nb, 1]
    qs = blocks[:, 1:17]
    codes = np.concatenate([qs & 15, qs >> 4], axis=1)                  # [nb, 32]
    return (_MXFP4_VALUES[codes] * scale).astype(np.float32).reshape(-1)


def dequant_i8(raw):
    """I8 (GGML type 24) as plain int8 values."""
    return np.frombuffer(raw, dtype=np.int8).astype(np.float32)


def e4m3_table():
    """The 256 float8_e4m3fn values by code (NaN for S.1111.111)."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    e = (codes >> 3) & 15
    m = codes & 7
    mag = np.where(e == 0, m * 2.0 ** -9, (1.0 + m / 8.0) * np.exp2(e - 7.0))
    vals = sign * mag
    vals[(codes & 0x7F) == 0x7F] = np.nan
    return vals.astype(np.float32)


_E4M3 = e4m3_table()


def dequant_row264(raw, width=256):
    """Engram row264 rows stored as I8 [width + width/32, rows]: bytes 0..width-1 are E4M3
    codes, then one UE8M0 byte per 32 values; x = bf16(e4m3 * 2^(s - 127)) (exact in range).
    Returns float32 [rows * width]."""
    nsc = width // 32
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(-1, width + nsc)
    vals = _E4M3[rows[:, :width]].reshape(-1, nsc, 32)
    scale = _e8m0_pow2(rows[:, width:], 127)[:, :, None]
    out = (vals * scale).astype(np.float32)
    # bf16 rounding (RNE) of the product; a no-op unless the scale leaves the exact range.
    bits = out.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).reshape(-1)


DEQUANTIZERS = {
    "F32": dequant_f32,
    "F16": dequant_f16,
    "BF16": dequant_bf16,
    "I32": dequant_i32,
    "Q8_0": dequant_q8_0,
    "Q2_K": dequant_q2_k,
    "Q4_K": dequant_q4_k,
    "IQ2_XXS": dequant_iq2_xxs,
    "MXFP4": dequant_mxfp4,
    "I8": dequant_i8,
}


def dequantize(type_name, raw):
    """Flat float32 (int32 for I32) values of `raw`, a whole number of `type_name` blocks."""
    if type_name not in DEQUANTIZERS:
        raise ValueError(f"no dequantizer for {type_name}")
    return DEQUANTIZERS[type_name](raw)
