#!/usr/bin/python3
"""Self-test of the PyTorch reference: its GGUF reader, its dequantizers and its ops.

Checks:
  * every dequantizer reproduces GGML's dequantization bit for bit (golden files in
    <shared>/golden/quants, produced by GGML), and the embedded IQ2_XXS grid equals GGML's;
  * the GGUF reader parses a synthetic v2 and v3 file with every metadata type, nested arrays
    and a non-default alignment;
  * the FP8 / FP4 round trips against brute-force nearest-value searches of the code tables,
    and the power-of-two scale rule of model.md §12.3 against the float32 bit pattern;
  * Hadamard, RoPE, YaRN ramp, Sinkhorn, top-k ties, routing, and the streaming compressor
    against a direct (whole-block) pooling formula.

The shared directory is $MAGNETAR_SHARED_DIR, else ../shared next to the repository root.
Exit status: 0 all passed, 1 a check failed, 77 (CTest skip) only the golden files are missing.
"""

import math
import os
import struct
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dsv4_ref import dequant, ops  # noqa: E402
from dsv4_ref.gguf import GGUFFile  # noqa: E402

FAILURES = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  ({detail})" if detail else ""))
    if not ok:
        FAILURES.append(name)


def shared_dir():
    env = os.environ.get("MAGNETAR_SHARED_DIR")
    if env:
        return env
    repo_root = os.path.dirname(os.path.dirname(HERE))
    return os.path.join(os.path.dirname(repo_root), "shared")


# ---------------------------------------------------------------------------------------------
# Dequantizers vs GGML golden files
# ---------------------------------------------------------------------------------------------

GOLDEN_CASES = [
    ("f16", "F16"), ("bf16", "BF16"), ("q8_0", "Q8_0"),
    ("q2_k", "Q2_K"), ("q2_k.imatrix", "Q2_K"),
    ("q4_k", "Q4_K"), ("q4_k.imatrix", "Q4_K"),
    ("iq2_xxs.imatrix", "IQ2_XXS"),
]


def test_dequant_golden():
    gdir = os.path.join(shared_dir(), "golden", "quants")
    if not os.path.isdir(gdir):
        print(f"SKIP  dequantizers vs GGML golden files (not found: {gdir})")
        return False
    for stem, type_name in GOLDEN_CASES:
        raw = np.fromfile(os.path.join(gdir, stem + ".bin"), dtype=np.uint8)
        want = np.fromfile(os.path.join(gdir, stem + ".dequant.f32"), dtype="<f4")
        got = dequant.dequantize(type_name, raw)
        same = got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
        n_diff = int(np.sum(got.view(np.uint32) != want.view(np.uint32))) if got.shape == want.shape else -1
        check(f"dequant {type_name} ({stem}) bit-exact vs GGML", same, f"{want.size} values, {n_diff} differ")
    grid = np.fromfile(os.path.join(gdir, "iq2xxs_grid.u64le"), dtype="<u8")
    check("embedded iq2xxs_grid equals GGML's", np.array_equal(grid, np.array(dequant.IQ2XXS_GRID, dtype=np.uint64)))
    ksigns = np.fromfile(os.path.join(gdir, "ksigns_iq2xs.u8"), dtype=np.uint8)
    check("ksigns_iq2xs rule equals GGML's table", np.array_equal(ksigns, dequant._KSIGNS))
    f32 = np.fromfile(os.path.join(gdir, "input.f32"), dtype=np.uint8)
    check("dequant F32 is the identity", np.array_equal(dequant.dequantize("F32", f32), f32.view("<f4")))
    return True


# ---------------------------------------------------------------------------------------------
# GGUF reader on synthetic files
# ---------------------------------------------------------------------------------------------


def _gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _gguf_value(vtype, v):
    fmts = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    if vtype in fmts:
        return struct.pack(fmts[vtype], v)
    if vtype == 8:
        return _gguf_string(v)
    etype, items = v
    out = struct.pack("<IQ", etype, len(items))
    return out + b"".join(_gguf_value(etype, it) for it in items)


