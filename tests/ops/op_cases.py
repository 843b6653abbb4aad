"""Writes the per-op test cases of tests/ops: deterministic random inputs and the outputs of the
reference ops (tests/reference/dsv4_ref/ops.py, float64) for each case.

Usage: /usr/bin/python3 tests/ops/op_cases.py OUT_DIR

OUT_DIR/cases.json lists the cases: {name, op, params, arrays: {name: {file, shape}}, tol}.
Arrays are raw little-endian float32 files (integer arrays are stored as float32 values);
inputs are drawn in float32 and widened, so both sides start from identical numbers. `tol` is
the largest normalised MSE the engine may show (0: bit-exact). The C++ side
(ops_vs_reference_test.cpp) runs the CPU backend op of each case and compares.
"""

import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from dsv4_ref import ops  # noqa: E402

F64 = torch.float64


class Writer:
    def __init__(self, out_dir):
        self.out = out_dir
        self.cases = []

    def case(self, name, op, params, arrays, tol):
        entry = {"name": name, "op": op, "params": params, "arrays": {}, "tol": tol}
        for key, value in arrays.items():
            a = np.asarray(value.detach().numpy() if torch.is_tensor(value) else value, dtype=np.float32)
            fname = f"{name}.{key}.f32"
            a.tofile(os.path.join(self.out, fname))
            entry["arrays"][key] = {"file": fname, "shape": list(a.shape)}
        self.cases.append(entry)

    def finish(self):
        with open(os.path.join(self.out, "cases.json"), "w") as f:
            json.dump(self.cases, f, indent=1)


def f32(a):
    """float32-rounded numpy array as a float64 torch tensor (the common starting point)."""
    return torch.from_numpy(np.asarray(a, dtype=np.float32).astype(np.float64))


def yarn_args():
    return (16.0, 65536, 32.0, 1.0)


# ---------------------------------------------------------------------------------------------


def hc_cases(w, rng):
    for i, spread in enumerate([0.1, 3.0, 10.0]):
        z = f32(rng.standard_normal((4, 4)) * spread)
        w.case(f"sinkhorn_{i}", "sinkhorn", {"eps": 1e-6, "iters": 20}, {"z": z, "m": ops.sinkhorn(z, 1e-6, 20)}, 1e-12)

    n, n_hc, d = 5, 4, 64
    X = f32(rng.standard_normal((n, n_hc, d)))
    fn = f32(rng.standard_normal((24, n_hc * d)) / math.sqrt(n_hc * d))
    scale = f32(rng.standard_normal(3) * 0.5)
    base = f32(rng.standard_normal(24))
    ys, posts, ms = [], [], []
    for t in range(n):
        y, post, m = ops.hc_pre(X[t], fn, scale, base, 1e-6, 20)
        ys.append(y); posts.append(post); ms.append(m.reshape(-1))
    w.case("hc_pre", "hc_pre", {"n_hc": n_hc, "n_embd": d},
           {"x": X.reshape(n, -1), "fn": fn, "scale": scale, "base": base, "y": torch.stack(ys),
            "post": torch.stack(posts), "comb": torch.stack(ms)}, 1e-11)

    f = f32(rng.standard_normal((n, d)))
    post = f32(rng.random((n, n_hc)) * 2)
    M = f32(rng.random((n, n_hc, n_hc)))
    out = torch.stack([ops.hc_post(X[t], f[t], post[t], M[t]).reshape(-1) for t in range(n)])
    w.case("hc_post", "hc_post", {"n_hc": n_hc, "n_embd": d},
           {"x": X.reshape(n, -1), "f": f, "post": post, "comb": M.reshape(n, -1), "out": out}, 1e-12)

    fnh = f32(rng.standard_normal((n_hc, n_hc * d)) / math.sqrt(n_hc * d))
    sh = f32(rng.standard_normal(1))
    bh = f32(rng.standard_normal(n_hc) * 0.3)
    h = torch.stack([ops.hc_head(X[t], fnh, sh, bh, 1e-6) for t in range(n)])
    w.case("hc_head", "hc_collapse", {"n_hc": n_hc, "n_embd": d},
           {"x": X.reshape(n, -1), "fn": fnh, "scale": sh, "base": bh, "out": h}, 1e-11)


def rope_cases(w, rng):
    heads, hd, n_rot = 3, 128, 64
    configs = [("plain", 10000.0, None, 0), ("yarn", 160000.0, yarn_args(), 0),
               ("yarn_far", 160000.0, yarn_args(), 100000), ("plain_far", 10000.0, None, 65530)]
    for name, base, yarn, p0 in configs:
        n = 6
        x = f32(rng.standard_normal((n, heads, hd)))
        for inverse in (False, True):
            y = torch.stack([ops.rope_tail(x[t], p0 + t, n_rot, base, yarn, inverse) for t in range(n)])
            params = {"head_dim": hd, "n_rot": n_rot, "base": base, "yarn": yarn is not None, "p0": p0,
                      "inverse": inverse}
            if yarn:
                params.update({"factor": yarn[0], "orig_ctx": yarn[1], "beta_fast": yarn[2], "beta_slow": yarn[3]})
            w.case(f"rope_{name}_{'inv' if inverse else 'fwd'}", "rope_tail", params,
                   {"x": x.reshape(n, -1), "y": y.reshape(n, -1)}, 1e-13)


