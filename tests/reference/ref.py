#!/usr/bin/python3
"""Command-line front end of the DeepSeek V4 / V4.1 PyTorch reference.

Owns: argument parsing, dispatching on general.architecture (`deepseek4` -> dsv4_ref,
`deepseek41` -> dsv41_ref), running a token sequence through the model, and writing logits,
MTP draft logits, named intermediates (--dump) and activation statistics. The interface is
described in docs/reference.md; the implementation notes are in tests/reference/README.md.

Subcommands:
  eval-logits       logits of the last (or every) position, optional dumps and MTP drafts
  activation-stats  per-layer RMS of the HC state and of each sublayer output, as JSON
"""

import argparse
import fnmatch
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dsv4_ref.gguf import GGUFError, GGUFFile  # noqa: E402
from dsv4_ref.model import Model, Options  # noqa: E402
import dsv41_ref.model as v41  # noqa: E402

def load_tokens(path):
    with open(path, "r", encoding="utf-8") as f:
        ids = json.load(f)
    if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
        raise SystemExit(f"{path}: expected a non-empty JSON array of token ids")
    return ids


def write_f32(path, array):
    np.ascontiguousarray(np.asarray(array, dtype="<f4")).tofile(path)


class DumpRecorder:
    """Collects the rows of the requested named intermediates (exact names or glob patterns)."""

    def __init__(self, patterns):
        self.patterns = patterns
        self.rows = {}
        self._wanted = {}

    def wanted(self, name):
        if name not in self._wanted:
            self._wanted[name] = any(fnmatch.fnmatchcase(name, p) for p in self.patterns)
        return self._wanted[name]

    def __call__(self, name, value):
        if self.wanted(name):
            self.rows.setdefault(name, []).append(value.detach().to(torch.float64).numpy().copy())


class StatsRecorder:
    """Accumulates sum of squares, count and max |x| per name; forwards to another recorder."""

    def __init__(self, inner=None):
        self.inner = inner
        self.stats = {}

    def __call__(self, name, value):
        v = value.detach().to(torch.float64)
        s = self.stats.setdefault(name, [0.0, 0, 0.0, math.inf, 0.0])
        rms_row = math.sqrt(float((v * v).mean())) if v.numel() else 0.0
        s[0] += float((v * v).sum())
        s[1] += v.numel()
        s[2] = max(s[2], float(v.abs().max())) if v.numel() else s[2]
        s[3] = min(s[3], rms_row)
        s[4] = max(s[4], rms_row)
        if self.inner is not None:
            self.inner(name, value)

    def summary(self, name):
        s = self.stats.get(name)
        if s is None or s[1] == 0:
            return None
        return {"rms": math.sqrt(s[0] / s[1]), "max_abs": s[2], "min_row_rms": s[3], "max_row_rms": s[4]}


def model_arch(path):
    return GGUFFile(path).metadata.get("general.architecture")


def make_model(args):
    if model_arch(args.model) == v41.ARCH:
        if args.dtype == "float64":
            raise ValueError("--dtype float64: the deepseek41 path computes with the spec's "
                             "fp32/bf16 numerics only")
        opt = v41.Options(official_index_k=args.official_index_k, window_qdq=not args.no_fp8,
                          kv_qdq=not args.no_fp4)
        return v41.Model(args.model, opt)
    if args.official_index_k:
        raise ValueError("--official-index-k applies to deepseek41 models only")
    dtype = torch.float32 if args.dtype == "float32" else torch.float64
    opt = Options(dtype=dtype, fp8=not getattr(args, "no_fp8", False), fp4=not getattr(args, "no_fp4", False))
    return Model(args.model, opt)


def is_v41(model):
    return isinstance(model, v41.Model)


def run_sequence_v41(model, ids, all_positions, want_dspark=False):
    """The deepseek41 backbone over ids, token by token. Returns (logits [n_out, V] float64,
    DSpark draft logits [n-1, B_d, V] or None, DSpark confidence logits [n-1, B_d] or None).
    Draft row P is the draft block after position P with the next prompt token ids[P+1] as the
    main model's token, at temperature 0 (v41.md §3.10)."""
    if want_dspark and model.hp.n_mtp == 0:
        raise ValueError("the model has no DSpark stages (deepseek41.nextn_predict_layers = 0)")
    heads, drafts, confs = [], [], []
    for p, tok in enumerate(ids):
        h = model.forward_token(tok, p)
        if all_positions or p == len(ids) - 1:
            heads.append(h)
        if want_dspark and p + 1 < len(ids):
            _, lg, conf = model.draft(ids[p + 1], p)
            drafts.append(lg)
            confs.append(conf)
    logits = model.logits(torch.stack(heads)).to(torch.float64).numpy()
    if not want_dspark:
        return logits, None, None
    B, V = model.hp.dspark_block, model.hp.n_vocab
    d = torch.stack(drafts).numpy() if drafts else np.zeros((0, B, V))
    c = torch.stack(confs).numpy() if confs else np.zeros((0, B))
    return logits, d, c