def write_synthetic_gguf(path, version, alignment):
    meta = [
        ("general.architecture", 8, "test"),
        ("k.u8", 0, 200), ("k.i8", 1, -5), ("k.u16", 2, 60000), ("k.i16", 3, -30000),
        ("k.u32", 4, 4000000000), ("k.i32", 5, -2000000000), ("k.f32", 6, 1.5), ("k.bool", 7, True),
        ("k.str", 8, "héllo"), ("k.u64", 10, 2 ** 40), ("k.i64", 11, -(2 ** 40)), ("k.f64", 12, 0.1),
        ("k.arr_i32", 9, (5, [1, -2, 3])), ("k.arr_str", 9, (8, ["a", "", "ünï"])),
        ("k.arr_nested", 9, (9, [(4, [1, 2]), (8, ["x"]), (9, [(0, [7])])])),
        ("k.arr_bool", 9, (7, [True, False])), ("k.arr_empty", 9, (6, [])),
        ("general.alignment", 4, alignment),
    ]
    a = np.arange(8, dtype="<f4")                    # F32 [8]
    b = np.arange(6, dtype="<f2").reshape(2, 3)      # F16 ne = [3, 2]
    tensors = [("t.a", [8], 0, a.tobytes()), ("t.b", [3, 2], 1, b.tobytes())]
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(meta))
    for key, vtype, v in meta:
        head += _gguf_string(key) + struct.pack("<I", vtype) + _gguf_value(vtype, v)
    offset, data = 0, b""
    for name, ne, ggml_type, payload in tensors:
        head += _gguf_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        head += struct.pack("<IQ", ggml_type, offset)
        pad = (-len(payload)) % alignment
        data += payload + b"\0" * pad
        offset += len(payload) + pad
    head += b"\0" * ((-len(head)) % alignment)
    with open(path, "wb") as f:
        f.write(head + data)


def test_gguf_reader():
    with tempfile.TemporaryDirectory() as tmp:
        for version in (2, 3):
            path = os.path.join(tmp, f"v{version}.gguf")
            write_synthetic_gguf(path, version, 64)
            g = GGUFFile(path)
            m = g.metadata
            ok = (g.version == version and g.alignment == 64 and m["k.u8"] == 200 and m["k.i8"] == -5
                  and m["k.u16"] == 60000 and m["k.i16"] == -30000 and m["k.u32"] == 4000000000
                  and m["k.i32"] == -2000000000 and m["k.f32"] == 1.5 and m["k.bool"] is True
                  and m["k.str"] == "héllo" and m["k.u64"] == 2 ** 40 and m["k.i64"] == -(2 ** 40)
                  and m["k.f64"] == 0.1 and m["k.arr_i32"] == [1, -2, 3]
                  and m["k.arr_str"] == ["a", "", "ünï"]
                  and m["k.arr_nested"] == [[1, 2], ["x"], [[7]]]
                  and m["k.arr_bool"] == [True, False] and m["k.arr_empty"] == [])
            check(f"GGUF v{version}: every metadata type, nested arrays", ok)
            ta = dequant.dequantize("F32", g.raw("t.a"))
            tb = dequant.dequantize("F16", g.raw("t.b")).reshape(tuple(reversed(g.tensors["t.b"].ne)))
            check(f"GGUF v{version}: aligned tensor data and orientation",
                  np.array_equal(ta, np.arange(8)) and tb.shape == (2, 3)
                  and np.array_equal(tb, np.arange(6).reshape(2, 3)))


# ---------------------------------------------------------------------------------------------
# FP8 / FP4 round trips
# ---------------------------------------------------------------------------------------------


def e4m3_table():
    """Values of the E4M3FN codes 0..126 (non-negative), ascending."""
    vals = []
    for code in range(127):
        e, m = code >> 3, code & 7
        vals.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals)


def nearest_ties_even(table, v):
    """Brute force: nearest table entry to |v|, ties to the even index; sign restored."""
    mag = np.abs(v)
    dist = np.abs(table[None, :] - mag[:, None])
    best = dist.min(axis=1, keepdims=True)
    cand = dist == best
    idx = np.array([np.flatnonzero(c)[0] if c.sum() == 1 else [i for i in np.flatnonzero(c) if i % 2 == 0][0]
                    for c in cand])
    return np.sign(v) * table[idx]