def fp8_cases(w, rng):
    rows = []
    for s in [1e-3, 0.05, 1.0, 30.0, 1000.0]:
        rows.append(rng.standard_normal(128) * s)
    rows.append(np.zeros(128))
    rows.append(rng.standard_normal(128) * 1e-6)           # amax below the 1e-4 floor
    # Exact midpoints between E4M3 codes at scale 1 (amax 448 -> scale 1) and ties.
    mid = np.array([448.0, 0.5 * (1.0 + 1.125), 0.5 * (1.125 + 1.25), 0.5 * (2 ** -9 + 2 * 2 ** -9),
                    0.5 * (3 * 2 ** -9 + 4 * 2 ** -9), 0.5 * (240 + 256), 0.5 * (416 + 448), -0.5 * (1.0 + 1.125)])
    rows.append(np.resize(mid, 128))
    # amax * (1/448) exactly a power of two, and one float32 ulp above it.
    for amax in [448.0 * 2.0 ** -4, np.nextafter(np.float32(448.0 * 2.0 ** -4), np.float32(1e9))]:
        r = rng.uniform(-1, 1, 128) * float(amax) * 0.9
        r[3] = float(amax)
        rows.append(r)
    x = f32(np.stack(rows))
    y = ops.fp8_e4m3_roundtrip(x, 64)
    w.case("fp8_roundtrip", "fp8_kv_roundtrip", {"n_nope": 64}, {"x": x, "y": y}, 0.0)
    x2 = f32(rng.standard_normal((4, 512)) * 3)
    w.case("fp8_roundtrip_448", "fp8_kv_roundtrip", {"n_nope": 448}, {"x": x2, "y": ops.fp8_e4m3_roundtrip(x2, 448)}, 0.0)


def fp4_cases(w, rng):
    ties = np.array([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, 0.0,
                     0.3, 0.7, 1.1, 1.6, 2.2, 2.9, 3.7, 4.9, 5.5, -6.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0])
    rows = [np.concatenate([ties, ties * 0.5]), np.zeros(64), rng.standard_normal(64) * 1e-30]
    for s in [1e-3, 1.0, 50.0]:
        rows.append(rng.standard_normal(64) * s)
    x = f32(np.stack(rows))
    w.case("fp4_roundtrip", "fp4_roundtrip", {}, {"x": x, "y": ops.fp4_e2m1_roundtrip(x)}, 0.0)


def hadamard_cases(w, rng):
    for n in (64, 128):
        x = f32(rng.standard_normal((5, n)))
        w.case(f"hadamard_{n}", "hadamard", {}, {"x": x, "y": ops.hadamard(x)}, 1e-13)
    # Small integers: the 64-point transform is exact in float32, so the QAT must match bit for bit.
    x = f32(rng.integers(-4, 5, (6, 2 * 64)))
    y = torch.cat([ops.indexer_qat(x[:, :64]), ops.indexer_qat(x[:, 64:])], dim=1)
    w.case("indexer_qat_exact", "indexer_qat", {"head_dim": 64}, {"x": x, "y": y}, 0.0)


def compressor_cases(w, rng):
    # (name, ratio, d, n_rot, fp8_nope, indexer lane, tokens, chunk sizes)
    configs = [("r4_main", 4, 128, 64, 64, False, 41, [1, 3, 7, 30]),
               ("r4_index", 4, 64, 64, None, True, 41, [2, 5, 34]),
               ("r128_main", 128, 128, 64, 64, False, 300, [1, 130, 169])]
    base, yarn = 160000.0, yarn_args()
    for name, R, d, n_rot, nope, qat, n, chunks in configs:
        coff = 2 if R == 4 else 1
        kvp = f32(rng.standard_normal((n, coff * d)))
        sc_raw = f32(rng.standard_normal((n, coff * d)) * 2)
        ape = f32(rng.standard_normal((R, coff * d)) * 0.3)
        norm = f32(1.0 + 0.1 * rng.standard_normal(d))
        dummy = torch.zeros(coff * d, 1, dtype=F64)
        comp = ops.Compressor(R, dummy, dummy, ape, norm, (n_rot, base, yarn), nope, qat)
        # Feed the projections directly: the op under test starts after the two matmuls.
        comp.project = lambda p, x, kvp=kvp, sc_raw=sc_raw, ape=ape, R=R: (kvp[p], sc_raw[p] + ape[p % R])
        rows, states_kv, states_sc = [], [], []
        p = 0
        for c in chunks:
            for _ in range(c):
                r = comp.push(p, None)
                if r is not None:
                    rows.append(r)
                p += 1
            states_kv.append(comp.state_kv.clone())
            states_sc.append(comp.state_score.clone())
        arrays = {"kvp": kvp, "sc": sc_raw, "ape": ape, "norm": norm, "rows": torch.stack(rows),
                  "state_kv": torch.stack(states_kv), "state_score": torch.stack(states_sc)}
        params = {"ratio": R, "width": d, "n_rot": n_rot, "base": base, "factor": yarn[0], "orig_ctx": yarn[1],
                  "beta_fast": yarn[2], "beta_slow": yarn[3], "indexer_qat": qat, "n_nope": nope or 0,
                  "chunks": chunks}
        w.case(f"compressor_{name}", "compressor", params, arrays, 1e-10)