def run_sequence(model, ids, all_positions, want_mtp):
    """Runs the main model (and the MTP block when asked) over ids, token by token.

    Returns (logits [n_out, V] float64 numpy, mtp_logits [n-1, V] or None).
    """
    bad = [t for t in ids if not 0 <= t < model.hp.n_vocab]
    if bad:
        raise ValueError(f"token id {bad[0]} is outside the vocabulary [0, {model.hp.n_vocab})")
    head_inputs = []
    finals = []
    for p, tok in enumerate(ids):
        X, hn = model.forward_token(tok, p)
        if all_positions or p == len(ids) - 1:
            head_inputs.append(hn)
        if want_mtp:
            finals.append(X)
    logits = model.logits(torch.stack(head_inputs))
    mtp_logits = None
    if want_mtp:
        # §12.4: row p drafts t_{p+2} from the main final HC state at p and the embedding of
        # t_{p+1}, at attention position p; the MTP window fills as p advances (§12.5).
        mtp_inputs = []
        for p in range(len(ids) - 1):
            _, hn = model.mtp_token(finals[p], ids[p + 1], p)
            mtp_inputs.append(hn)
        if mtp_inputs:
            mtp_logits = model.logits(torch.stack(mtp_inputs))
        else:
            mtp_logits = torch.zeros(0, model.hp.n_vocab, dtype=model.opt.dtype)
    to_np = lambda t: None if t is None else t.detach().to(torch.float64).numpy()  # noqa: E731
    return to_np(logits), to_np(mtp_logits)


def layer_names(model):
    names = [f"blk.{il}." for il in range(model.hp.n_layer)]
    if not is_v41(model) and model.has_mtp:
        names.append("mtp.")
    return names


def print_verbose_stats(model, stats, elapsed, n_tokens):
    kind = "deepseek41, fp32/bf16" if is_v41(model) else model.opt.dtype
    print(f"reference: {n_tokens} tokens in {elapsed:.2f} s ({kind})")
    for name in layer_names(model):
        row = []
        for key in ("hc_attn_in", "attn_out", "hc_ffn_in", "ffn_out", "out"):
            s = stats.summary(name + key)
            if s is not None:
                row.append(f"{key} {s['rms']:.4g}")
        if row:
            print(f"  {name:<8} rms: " + ", ".join(row))
    s = stats.summary("result_norm")
    if s is not None:
        print(f"  result_norm rms {s['rms']:.4g}")


def cmd_eval_logits(args):
    ids = load_tokens(args.tokens)
    model = make_model(args)
    if args.mtp_out and not is_v41(model) and not model.has_mtp:
        raise SystemExit(f"{args.model}: --mtp-out given but the model has no MTP block (mtp.0.*)")
    patterns = [n for n in (args.dump.split(",") if args.dump else []) if n]
    if patterns and not args.dump_dir:
        raise SystemExit("--dump needs --dump-dir")
    dumps = DumpRecorder(patterns)
    stats = StatsRecorder(dumps) if args.verbose else None
    model.recorder = stats if stats is not None else dumps

    t0 = time.time()
    dspark = None
    if is_v41(model):
        if args.mtp_out:
            raise SystemExit(f"{args.model}: --mtp-out is the deepseek4 MTP block; use --dspark-out")
        logits, d_logits, d_conf = run_sequence_v41(model, ids, args.all_positions,
                                                    bool(args.dspark_out or args.dspark_conf))
        dspark = (d_logits, d_conf)
        mtp_logits = None
    else:
        if args.dspark_out or args.dspark_conf:
            raise SystemExit("--dspark-out / --dspark-conf apply to deepseek41 models only")
        logits, mtp_logits = run_sequence(model, ids, args.all_positions, bool(args.mtp_out))
    elapsed = time.time() - t0

    write_f32(args.out, logits)
    if args.mtp_out:
        write_f32(args.mtp_out, mtp_logits)
    if dspark is not None and args.dspark_out:
        write_f32(args.dspark_out, dspark[0])
    if dspark is not None and args.dspark_conf:
        write_f32(args.dspark_conf, dspark[1])
    if patterns:
        os.makedirs(args.dump_dir, exist_ok=True)
        # Final cache states: every compressed row of the layer, [n_rows, width].
        if is_v41(model):
            for il, (comp, index) in model.final_caches().items():
                for key, rows in (("comp_rows", comp), ("index_rows", index)):
                    if dumps.wanted(f"blk.{il}.{key}"):
                        dumps.rows[f"blk.{il}.{key}"] = rows.to(torch.float64).numpy()
        else:
            for il, st in enumerate(model.layers):
                ratio = model.hp.ratio(il)
                states = {"comp_rows": (st.comp_rows, model.hp.n_head_dim) if ratio != 0 else None,
                          "index_rows": (st.index_rows, model.hp.n_idx_dim) if ratio == 4 else None}
                for key, state in states.items():
                    name = f"blk.{il}.{key}"
                    if state is not None and dumps.wanted(name):
                        rows, width = state
                        dumps.rows[name] = [r.to(torch.float64).numpy() for r in rows] or np.zeros((0, width))
        for p in patterns:
            if not any(fnmatch.fnmatchcase(n, p) for n in dumps.rows):
                raise SystemExit(f"--dump {p}: no such intermediate in this model")
        for name, rows in dumps.rows.items():
            arr = np.stack(rows) if isinstance(rows, list) else rows
            write_f32(os.path.join(args.dump_dir, name + ".f32"), arr)
    if args.verbose:
        print_verbose_stats(model, stats, elapsed, len(ids))
    return 0


