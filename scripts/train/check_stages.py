"""The recipe's two stages run end to end on a small corpus.

A corpus at --scale 0.005, rendered by `magnetar render`, a generated tiny-mtp template, then
train.py: a first stage of 2 steps over prose / chat / agent (sequences of 256 tokens) and a
second stage of 2 steps from its output (--init) with the coding kind added. Checks that the
first stage's vocabulary is the token files of its kinds only, that the second keeps those rows
as the first stage left them in the file and adds the coding kind's, that the output files load
in the engine's reader, and that the losses are finite.

    /usr/bin/python3 scripts/train/check_stages.py --magnetar build/bin/magnetar

Exit status 0 when every check holds (CTest `train_two_stages`), 1 otherwise.
"""

import argparse
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gguf_io  # noqa: E402


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check_stages: {' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return r


def ids_of(paths):
    return np.unique(np.concatenate([np.fromfile(p, dtype="<i4") for p in paths]))


def rows(path):
    w = gguf_io.load(path, torch.float32)[2]
    emb = w["token_embd.weight"]
    return emb, np.flatnonzero(emb.abs().sum(dim=1).numpy() != 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--magnetar", required=True, help="the magnetar binary")
    args = ap.parse_args()
    py = sys.executable
    failures = []
    with tempfile.TemporaryDirectory() as d:
        run([py, os.path.join(HERE, "corpus.py"), "--out", d, "--scale", "0.005"])
        for f in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
            run([args.magnetar, "render", "-q", "-f", f, "-o", f[:-len(".jsonl")] + ".tokens"])
        template = os.path.join(d, "template.gguf")
        run([args.magnetar, "gen-model", "--preset", "tiny-mtp", "--weights", "f32", "--seed",
             "1", "-q", "-o", template])
        common = ["--corpus", d, "--template", template, "--ctx", "256", "--batch", "1",
                  "--steps", "2", "--warmup", "1", "--eval-every", "2", "--eval-seqs", "1"]
        s1, s2 = os.path.join(d, "stage1.gguf"), os.path.join(d, "stage2.gguf")
        log1, log2 = os.path.join(d, "s1.jsonl"), os.path.join(d, "s2.jsonl")
        run([py, os.path.join(HERE, "train.py"), *common, "--out", s1, "--log", log1,
             "--mix", "prose=0.3,chat=0.3,agent=0.4"])
        run([py, os.path.join(HERE, "train.py"), *common, "--out", s2, "--log", log2,
             "--init", s1, "--lr", "1e-3", "--mix", "prose=0.2,chat=0.2,agent=0.2,coding=0.4"])

        first = ids_of([p for k in ("prose", "chat", "agent")
                        for p in glob.glob(os.path.join(d, f"{k}*.tokens"))])
        second = np.union1d(first, ids_of(glob.glob(os.path.join(d, "coding*.tokens"))))
        emb1, rows1 = rows(s1)
        emb2, rows2 = rows(s2)
        if not np.array_equal(rows1, first):
            failures.append(f"stage 1 trained {rows1.size} rows, its kinds use {first.size}")
        if not np.array_equal(rows2, second):
            failures.append(f"stage 2 has {rows2.size} rows, the four kinds use {second.size}")
        if second.size <= first.size:
            failures.append("the coding kind adds no token")
        # Two more steps move the kept rows, but they start from stage 1's values: their
        # difference is an optimiser step, far below the rows' own size.
        kept = torch.from_numpy(first.astype(np.int64))
        drift = float((emb2[kept] - emb1[kept]).norm() / emb1[kept].norm())
        if not drift < 0.2:
            failures.append(f"stage 2's kept rows moved by {drift:.3f} of their norm")
        for log in (log1, log2):
            for line in open(log):
                r = json.loads(line)
                if not math.isfinite(r["main"]):
                    failures.append(f"{os.path.basename(log)} step {r['step']}: loss {r['main']}")
        last = json.loads(open(log2).read().splitlines()[-1])
        if "coding" not in last.get("heldout", {}):
            failures.append("stage 2 did not evaluate the coding split")
        for f in (s1, s2):
            r = subprocess.run([args.magnetar, "inspect", f], capture_output=True, text=True)
            if r.returncode != 0:
                failures.append(f"magnetar inspect {os.path.basename(f)}: {r.stderr.strip()}")
    for f in failures:
        print("check_stages: " + f, file=sys.stderr)
    print(f"check_stages: {'ok' if not failures else 'FAILED'}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