def indexer_cases(w, rng):
    # Ties: small integers and power-of-two weights make every score exact in float32 and float64;
    # duplicated rows give equal scores, resolved towards the lower row index.
    nh, hd, K = 2, 32, 8
    base_rows = rng.integers(-2, 3, (13, hd))
    rows = np.concatenate([base_rows, base_rows, base_rows[:4]])           # 30 rows, many ties
    qi = rng.integers(-2, 3, (6, nh, hd))
    wgt = np.array([[1.0, 2.0], [0.5, 4.0], [1.0, 1.0], [2.0, 0.25], [1.0, 0.0], [8.0, 1.0]])
    p0 = 31                                      # n_vis 8, 8, 8, 8, 9, 9: within the budget, then not
    positions = [p0 + t for t in range(6)]
    scale = 1.0 / math.sqrt(hd * nh)                                      # 1/8: exact
    sel = []
    for t, p in enumerate(positions):
        n_vis = (p + 1) // 4
        if n_vis <= K:
            sel.append(np.full(K, -1))
        else:
            s = ops.indexer_scores(f32(qi[t]), f32(wgt[t] * scale), f32(rows[:n_vis]))
            sel.append(ops.topk_lower_index(s, K).numpy())
    w.case("indexer_ties_budget", "indexer_topk", {"p0": p0, "top_k": K, "n_head": nh, "head_dim": hd, "scale": scale},
           {"qi": f32(qi.reshape(6, -1)), "wgt": f32(wgt), "rows": f32(rows), "sel": np.stack(sel)}, 0.0)

    p0 = 100
    n = 4
    rows = f32(rng.integers(-2, 3, (30, hd)))
    qi = f32(rng.integers(-2, 3, (n, nh * hd)))
    wgt = f32(rng.choice([0.25, 0.5, 1.0, 2.0], (n, nh)))
    sel = []
    for t in range(n):
        n_vis = (p0 + t + 1) // 4                # 25, 25, 25, 26 of the 30 rows
        s = ops.indexer_scores(qi[t].reshape(nh, hd), wgt[t] * scale, rows[:n_vis])
        sel.append(ops.topk_lower_index(s, K).numpy())
    w.case("indexer_ties", "indexer_topk", {"p0": p0, "top_k": K, "n_head": nh, "head_dim": hd, "scale": scale},
           {"qi": qi, "wgt": wgt, "rows": rows, "sel": np.stack(sel)}, 0.0)

    # Random floats, a realistic budget.
    nh, hd, K, n, p0 = 4, 64, 16, 5, 200
    n_rows = (p0 + n) // 4
    rows = f32(rng.standard_normal((n_rows, hd)))
    qi = f32(rng.standard_normal((n, nh * hd)))
    wgt = f32(rng.standard_normal((n, nh)))
    scale = 1.0 / math.sqrt(hd * nh)
    sel = []
    for t in range(n):
        n_vis = (p0 + t + 1) // 4
        s = ops.indexer_scores(qi[t].reshape(nh, hd), wgt[t] * f32(np.float32(scale)), rows[:n_vis])
        sel.append(ops.topk_lower_index(s, K).numpy())
    w.case("indexer_random", "indexer_topk", {"p0": p0, "top_k": K, "n_head": nh, "head_dim": hd, "scale": scale},
           {"qi": qi, "wgt": wgt, "rows": rows, "sel": np.stack(sel)}, 0.0)