def test_rounding():
    rng = np.random.default_rng(1)
    t8 = e4m3_table()
    mids = (t8[1:] + t8[:-1]) / 2
    v = np.concatenate([rng.uniform(-448, 448, 3000), rng.uniform(-0.02, 0.02, 2000), t8, -t8, mids, -mids,
                        np.nextafter(mids, 0), np.nextafter(mids, 1000)])
    got = ops.e4m3_round(torch.from_numpy(v)).numpy()
    check("e4m3_round = nearest E4M3 value, ties to even code", np.array_equal(got, nearest_ties_even(t8, v)))

    t4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    mids4 = (t4[1:] + t4[:-1]) / 2
    v = np.concatenate([rng.uniform(-6, 6, 3000), t4, -t4, mids4, -mids4, np.nextafter(mids4, 0), np.nextafter(mids4, 9)])
    got = ops.e2m1_round(torch.from_numpy(v)).numpy()
    check("e2m1_round = nearest E2M1 value, ties to even code", np.array_equal(got, nearest_ties_even(t4, v)))
    spec = {0.25: 0, 0.75: 1, 1.25: 1, 1.75: 2, 2.5: 2, 3.5: 4, 5: 4}
    got = ops.e2m1_round(torch.tensor(list(spec.keys()), dtype=torch.float64)).tolist()
    check("e2m1_round examples of model.md §4.4", got == list(spec.values()), str(got))

    # §12.3: scale from the float32 bit pattern of amax * (1/448), not ceil(log2()).
    def bit_rule(amax, inv):
        prod = (np.float32(amax) * np.float32(inv)).astype(np.float32)
        bits = prod.view(np.uint32)
        expo = ((bits >> 23) & 255).astype(np.int64) - 127 + ((bits & 0x7FFFFF) != 0)
        return np.ldexp(1.0, expo)

    amax = np.concatenate([rng.uniform(1e-4, 1000, 5000), 448.0 * 2.0 ** np.arange(-10, 4)])
    amax32 = amax.astype(np.float32)
    # Crafted: amax just above 448 * 2^k so that the float32 product is 1-2 ulp above 2^k.
    crafted = []
    for k in range(-8, 3):
        target = np.float32(2.0 ** k)
        for ulps in (1, 2):
            p = target
            for _ in range(ulps):
                p = np.nextafter(p, np.float32(np.inf))
            a = np.float32(p / np.float32(1 / 448))
            while np.float32(a * np.float32(1 / 448)) < p:
                a = np.nextafter(a, np.float32(np.inf))
            crafted.append(a)
    amax_all = np.concatenate([amax32, np.array(crafted, dtype=np.float32)])
    for inv, label in ((1 / 448, "1/448"), (1 / 6, "1/6")):
        got = ops.pow2_scale(torch.from_numpy(amax_all.astype(np.float64)), inv).numpy()
        check(f"pow2 scale rule of §12.3 (x {label}) equals the float32 bit-pattern rule",
              np.array_equal(got, bit_rule(amax_all, inv)))
    crafted = np.array(crafted, dtype=np.float32)
    log2_rule = 2.0 ** np.ceil(np.log2((crafted * np.float32(1 / 448)).astype(np.float32)))
    n_lower = int(np.sum(log2_rule < bit_rule(crafted, 1 / 448)))
    print(f"info  ceil(log2()) would give a smaller scale on {n_lower}/{crafted.size} crafted cases")

    # Whole round trips: blocks are independent, tail untouched, values on the grid.
    x = torch.from_numpy(rng.standard_normal((3, 192)) * rng.uniform(0.001, 100, (3, 1)))
    y = ops.fp8_e4m3_roundtrip(x, 128)
    blocks = x[:, :128].reshape(3, 2, 64)
    scale = ops.pow2_scale(torch.clamp(blocks.abs().amax(-1, keepdim=True), min=1e-4), 1 / 448)
    on_grid = torch.isin((y[:, :128].reshape(3, 2, 64) / scale).abs(), torch.from_numpy(t8))
    check("fp8_e4m3_roundtrip: nope blocks on the E4M3 grid, rope tail untouched",
          bool(on_grid.all()) and torch.equal(y[:, 128:], x[:, 128:]))
    x = torch.from_numpy(rng.standard_normal((5, 64)))
    y = ops.fp4_e2m1_roundtrip(x)
    scale = ops.pow2_scale(x.reshape(5, 2, 32).abs().amax(-1, keepdim=True), 1 / 6)
    check("fp4_e2m1_roundtrip: values on the E2M1 grid",
          bool(torch.isin((y.reshape(5, 2, 32) / scale).abs(), torch.from_numpy(t4)).all()))
    x32 = x.to(torch.float32)
    check("fp4/fp8 round trips keep float32 dtype and agree with float64",
          ops.fp4_e2m1_roundtrip(x32).dtype == torch.float32
          and torch.equal(ops.fp4_e2m1_roundtrip(x32).double(), ops.fp4_e2m1_roundtrip(x32.double())))


