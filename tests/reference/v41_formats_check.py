#!/usr/bin/python3
"""Independent check of the engine's DeepSeek V4.1 numerics (spec v41 §3.3, §3.9, §4, §5.4).

Written from the specification with numpy and torch only; it shares no code with the C++.
The roundings are done differently on purpose: E4M3 / E2M1 by a nearest-value search over the
table of every representable value (ties to the even code), bf16 by torch's own conversion,
the RoPE table by the reference's torch formula, the Engram multipliers by numpy's generator.

It generates fixed pseudo-random inputs, runs the engine's dump program
(tests/tools/v41_formats_dump.cpp) on them and compares:
  * the three block QDQs (values, codes and scales) bit for bit,
  * the packed window / main-KV / index-key rows and GGML MXFP4 blocks byte for byte,
  * the four RoPE inv_freq tables bit for bit, and the rotation within one bf16 ulp (cos / sin
    are libm-dependent in the last ulp),
  * Engram primes, offsets and row indices (released and tiny constants, random histories with
    dead tokens) exactly.

Usage: v41_formats_check.py PATH/TO/v41_formats_dump   (exit 0 = all equal, 1 = mismatch)
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

F32 = np.float32


# ---------------------------------------------------------------------------------------------
# Element formats (§4.1) by table search
# ---------------------------------------------------------------------------------------------

def e4m3_table():
    """Value of every non-negative finite code 0..126 (127 is NaN)."""
    vals = []
    for c in range(127):
        e, m = c >> 3, c & 7
        vals.append(m * 2.0 ** -9 if e == 0 else 2.0 ** (e - 7) * (1 + m / 8))
    return np.array(vals, dtype=np.float64)


E4M3 = e4m3_table()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def nearest_code(a, table):
    """Codes of the nearest table values to the magnitudes a (float64), ties to the even code."""
    hi = np.clip(np.searchsorted(table, a, side="left"), 0, len(table) - 1)
    lo = np.clip(hi - 1, 0, len(table) - 1)
    d_lo = np.abs(a - table[lo])
    d_hi = np.abs(table[hi] - a)
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return np.where(pick_hi, hi, lo).astype(np.uint8)


def e4m3_encode(v):
    v = v.astype(F32)
    a = np.minimum(np.abs(v).astype(np.float64), 448.0)
    return nearest_code(a, E4M3) | np.where(np.signbit(v), 0x80, 0).astype(np.uint8)


def e4m3_value(c):
    mag = E4M3[np.minimum(c & 0x7F, 126)]
    return np.where(c & 0x80, -mag, mag).astype(F32)


def e2m1_encode(v):
    v = v.astype(F32)
    a = np.minimum(np.abs(v).astype(np.float64), 6.0)
    return nearest_code(a, E2M1) | np.where(np.signbit(v), 0x08, 0).astype(np.uint8)


def e2m1_value(c):
    mag = E2M1[c & 7]
    return np.where(c & 8, -mag, mag).astype(F32)


def bf16(x):
    return torch.from_numpy(np.ascontiguousarray(x, dtype=F32)).to(torch.bfloat16).to(torch.float32).numpy()


R448 = F32(1.0) / F32(448.0)
R6 = F32(1.0) / F32(6.0)
assert R448.view(np.uint32) == 0x3B124925 and R6.view(np.uint32) == 0x3E2AAAAB


def round_scale(amax, r):
    """fast_round_scale: E = ceil(log2(f32(amax * r))) read from the bit fields."""
    y = (amax.astype(F32) * r).astype(F32)
    b = y.view(np.uint32).astype(np.int64)
    return ((b >> 23) & 0xFF) - 127 + ((b & 0x7FFFFF) != 0)


# ---------------------------------------------------------------------------------------------
# Block QDQs (§4.2 - §4.4)
# ---------------------------------------------------------------------------------------------

def qdq_fp8(x):
    xb = x.reshape(-1, 32)
    amax = np.maximum(np.abs(xb).max(axis=1), F32(1e-4))
    e = round_scale(amax, R448)
    scaled = (xb * np.exp2(-e.astype(np.float64))[:, None]).astype(F32)  # exact power-of-two scaling
    codes = e4m3_encode(scaled)
    y = bf16(e4m3_value(codes).astype(np.float64) * np.exp2(e.astype(np.float64))[:, None])
    return y.reshape(-1), codes.reshape(-1), (e + 127).astype(np.uint8)


def qdq_fp4_e4m3(x):
    xb = x.reshape(-1, 16)
    amax = np.maximum(np.abs(xb).max(axis=1), F32(6 * 2.0 ** -9))
    s_codes = e4m3_encode((amax / F32(6)).astype(F32))  # true fp32 division
    s = e4m3_value(s_codes)
    v = np.clip((xb / s[:, None]).astype(F32), F32(-6), F32(6))  # true fp32 division
    codes = e2m1_encode(v)
    y = bf16(e2m1_value(codes).astype(np.float64) * s[:, None].astype(np.float64))
    return y.reshape(-1), codes.reshape(-1), s_codes


def qdq_mxfp4(x):
    xb = x.reshape(-1, 32)
    amax = np.maximum(np.abs(xb).max(axis=1), F32(6 * 2.0 ** -126))
    e = round_scale(amax, R6)
    scaled = np.clip((xb * np.exp2(-e.astype(np.float64))[:, None]).astype(F32), F32(-6), F32(6))
    codes = e2m1_encode(scaled)
    y = bf16(e2m1_value(codes).astype(np.float64) * np.exp2(e.astype(np.float64))[:, None])
    return y.reshape(-1), codes.reshape(-1), (e + 127).astype(np.uint8)


def nibbles(codes):
    c = codes.reshape(-1, 2)
    return ((c[:, 0] & 0xF) | ((c[:, 1] & 0xF) << 4)).astype(np.uint8)


def pack_rows(x, n):
    """Window rows (512), main KV rows (512), index key rows (128) and GGML MXFP4 blocks."""
    _, c8, e8 = qdq_fp8(x)
    _, c4, s4 = qdq_fp4_e4m3(x)
    _, cm, em = qdq_mxfp4(x)
    win = np.concatenate([np.concatenate([c8.reshape(-1, 512), e8.reshape(-1, 16)], axis=1)]).reshape(-1)
    main = np.concatenate([nibbles(c4).reshape(-1, 256), s4.reshape(-1, 32)], axis=1).reshape(-1)
    idx = np.concatenate([nibbles(cm).reshape(-1, 64), em.reshape(-1, 4)], axis=1).reshape(-1)
    cb = cm.reshape(-1, 32)
    qs = ((cb[:, :16] & 0xF) | ((cb[:, 16:] & 0xF) << 4)).astype(np.uint8)
    ggml = np.concatenate([em.reshape(-1, 1), qs], axis=1).reshape(-1)
    return win, main, idx, ggml


def make_inputs(n):
    """bf16 values: blocks of 16 at scales 2^-30 .. 2^20, signed zeros, bf16 subnormals,
    saturating magnitudes, and spec example values placed at exact scales."""
    rng = np.random.default_rng(20260910)
    x = np.empty(n, dtype=F32)
    for b in range(n // 16):
        k = rng.integers(-30, 21)
        x[b * 16:(b + 1) * 16] = rng.standard_normal(16) * 2.0 ** k
    x[rng.random(n) < 0.02] = 0.0
    neg0 = rng.random(n) < 0.01
    x[neg0] = -0.0
    x[rng.random(n) < 0.005] = F32(3e-39)  # bf16 subnormal
    # Hand-made blocks: the §4.1 examples relative to the block scale, E2M1 midpoints, 448 / 6.
    special = [448, 17, 19, -19, 1.5 * 2 ** -9, 0.5 * 2 ** -9, -0.5 * 2 ** -9, 1000,
               6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5]
    for j, k in enumerate(range(-8, 8)):
        blk = (np.array(special * 2, dtype=np.float64) * 2.0 ** k).astype(F32)
        x[j * 32:(j + 1) * 32] = blk
    return bf16(x)


def check_formats(dump, tmp):
    n = 512 * 64
    x = make_inputs(n)
    src = os.path.join(tmp, "formats.f32")
    out = os.path.join(tmp, "formats.out")
    x.tofile(src)
    subprocess.run([dump, "formats", src, out], check=True)
    raw = np.fromfile(out, dtype=np.uint8)
    off = 0

    def take(count, dtype):
        nonlocal off
        size = count * np.dtype(dtype).itemsize
        v = raw[off:off + size].view(dtype)
        off += size
        return v

    failures = 0
    for name, fn, nsc in (("fp8_block32", qdq_fp8, n // 32), ("fp4_e4m3_block16", qdq_fp4_e4m3, n // 16),
                          ("mxfp4_block32", qdq_mxfp4, n // 32)):
        want_y, want_c, want_s = fn(x)
        got_y, got_c, got_s = take(n, F32), take(n, np.uint8), take(nsc, np.uint8)
        for part, g, w in (("values", got_y.view(np.uint32), want_y.view(np.uint32)),
                           ("codes", got_c, want_c), ("scales", got_s, want_s)):
            bad = np.nonzero(g != w)[0]
            if len(bad):
                failures += 1
                i = bad[0]
                print(f"FAIL {name} {part}: {len(bad)} mismatches, first at {i}: got {g[i]:#x} want {w[i]:#x}"
                      f" (input {x[min(i, n - 1)]!r})")
    for name, w, size in zip(("window rows", "main KV rows", "index key rows", "GGML MXFP4 blocks"),
                             pack_rows(x, n), (n // 512 * 528, n // 512 * 288, n // 128 * 68, n // 32 * 17)):
        g = take(size, np.uint8)
        if len(w) != size or (g != w).any():
            failures += 1
            print(f"FAIL {name}: {(g != w).sum() if len(w) == size else 'size'} byte mismatches")
    assert off == len(raw), "formats output size"
    print(f"formats: {n} values, 3 QDQs and 4 packings compared, {failures} failing")
    return failures


# ---------------------------------------------------------------------------------------------
# RoPE (§3.3) in the reference's torch form
# ---------------------------------------------------------------------------------------------

def ref_inv_freq(dim, base, orig, factor, beta_fast, beta_slow):
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if orig > 0:
        def corr_dim(rot):
            return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(corr_dim(beta_fast)), 0)
        high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        smooth = 1 - ramp
        freqs = freqs / factor * (1 - smooth) + freqs * smooth
    return freqs


SPEC_TABLES = {  # §3.3 and §6.2, fp32 bit patterns
    (64, 160000, 65536, 16): "3f800000 3f300a3a 3ef21c1f 3ea67d01 3e64f92e 3e1d7475 3dd88cb4 3d94e963 "
                             "3d4ccccd 3d0cd4fb 3cc1b019 3c8530ce 3c372dbf 3bfbed88 3bad3d5e 3b6e4237 "
                             "3b147ae1 3ab714e0 3a5ebdb6 3a0530ce 399bb3af 39305978 38be904d 383e9b5f "
                             "37a3d70c 36b443d0 3677eba6 362a7be8 35ea77ff 35a13bdc 355dbf30 35187c4d",
    (64, 10000, 0, 1): "3f800000 3f3ff911 3f0ff59a 3ed7e89b 3ea1e89b 3e72d423 3e361887 3e088d77 "
                       "3dcccccd 3d99940d 3d6655c2 3d2cba15 3d0186e3 3cc2434f 3c91ad39 3c5a7bf2 "
                       "3c23d70a 3bf5b9b0 3bb8449c 3b8a2e77 3b4f3e38 3b1b690d 3ae91528 3aaec98e "
                       "3a83126f 3a44948c 3a136a16 39dd1725 39a5cb60 3978a815 393a7753 390bd472",
    (16, 10000, 0, 1): "3f800000 3ea1e89b 3dcccccd 3d0186e3 3c23d70a 3b4f3e38 3a83126f 39a5cb60",
    (16, 160000, 32, 4): "3f800000 3e0f1bbd 3c4ccccd 3b372dbf 3a23d70a 39128aff 3803126f 36ea77ff",
}


def check_rope(dump, tmp):
    failures = 0
    rng = np.random.default_rng(7)
    for (dim, base, orig, factor), hexes in SPEC_TABLES.items():
        want = np.array([int(h, 16) for h in hexes.split()], dtype=np.uint32)
        ref = ref_inv_freq(dim, base, orig, factor, 32, 1).numpy().view(np.uint32)
        if (ref != want).any():
            failures += 1
            print(f"FAIL rope: the torch formula disagrees with the spec table {dim}/{base}")
        rows = 48
        x = bf16(rng.standard_normal(rows * dim).astype(F32))
        src = os.path.join(tmp, "rope.f32")
        out = os.path.join(tmp, "rope.out")
        x.tofile(src)
        subprocess.run([dump, "rope", str(dim), str(base), str(orig), str(factor), "32", "1", src, out], check=True)
        raw = np.fromfile(out, dtype=F32)
        got_inv, got_y = raw[:dim // 2], raw[dim // 2:]
        if (got_inv.view(np.uint32) != want).any():
            failures += 1
            print(f"FAIL rope inv_freq {dim}/{base}: {got_inv.view(np.uint32)} vs {want}")
        # Rotation as the reference does it: complex64 multiply by polar(1, t * inv_freq).
        pos = torch.tensor([r * r * 37 for r in range(rows)], dtype=torch.float32)
        freqs_cis = torch.polar(torch.ones(rows, dim // 2), torch.outer(pos, torch.from_numpy(want.view(F32))))
        xc = torch.view_as_complex(torch.from_numpy(x.reshape(rows, dim // 2, 2).copy()))
        ref_y = torch.view_as_real(xc * freqs_cis).reshape(-1).to(torch.bfloat16).to(torch.float32).numpy()
        ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(ref_y), 1e-30))) - 7)
        far = np.abs(got_y - ref_y) > ulp * 1.0001
        exact = (got_y.view(np.uint32) == ref_y.view(np.uint32)).mean()
        if far.any():
            failures += 1
            i = np.nonzero(far)[0][0]
            print(f"FAIL rope rotation {dim}/{base}: {far.sum()} values off by more than 1 bf16 ulp, "
                  f"first {i}: {got_y[i]} vs {ref_y[i]}")
        print(f"rope {dim}/{base}{' yarn' if orig else ''}: table exact, rotation {exact * 100:.2f}% bit-equal")
    return failures


# ---------------------------------------------------------------------------------------------
# Engram (§3.9.2 - §3.9.4)
# ---------------------------------------------------------------------------------------------

def is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    d = 3
    while d * d <= n:
        if n % d == 0:
            return False
        d += 2
    return True


def ref_primes(vocab, n_layers, max_ngram, n_head):
    seen, out = set(), []
    for _ in range(n_layers):
        layer = []
        for _n in range(2, max_ngram + 1):
            cur = vocab - 1
            for _h in range(n_head):
                cur += 1
                while not is_prime(cur) or cur in seen:
                    cur += 1
                seen.add(cur)
                layer.append(cur)
        out.append(layer)
    return out


def ref_multipliers(layer_ids, max_ngram, cvocab):
    bound = max(((2 ** 63 - 1) // cvocab) // 2, 1)
    return [[2 * int(v) + 1 for v in np.random.default_rng(10007 * lid).integers(0, bound, max_ngram, dtype=np.int64)]
            for lid in layer_ids]


def ref_hash(hist, primes, mults, max_ngram, n_head, pad):
    offsets = [[sum(p[:c]) for c in range(len(p))] for p in primes]
    out = []
    for p in range(len(hist)):
        for li in range(len(primes)):
            row = [0] * ((max_ngram - 1) * n_head)
            blocked, rolling = False, 0
            for s in range(max_ngram):
                blocked = blocked or p - s < 0 or hist[p - s] == -1
                v = pad if blocked else hist[p - s]
                term = v * mults[li][s]
                assert 0 <= term < 2 ** 63
                rolling = term if s == 0 else rolling ^ term
                if s >= 1:
                    for h in range(n_head):
                        c = (s - 1) * n_head + h
                        row[c] = rolling % primes[li][c] + offsets[li][c]
            out.extend(row)
    return np.array(out, dtype=np.int64), offsets


def check_engram(dump, tmp):
    failures = 0
    configs = [  # (vocab, layer ids, max_ngram, heads, compressed vocab, pad, spec multipliers)
        (16000000, [1, 14], 4, 8, 99092, 2,
         [[76632096046245, 4839876093313, 35959672319349, 73987337458391],
          [67716810739261, 51510806800915, 30921347202721, 82619226485591]]),
        (100, [0, 1], 4, 2, 256, 1,
         [[22948963341361471, 9720090748611819, 1476226777048821, 595470825660793],
          [29662608052400909, 1873410163432121, 13919202536988139, 28638879857136817]]),
    ]
    rng = np.random.default_rng(99)
    for vocab, lids, max_ngram, n_head, cv, pad, spec_mults in configs:
        mults = ref_multipliers(lids, max_ngram, cv)
        if mults != spec_mults:
            failures += 1
            print(f"FAIL engram: numpy multipliers {mults} differ from the spec's")
        primes = ref_primes(vocab, len(lids), max_ngram, n_head)
        hist = rng.integers(0, cv, 300).astype(np.int64)
        hist[rng.random(300) < 0.05] = -1  # dead tokens (image spans)
        hist[:5] = [0, 7, cv - 1, 12345 % cv, pad]
        want, offsets = ref_hash(hist.tolist(), primes, mults, max_ngram, n_head, pad)
        src = os.path.join(tmp, "hist.i64")
        out = os.path.join(tmp, "engram.out")
        hist.tofile(src)
        flat = ",".join(str(m) for layer in mults for m in layer)
        subprocess.run([dump, "engram", str(vocab), str(max_ngram), str(n_head), str(cv), str(pad), flat, src, out],
                       check=True)
        raw = np.fromfile(out, dtype=np.int64)
        n_pc = len(lids) * (max_ngram - 1) * n_head
        got_p, got_o, got_h = raw[:n_pc], raw[n_pc:2 * n_pc], raw[2 * n_pc:]
        if (got_p != np.array(primes).reshape(-1)).any() or (got_o != np.array(offsets).reshape(-1)).any():
            failures += 1
            print(f"FAIL engram primes / offsets (vocab {vocab})")
        if got_h.shape != want.shape or (got_h != want).any():
            failures += 1
            print(f"FAIL engram row indices (vocab {vocab}): {(got_h != want).sum()} mismatches")
        print(f"engram vocab {vocab}: {len(hist)} positions x {len(lids)} layers compared")
    return failures


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    dump = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        failures = check_formats(dump, tmp) + check_rope(dump, tmp) + check_engram(dump, tmp)
    print("OK" if failures == 0 else f"{failures} FAILURES")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
