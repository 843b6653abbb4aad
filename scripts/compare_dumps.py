"""Compares two folders of named intermediates (engine vs reference) and points at the first
divergence.

    /usr/bin/python3 scripts/compare_dumps.py ENGINE_DIR REFERENCE_DIR N_POSITIONS [--threshold T]

Both folders come from `eval-logits --dump NAMES --dump-dir DIR` (docs/reference.md). Names are
listed in forward order (embd, then each layer's steps, the MTP block, result_norm). For each
name: the normalised MSE, the largest absolute difference and the first position whose row
differs by more than T (relative squared error, default 1e-9). The first name with a bad row
is where to look; a single element off by exactly one FP8 / FP4 step in a row whose inputs
agree is a rounding-boundary flip (docs/engine.md), anything else is a bug.
"""

import argparse
import os
import re

import numpy as np

ORDER = ["hc_attn_in", "attn_norm", "q_lora", "q", "kv", "index_topk", "attn_o", "attn_o_lora",
         "attn_out", "hc_ffn_in", "ffn_norm", "moe_sel", "moe_weights", "moe_swiglu", "shexp_swiglu",
         "ffn_out", "out", "comp_rows", "index_rows"]


def sort_key(name):
    m = re.match(r"blk\.(\d+)\.(.*)", name)
    if m:
        return (1, int(m.group(1)), ORDER.index(m.group(2)) if m.group(2) in ORDER else 99)
    if name.startswith("mtp."):
        rest = name[4:]
        return (2, 0, ORDER.index(rest) if rest in ORDER else 99)
    return (0 if name == "embd" else 3, 0, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("engine")
    ap.add_argument("reference")
    ap.add_argument("positions", type=int)
    ap.add_argument("--threshold", type=float, default=1e-9)
    a = ap.parse_args()
    names = sorted((f[:-4] for f in os.listdir(a.engine) if f.endswith(".f32")), key=sort_key)
    for n in names:
        ref_path = os.path.join(a.reference, n + ".f32")
        if not os.path.exists(ref_path):
            print(f"{n:26s} missing in {a.reference}")
            continue
        x = np.fromfile(os.path.join(a.engine, n + ".f32"), dtype=np.float32).astype(np.float64)
        y = np.fromfile(ref_path, dtype=np.float32).astype(np.float64)
        if x.size != y.size:
            print(f"{n:26s} size {x.size} vs {y.size}")
            continue
        total = ((x - y) ** 2).sum() / max((y ** 2).sum(), 1e-30)
        rows = a.positions - 1 if n.startswith("mtp.") else a.positions
        first = ""
        if not n.endswith("_rows") and rows > 0 and x.size % rows == 0:
            xr, yr = x.reshape(rows, -1), y.reshape(rows, -1)
            per_row = ((xr - yr) ** 2).sum(1) / np.maximum((yr ** 2).sum(1), 1e-30)
            bad = np.where(per_row > a.threshold)[0]
            first = f"first bad row {bad[0]}" if len(bad) else "all rows agree"
        maxabs = np.abs(x - y).max() if x.size else 0.0
        print(f"{n:26s} nmse {total:.3e}  max-abs {maxabs:.3e}  {first}")


if __name__ == "__main__":
    main()