# ---------------------------------------------------------------------------------------------
# Other ops
# ---------------------------------------------------------------------------------------------


def butterfly_hadamard(x):
    y = x.clone()
    n = y.shape[-1]
    h = 1
    while h < n:
        y = y.reshape(*x.shape[:-1], n // (2 * h), 2, h)
        a, b = y[..., 0, :], y[..., 1, :]
        y = torch.stack((a + b, a - b), dim=-2).reshape(x.shape)
        h *= 2
    return y / math.sqrt(n)


def test_ops():
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.standard_normal((4, 128)))
    check("hadamard equals the strided butterfly", torch.allclose(ops.hadamard(x), butterfly_hadamard(x), atol=1e-12))
    check("hadamard is an involution", torch.allclose(ops.hadamard(ops.hadamard(x)), x, atol=1e-12))

    omega = ops.rope_frequencies(64, 160000.0, (16.0, 65536, 32.0, 1.0))
    theta = 160000.0 ** (-2.0 * np.arange(32) / 64)
    check("YaRN ramp: pairs <= 15 keep theta, pairs >= 25 use theta/16 (base 160000)",
          np.allclose(omega[:16], theta[:16], rtol=0, atol=0) and np.allclose(omega[25:], theta[25:] / 16, rtol=1e-15)
          and np.all(omega[16:25] < theta[16:25]) and np.all(omega[16:25] > theta[16:25] / 16))
    x = torch.from_numpy(rng.standard_normal((3, 128)))
    y = ops.rope_tail(x, 77, 64, 160000.0, (16.0, 65536, 32.0, 1.0))
    back = ops.rope_tail(y, 77, 64, 160000.0, (16.0, 65536, 32.0, 1.0), inverse=True)
    pair_norm = lambda t: t[:, 64:].reshape(3, 32, 2).norm(dim=-1)  # noqa: E731
    check("rope_tail: head untouched, pair norms kept, inverse undoes forward",
          torch.equal(y[:, :64], x[:, :64]) and torch.allclose(pair_norm(x), pair_norm(y))
          and torch.allclose(back, x, atol=1e-12))
    x1 = torch.tensor([[0.0] * 62 + [1.0, 0.0]], dtype=torch.float64)
    y1 = ops.rope_tail(x1, 1, 2, 10000.0)
    check("rope_tail: adjacent pair rotation direction (a,b)->(a cos - b sin, a sin + b cos)",
          torch.allclose(y1[0, -2:], torch.tensor([math.cos(1.0), math.sin(1.0)], dtype=torch.float64)))

    z = torch.from_numpy(rng.standard_normal((4, 4)) * 3)
    m = ops.sinkhorn(z, 1e-6, 20)
    check("sinkhorn: rows and columns sum to ~1", torch.allclose(m.sum(0), torch.ones(4, dtype=torch.float64), atol=1e-6)
          and torch.allclose(m.sum(1), torch.ones(4, dtype=torch.float64), atol=1e-3))

    s = torch.tensor([1.0, 3.0, 3.0, 2.0, 3.0], dtype=torch.float64)
    check("topk_lower_index: ties to the lower index, ascending", ops.topk_lower_index(s, 2).tolist() == [1, 2]
          and ops.topk_lower_index(s, 4).tolist() == [1, 2, 3, 4])
    logits = torch.tensor([0.5, 2.0, 2.0, -1.0], dtype=torch.float64)
    sel, w = ops.route(logits, None, None, 2, 1.5, True)
    check("route: descending score, ties to the lower expert id, weights sum to scale",
          sel.tolist() == [1, 2] and abs(float(w.sum()) - 1.5) < 1e-12)
    sel, w = ops.route(logits, torch.tensor([0.0, 0.0, 0.0, 5.0], dtype=torch.float64), None, 2, 1.0, True)
    sc = ops.router_scores(logits)
    check("route: bias selects only, weights use unbiased scores",
          sel.tolist() == [3, 1] and torch.allclose(w, sc[[3, 1]] / sc[[3, 1]].sum()))
    sel, w = ops.route(logits, None, [3, 0, 2], 2, 1.0, False)
    check("route: hash table order, unnormalised", sel.tolist() == [3, 0] and torch.allclose(w, sc[[3, 0]]))
    zsp = torch.tensor([-30.0, -20.0, 0.0, 20.0, 30.0], dtype=torch.float64)
    check("softplus_stable", torch.allclose(ops.softplus_stable(zsp), torch.log1p(torch.exp(zsp)), rtol=1e-9))

    q = torch.from_numpy(rng.standard_normal((3, 8)))
    kv = torch.from_numpy(rng.standard_normal((5, 8)))
    sinks = torch.from_numpy(rng.standard_normal(3))
    logit = torch.cat((q @ kv.T * 0.3, sinks[:, None]), dim=1)
    p = torch.softmax(logit, dim=1)[:, :5]
    check("sink_attention = softmax with a value-less sink column",
          torch.allclose(ops.sink_attention(q, kv, sinks, 0.3), p @ kv, atol=1e-12))