def attention_cases(w, rng):
    H, hd = 4, 64
    scale = 1.0 / math.sqrt(hd)
    # (name, ratio, window, p0, n, compressed rows, top_k)
    configs = [("swa_batch", 0, 8, 0, 12, 0, 0), ("swa_ring", 0, 8, 20, 5, 0, 0),
               ("r128", 128, 8, 250, 10, 2, 0), ("r4_topk", 4, 8, 40, 4, 11, 4), ("r4_all", 4, 8, 8, 6, 3, 16)]
    for name, ratio, window, p0, n, n_comp, K in configs:
        kv_all = f32(rng.standard_normal((p0 + n, hd)))
        q = f32(rng.standard_normal((n, H, hd)) * 2)
        sinks = f32(rng.standard_normal(H))
        comp = f32(rng.standard_normal((max(n_comp, 1), hd)))
        cap = window
        ring = torch.zeros(cap, hd, dtype=F64)
        for pos in range(max(0, p0 - cap), p0):
            ring[pos % cap] = kv_all[pos]
        sel = np.full((n, max(K, 1)), -1)
        outs = []
        for t in range(n):
            pos = p0 + t
            keys = [kv_all[j] for j in range(max(0, pos - window + 1), pos + 1)]
            if ratio:
                n_vis = (pos + 1) // ratio
                idx = list(range(n_vis))
                if ratio == 4 and n_vis > K:
                    idx = sorted(rng.choice(n_vis, K, replace=False).tolist())
                    sel[t] = idx
                keys += [comp[c] for c in idx]
            outs.append(ops.sink_attention(q[t], torch.stack(keys), sinks, scale))
        w.case(f"attention_{name}", "sparse_attention",
               {"ratio": ratio, "window": window, "p0": p0, "top_k": K, "n_head": H, "head_dim": hd, "scale": scale},
               {"q": q.reshape(n, -1), "kv": kv_all[p0:], "ring": ring, "comp": comp, "sel": sel,
                "sinks": sinks, "out": torch.stack(outs).reshape(n, -1)}, 1e-12)


def router_cases(w, rng):
    E, k, n = 16, 4, 6
    logits = f32(rng.standard_normal((n, E)) * 3)
    bias = f32(rng.standard_normal(E) * 0.1)
    def run(lg, b, table, ids, scale, normalize):
        sels, wts = [], []
        for t in range(lg.shape[0]):
            row = None if table is None else table[ids[t]]
            s, wt = ops.route(lg[t], b, row, k, scale, normalize)
            sels.append(s.numpy()); wts.append(wt)
        return np.stack(sels), torch.stack(wts)
    sel, wt = run(logits, bias, None, None, 1.5, True)
    w.case("route_learned", "router", {"k": k, "scale": 1.5, "normalize": True, "hash": False},
           {"logits": logits, "bias": bias, "sel": sel, "weights": wt}, 1e-12)
    # Exact ties in score + bias (zero bias, repeated logits): the lower expert id wins.
    tied = f32(np.tile(np.array([0.5, 1.0, 1.0, -1.0, 1.0, 0.5, 2.0, 2.0]), (n, 2)))
    sel, wt = run(tied, None, None, None, 2.5, True)
    w.case("route_ties", "router", {"k": k, "scale": 2.5, "normalize": True, "hash": False},
           {"logits": tied, "sel": sel, "weights": wt}, 1e-12)
    sel, wt = run(logits, None, None, None, 1.0, False)
    w.case("route_unnormalised", "router", {"k": k, "scale": 1.0, "normalize": False, "hash": False},
           {"logits": logits, "sel": sel, "weights": wt}, 1e-12)
    table = np.stack([rng.permutation(E)[:k] for _ in range(10)])
    ids = rng.integers(0, 10, n)
    sel, wt = run(logits, bias, table, ids, 1.5, True)
    w.case("route_hash", "router", {"k": k, "scale": 1.5, "normalize": True, "hash": True},
           {"logits": logits, "table": table, "ids": ids, "sel": sel, "weights": wt}, 1e-12)


def misc_cases(w, rng):
    g = f32(rng.standard_normal((3, 64)) * 8)
    u = f32(rng.standard_normal((3, 64)) * 8)
    w.case("swiglu", "swiglu", {"clamp": 10.0}, {"g": g, "u": u, "out": ops.swiglu_clamped(g, u, 10.0)}, 1e-12)
    x = f32(rng.standard_normal((4, 256)) * 3)
    wn = f32(1 + 0.1 * rng.standard_normal(256))
    w.case("rms_norm", "rms_norm", {"group": 256}, {"x": x, "w": wn, "out": ops.rms_norm(x, wn)}, 1e-13)
    y = ops.rms_norm(x.reshape(4, 2, 128)).reshape(4, 256)
    w.case("rms_norm_heads", "rms_norm", {"group": 128}, {"x": x, "out": y}, 1e-13)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240607)
    w = Writer(out)
    for fn in (hc_cases, rope_cases, fp8_cases, fp4_cases, hadamard_cases, compressor_cases, indexer_cases,
               attention_cases, router_cases, misc_cases):
        fn(w, rng)
    w.finish()


if __name__ == "__main__":
    main()