def cmd_activation_stats(args):
    ids = load_tokens(args.tokens)
    model = make_model(args)
    stats = StatsRecorder()
    model.recorder = stats
    t0 = time.time()
    if is_v41(model):
        run_sequence_v41(model, ids, False)
        mtp_logits = None
    else:
        _, mtp_logits = run_sequence(model, ids, False, model.has_mtp)
    elapsed = time.time() - t0
    layers = []
    for name in layer_names(model):
        entry = {"layer": name.rstrip(".")}
        for key in ("hc_attn_in", "attn_norm", "attn_out", "hc_ffn_in", "ffn_norm", "ffn_out", "out"):
            entry[key] = stats.summary(name + key)
        layers.append(entry)
    out = {
        "model": os.path.basename(args.model),
        "dtype": "fp32/bf16" if is_v41(model) else (args.dtype or "float64"),
        "n_tokens": len(ids),
        "seconds": round(elapsed, 3),
        "embd": stats.summary("embd"),
        "layers": layers,
        "result_norm": stats.summary("result_norm"),
    }
    finite = all(
        v is None or all(math.isfinite(x) for x in v.values())
        for e in layers for k, v in e.items() if k != "layer")
    out["all_finite"] = finite and (mtp_logits is None or bool(np.isfinite(mtp_logits).all()))
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ref.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("-m", "--model", required=True, help="GGUF file")
        p.add_argument("--tokens", required=True, help="JSON array of token ids (positions from 0)")
        p.add_argument("--dtype", choices=("float64", "float32"), default=None,
                       help="compute precision of the deepseek4 path (default float64); the "
                            "deepseek41 path always uses the spec's fp32/bf16 numerics")
        p.add_argument("--no-fp8", action="store_true",
                       help="skip the FP8 KV round trip (deepseek41: the window-row FP8 QDQ)")
        p.add_argument("--no-fp4", action="store_true",
                       help="skip the indexer FP4 round trip (deepseek41: the FP4 QDQ of "
                            "compressed rows, index keys and index queries)")
        p.add_argument("--official-index-k", action="store_true",
                       help="deepseek41: official-compatible index-key publication (v41.md §9.2)")
        p.add_argument("--quiet", action="store_true", help="no diagnostics on stderr")
        p.add_argument("--verbose", action="store_true", help="print timing and per-layer RMS on stdout")

    ev = sub.add_parser("eval-logits", help="write logits (raw float32 [n_positions, n_vocab])")
    common(ev)
    ev.add_argument("--out", required=True, help="logits output file (raw little-endian float32)")
    ev.add_argument("--all-positions", action="store_true", help="logits of every position, not only the last")
    ev.add_argument("--dump", default="", help="comma-separated intermediate names (glob patterns allowed)")
    ev.add_argument("--dump-dir", default="", help="directory for NAME.f32 dump files")
    ev.add_argument("--mtp-out", default="", help="MTP draft logits output [n_positions-1, n_vocab]")
    ev.add_argument("--dspark-out", default="",
                    help="deepseek41: DSpark draft logits [n_positions-1, block_size, n_vocab]")
    ev.add_argument("--dspark-conf", default="",
                    help="deepseek41: DSpark confidence logits [n_positions-1, block_size]")
    ev.set_defaults(func=cmd_eval_logits)

    st = sub.add_parser("activation-stats", help="per-layer activation RMS as JSON on stdout")
    common(st)
    st.set_defaults(func=cmd_activation_stats)

    args = ap.parse_args(argv)
    torch.set_grad_enabled(False)
    try:
        return args.func(args)
    except (OSError, ValueError, KeyError, GGUFError) as e:
        if not args.quiet:
            print(f"ref.py: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