def direct_compressed_row(ratio, c, kvp, sc, d):
    """Pool compressed row c straight from the per-token projections (§6.2, §6.3)."""
    cur = range(c * ratio, (c + 1) * ratio)
    if ratio == 4:
        vals = [kvp[t][d:] for t in cur]
        scores = [sc[t][d:] for t in cur]
        if c > 0:
            prev = range((c - 1) * ratio, c * ratio)
            vals = [kvp[t][:d] for t in prev] + vals
            scores = [sc[t][:d] for t in prev] + scores
    else:
        vals = [kvp[t] for t in cur]
        scores = [sc[t] for t in cur]
    w = torch.softmax(torch.stack(scores), dim=0)
    return (w * torch.stack(vals)).sum(0)


def test_compressor():
    rng = np.random.default_rng(3)
    D, d, n_rot = 32, 128, 64
    for ratio in (4, 8):
        coff = 2 if ratio == 4 else 1
        t = lambda *s: torch.from_numpy(rng.standard_normal(s))  # noqa: E731
        wkv, wg, ape, nw = t(coff * d, D), t(coff * d, D), t(ratio, coff * d), t(d)
        rope = (n_rot, 160000.0, (16.0, 65536, 32.0, 1.0))
        comp = ops.Compressor(ratio, wkv, wg, ape, nw, rope, d - n_rot, False)
        xs = [t(D) for _ in range(5 * ratio + 3)]
        emitted, kvps, scs, ok = [], [], [], True
        for p, x in enumerate(xs):
            kvps.append(wkv @ x)
            scs.append(wg @ x + ape[p % ratio])
            row = comp.push(p, x)
            ok &= (row is not None) == ((p + 1) % ratio == 0)
            if row is not None:
                c = len(emitted)
                pool = direct_compressed_row(ratio, c, kvps, scs, d)
                want = ops.fp8_e4m3_roundtrip(ops.rope_tail(ops.rms_norm(pool, nw), c * ratio, *rope), d - n_rot)
                ok &= torch.allclose(row, want, atol=1e-12, rtol=0)
                emitted.append(row)
        check(f"Compressor ratio {ratio}: streaming frontier equals direct block pooling, "
              f"{len(emitted)} rows", ok and len(emitted) == len(xs) // ratio)


def main():
    torch.set_grad_enabled(False)
    have_golden = test_dequant_golden()
    test_gguf_reader()
    test_rounding()
    test_ops()
    test_compressor()
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed: " + "; ".join(FAILURES))
        return 1
    if not have_golden:
        return 77
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
