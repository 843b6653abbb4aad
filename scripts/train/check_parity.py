"""The trainer's batched graph equals the token-by-token reference.

Runs one sequence through tests/reference (dsv4_ref, the definition) and through v4_model.V4
(the trainer's batched, differentiable formulation) in float64 on the same GGUF, with the FP8
and FP4 round trips on, and compares the main and MTP logits over the tokens of the sequence
(the trainer's vocabulary subset). The sequence must be long enough for ratio-128 rows and for
the indexer to select (more visible rows than top_k), which the default length ensures for the
tiny shapes.

    /usr/bin/python3 scripts/train/check_parity.py MODEL.gguf [--n-tokens 300] [--seed 1]
    /usr/bin/python3 scripts/train/check_parity.py --magnetar build/bin/magnetar

With --magnetar the model is a `tiny-mtp` file that the binary generates into a temporary
directory (CTest `train_model_parity`).

Exit status 0 when the relative error is within tolerance, 1 otherwise.
"""

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from dsv4_ref.model import Model, Options  # noqa: E402

import gguf_io  # noqa: E402
import v4_model  # noqa: E402


def reference(path, ids):
    model = Model(path, Options(dtype=torch.float64))
    finals, heads = [], []
    for p, tok in enumerate(ids):
        X, hn = model.forward_token(tok, p)
        finals.append(X)
        heads.append(hn)
    logits = model.logits(torch.stack(heads))
    mtp = None
    if model.has_mtp:
        rows = [model.mtp_token(finals[p], ids[p + 1], p)[1] for p in range(len(ids) - 1)]
        mtp = model.logits(torch.stack(rows))
    return logits, mtp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("--magnetar", help="generate a tiny-mtp model with this binary")
    ap.add_argument("--n-tokens", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-9, help="max relative error (float64)")
    args = ap.parse_args()
    if (args.model is None) == (args.magnetar is None):
        ap.error("give MODEL.gguf or --magnetar BIN")
    if args.magnetar:
        with tempfile.TemporaryDirectory() as tmp:
            args.model = os.path.join(tmp, "tiny-mtp.gguf")
            subprocess.run([args.magnetar, "gen-model", "--preset", "tiny-mtp", "-q", "-o",
                            args.model], check=True)
            return check(args)
    return check(args)


def check(args):
    _, hp, w = gguf_io.load(args.model, torch.float64)
    rng = np.random.default_rng(args.seed)
    # Token ids from a small pool, so the subset is small and ids repeat (hash routing).
    pool = rng.choice(hp.n_vocab, size=64, replace=False)
    ids = [int(t) for t in rng.choice(pool, size=args.n_tokens)]
    vocab = torch.tensor(sorted(set(ids)), dtype=torch.long)
    local = torch.searchsorted(vocab, torch.tensor(ids))[None, :]

    w["emb"] = w.pop("token_embd.weight")[vocab]
    w["out"] = w.pop("output.weight")[vocab]
    model = v4_model.V4(hp, w, vocab, args.n_tokens, torch.float64)
    with torch.no_grad():
        hn, hm = model.forward(local, torch.tensor(ids)[None, :])
        got = model.logits_used(hn)[0]
        got_mtp = None if hm is None else model.logits_used(hm)[0]
        n_sparse = sum(1 for p in range(args.n_tokens) if (p + 1) // 4 > hp.idx_topk)

    want, want_mtp = reference(args.model, ids)
    ok = True
    for name, g, r in (("logits", got, want), ("mtp", got_mtp, want_mtp)):
        if r is None:
            continue
        r = r[:, vocab]
        err = float((g - r).abs().max() / r.abs().max())
        fine = err <= args.tol
        ok &= fine
        print(f"{name}: {tuple(g.shape)}, max relative error {err:.3g} "
              f"({'ok' if fine else 'FAIL'}, tolerance {args.tol:g})")
    print(f"{args.n_tokens} tokens, {n_sparse} positions with indexer selection, "
          f"{args.n_tokens // 128} ratio-128 rows")
    if n_sparse == 0 or args.n_tokens < 256:
        print("the sequence is too short to exercise the indexer and ratio-128 rows")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
