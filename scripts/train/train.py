"""Trains a tiny DeepSeek V4 model on the project's own corpus.

Owns: the training recipe - data (token files written by `magnetar render`, packed into
sequences that start at a document, drawn per kind by the mix), the vocabulary subset, initialisation from a generated
template GGUF of the target shape, the losses (main next-token cross entropy over the full
vocabulary, the MTP block's next-next-token loss, the indexer's distillation loss), AdamW
with warm-up and cosine decay, the bias balancing of learned routing, periodic held-out
evaluation, the progress bar, the loss-curve SVG and the output GGUF.

Does not own: the graph (v4_model.py), GGUF reading / writing (gguf_io.py) or the corpus
(corpus.py). The recipe in README.md is the command that made the shipped model.
"""

import argparse
import glob
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OPENBLAS_DIR = "/usr/lib/x86_64-linux-gnu/openblas-pthread"


def use_openblas():
    """Debian's torch links the reference BLAS unless the system default is switched; the
    trainer loads OpenBLAS (package libopenblas0-pthread) for itself when it is installed,
    about ten times faster on the matrix products, without changing the system default."""
    # Idle OpenMP threads sleep instead of spinning: torch's OpenMP pool and OpenBLAS's own
    # threads take turns on the same cores (28 % more tokens per second on 2 cores).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if os.environ.get("MAGNETAR_TRAIN_REEXEC") or not os.path.exists(OPENBLAS_DIR):
        return
    env = dict(os.environ, MAGNETAR_TRAIN_REEXEC="1")
    env["LD_LIBRARY_PATH"] = OPENBLAS_DIR + (":" + env["LD_LIBRARY_PATH"]
                                             if env.get("LD_LIBRARY_PATH") else "")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


use_openblas()

sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gguf_io  # noqa: E402
import v4_model  # noqa: E402

KINDS = ("prose", "chat", "agent", "coding")
# Agent transcripts are about a third of the corpus' tokens, but the tool decision is one or
# two tokens in a transcript of about 600, so they get more than half of the sequences. The
# coding transcripts (the contract of `magnetar agent`, about 1,500 tokens each) are the
# second stage's (--init).
DEFAULT_MIX = "prose=0.25,chat=0.2,agent=0.55"

# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def read_tokens(path):
    a = np.fromfile(path, dtype="<i4")
    if a.size == 0:
        raise ValueError(f"{path}: no tokens")
    return a


def doc_starts(stream, bos):
    starts = np.flatnonzero(stream == bos)
    if starts.size == 0 or starts[0] != 0:
        raise ValueError("a token file must start with BOS and hold BOS-led documents")
    return starts


def pack(stream, bos, n_ctx):
    """Sequence starts: every sequence begins at a document; the document a sequence cuts is
    where the next one begins (or, for a document longer than n_ctx, its continuation)."""
    starts = doc_starts(stream, bos)
    out, s = [], 0
    while s + n_ctx <= stream.size:
        out.append(s)
        cut = starts[np.searchsorted(starts, s + n_ctx, side="right") - 1]
        s = int(cut) if cut > s else s + n_ctx
    return np.asarray(out, dtype=np.int64)


class Data:
    def __init__(self, corpus, bos, n_ctx, kinds):
        self.kinds = [k for k in KINDS if k in kinds]
        self.train, self.heldout = {}, {}
        for kind in self.kinds:
            self.train[kind] = read_tokens(os.path.join(corpus, f"{kind}.train.tokens"))
            self.heldout[kind] = read_tokens(os.path.join(corpus, f"{kind}.heldout.tokens"))
        # The vocabulary: every token file of the kinds trained (agent_prompts.* included).
        extra = sorted(p for k in self.kinds for p in glob.glob(os.path.join(corpus, f"{k}*.tokens")))
        ids = np.concatenate([read_tokens(p) for p in extra])
        self.vocab = np.unique(ids)
        self.n_ctx = n_ctx
        self.seqs = {k: pack(self.train[k], bos, n_ctx) for k in self.kinds}
        self.eval_seqs = {k: pack(self.heldout[k], bos, n_ctx) for k in self.kinds}
        self.n_train_tokens = sum(a.size for a in self.train.values())
        for k in self.kinds:
            if self.seqs[k].size == 0:
                raise ValueError(f"{k}.train.tokens is shorter than one sequence of {n_ctx}")

    def batch(self, items, source):
        return np.stack([source[k][s:s + self.n_ctx] for k, s in items])


class Sampler:
    """Training order: each batch slot draws a kind with the mix's probability, then that
    kind's next sequence in its own seeded permutation (a fresh permutation once a kind's
    sequences are used up), so a kind's share of the steps is set by the mix, not by its size."""

    def __init__(self, seqs, mix, rng):
        self.seqs, self.rng = seqs, rng
        self.kinds = [k for k in KINDS if k in mix]
        p = np.array([mix[k] for k in self.kinds], dtype=np.float64)
        self.p = p / p.sum()
        self.order = {k: rng.permutation(seqs[k].size) for k in self.kinds}
        self.cursor = {k: 0 for k in self.kinds}

    def next(self):
        k = self.kinds[int(self.rng.choice(len(self.kinds), p=self.p))]
        if self.cursor[k] == self.order[k].size:
            self.order[k], self.cursor[k] = self.rng.permutation(self.seqs[k].size), 0
        s = int(self.seqs[k][self.order[k][self.cursor[k]]])
        self.cursor[k] += 1
        return k, s


def parse_mix(text):
    """'prose=0.3,chat=0.3,agent=0.4' -> {kind: weight}; each kind named at most once, weights
    > 0; the kinds named are the ones trained."""
    mix = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in KINDS or name in mix:
            raise argparse.ArgumentTypeError(
                f"--mix: expected KIND=W,... with each KIND one of {', '.join(KINDS)}, "
                f"got {text!r}")
        try:
            mix[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--mix: {value!r} is not a number") from None
        if not (mix[name] > 0 and math.isfinite(mix[name])):
            raise argparse.ArgumentTypeError(f"--mix: the weight of {name} must be > 0")
    return mix


# ---------------------------------------------------------------------------------------------
# Model set-up
# ---------------------------------------------------------------------------------------------

FROZEN = ("ffn_gate_tid2eid.weight", "exp_probs_b.bias")


def trained_rows(w):
    """The token ids a trained file has embedding rows for (the others are all zero)."""
    return np.flatnonzero(w["token_embd.weight"].abs().sum(dim=1).numpy() != 0)


def build(hp, w, vocab, n_ctx, init_std, start=None):
    """The trainable weights: every float tensor of the template, with the embedding and the
    output head reduced to the vocabulary subset; the hash tables and the routing biases are
    not trained by gradient. `start` (the tensors of a trained file of the same shape) gives
    the initial values instead, its trained rows included; rows it lacks start with random
    embeddings of its rows' scale and zero output rows."""
    v = torch.from_numpy(vocab.astype(np.int64))
    g = torch.Generator().manual_seed(1234)
    w["emb"] = torch.randn(len(vocab), hp.n_embd, generator=g) * init_std
    w["out"] = torch.randn(len(vocab), hp.n_embd, generator=g) * (1.0 / math.sqrt(hp.n_embd))
    if start is not None:
        for name, t in w.items():
            if name in ("emb", "out"):
                continue
            if name not in start or tuple(start[name].shape) != tuple(t.shape):
                raise ValueError(f"--init: tensor {name} is missing or of another shape")
            w[name] = start[name].clone().to(t.dtype)
        had = torch.from_numpy(np.isin(vocab, trained_rows(start)))
        emb, out = start["token_embd.weight"][v], start["output.weight"][v]
        scale = float(emb[had].std())
        w["emb"] = torch.where(had[:, None], emb, w["emb"] * (scale / init_std))
        w["out"] = torch.where(had[:, None], out, torch.zeros_like(out))
    full_shapes = {n: tuple(w[n].shape) for n in ("token_embd.weight", "output.weight")}
    del w["token_embd.weight"], w["output.weight"]
    params = {}
    for name, t in w.items():
        if name.endswith(FROZEN) or t.dtype != torch.float32:
            continue
        t.requires_grad_(True)
        params[name] = t
    model = v4_model.V4(hp, w, v, n_ctx, torch.float32)
    return model, params, full_shapes


def param_groups(params, weight_decay):
    decay = [t for n, t in params.items() if t.dim() >= 2 and "hc_" not in n]
    keep = [t for n, t in params.items() if not (t.dim() >= 2 and "hc_" not in n)]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": keep, "weight_decay": 0.0}]


def balance_routing(model, gamma):
    """Auxiliary-loss-free balancing (DeepSeek-V3): each learned-routing layer's selection bias
    moves by gamma towards the experts that got fewer tokens than the mean."""
    for pfx, load in model.aux.get("load", {}).items():
        b = model.w[pfx + "exp_probs_b.bias"]
        load = load.to(b.dtype)
        b += gamma * torch.sign(load.mean() - load)


# ---------------------------------------------------------------------------------------------
# Losses and evaluation
# ---------------------------------------------------------------------------------------------


def losses(model, batch, to_local):
    """(main NLL, MTP NLL, indexer CE, indexer KL) averaged over their positions, for a [B, T]
    batch of global ids. The KL is the CE less the target's own entropy (detached, for the log):
    the attention's mass over a few hundred rows is spread, so the CE alone stays high even when
    the indexer matches it."""
    tokens = torch.from_numpy(batch.astype(np.int64))
    local = to_local(tokens)
    hn, hm = model.forward(local, tokens)
    main = model.full_vocab_nll(hn[:, :-1], local[:, 1:]).mean()
    mtp = model.full_vocab_nll(hm[:, :-1], local[:, 2:]).mean() if hm is not None else None
    idx = kl = None
    pairs = model.aux.get("indexer", [])
    if pairs:
        terms, kls = [], []
        for logp, target, rows_ok in pairs:
            ce = -(target * logp.clamp(min=-1e4)).sum(dim=-1)  # [B, T]
            terms.append(ce[:, rows_ok].mean())
            with torch.no_grad():
                h = -(target * torch.log(target.clamp(min=1e-30))).sum(dim=-1)
                kls.append((ce - h)[:, rows_ok].mean())
        idx = torch.stack(terms).mean()
        kl = float(torch.stack(kls).mean())
    return main, mtp, idx, kl


def evaluate(model, data, to_local, n_seqs, batch_size):
    """Held-out main and MTP NLL per kind over the first n_seqs sequences of each."""
    out = {}
    with torch.no_grad():
        for kind in data.kinds:
            seqs = [(kind, int(s)) for s in data.eval_seqs[kind][:n_seqs]]
            tot = totm = 0.0
            for i in range(0, len(seqs), batch_size):
                b = data.batch(seqs[i:i + batch_size], data.heldout)
                main, mtp, _, _ = losses(model, b, to_local)
                tot += float(main) * len(b)
                totm += float(mtp) * len(b) if mtp is not None else 0.0
            out[kind] = (tot / max(len(seqs), 1), totm / max(len(seqs), 1))
    return out


# ---------------------------------------------------------------------------------------------
# Progress and the loss curve
# ---------------------------------------------------------------------------------------------


def fmt_time(s):
    s = int(max(s, 0))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def progress(step, total, loss, held, tok_s, elapsed):
    width = 28
    done = int(width * step / total)
    eta = elapsed / max(step, 1) * (total - step)
    bar = "#" * done + "-" * (width - done)
    held_s = f" held-out {held:.3f}" if held is not None else ""
    sys.stderr.write(f"\r[{bar}] {step}/{total} loss {loss:.3f}{held_s} "
                     f"{tok_s:,.0f} tok/s {fmt_time(elapsed)} ETA {fmt_time(eta)}  ")
    sys.stderr.flush()


def loss_svg(path, train_curve, held_curve, title):
    """A line chart of the training loss (smoothed) and the held-out loss against the step."""
    W, H, L, R, T, B = 720, 420, 60, 20, 40, 50
    pts = [v for _, v in train_curve] + [v for _, v in held_curve]
    if not pts:
        return
    steps = max(s for s, _ in train_curve + held_curve) or 1
    lo, hi = min(pts), max(pts)
    lo, hi = math.floor(lo), math.ceil(hi) if hi > lo else lo + 1

    def x(s):
        return L + (W - L - R) * s / steps

    def y(v):
        return T + (H - T - B) * (hi - v) / (hi - lo)

    def line(curve, colour):
        d = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in curve)
        return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{d}"/>'

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>']
    n_ticks = 5
    for i in range(n_ticks + 1):
        v = lo + (hi - lo) * i / n_ticks
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
        s = steps * i / n_ticks
        out.append(f'<text x="{x(s):.1f}" y="{H - B + 18}" text-anchor="middle">{s:.0f}</text>')
    out.append(f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle">step</text>')
    out.append(f'<text x="16" y="{H / 2}" transform="rotate(-90 16 {H / 2})" '
               f'text-anchor="middle">cross entropy (nats / token)</text>')
    out.append(line(train_curve, "#1f77b4"))
    out.append(line(held_curve, "#d62728"))
    out.append(f'<text x="{W - R - 150}" y="{T + 16}" fill="#1f77b4">train (smoothed)</text>')
    out.append(f'<text x="{W - R - 150}" y="{T + 32}" fill="#d62728">held-out</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def bf16_round(t):
    """float32 values rounded to the nearest bfloat16 (ties to even), kept as float32."""
    return t.detach().to(torch.bfloat16).to(torch.float32)


def save(path, template, model, vocab, full_shapes, meta, round_bf16):
    w = {}
    for name, t in model.w.items():
        if name in ("emb", "out"):
            continue
        w[name] = bf16_round(t) if round_bf16 and t.dtype == torch.float32 else t.detach()
    v = torch.from_numpy(vocab.astype(np.int64))
    for full, sub in (("token_embd.weight", "emb"), ("output.weight", "out")):
        m = torch.zeros(full_shapes[full])
        m[v] = bf16_round(model.w[sub]) if round_bf16 else model.w[sub].detach()
        w[full] = m
    gguf_io.write_like(template, path, w, meta)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="directory of *.train/heldout.tokens files")
    ap.add_argument("--template", required=True, help="generated GGUF of the target shape")
    ap.add_argument("--init", metavar="GGUF",
                    help="start from this trained file of the template's shape (a second "
                         "stage); its vocabulary rows are kept")
    ap.add_argument("--out", required=True, help="output GGUF")
    ap.add_argument("--steps", type=int, default=420)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--mix", type=parse_mix, default=parse_mix(DEFAULT_MIX),
                    help=f"share of the training sequences per kind (default {DEFAULT_MIX})")
    ap.add_argument("--ctx", type=int, default=1024, help="tokens per training sequence")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--indexer-weight", type=float, default=0.1)
    ap.add_argument("--balance-gamma", type=float, default=1e-3)
    ap.add_argument("--init-std", type=float, default=0.5, help="embedding init std")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-seqs", type=int, default=4, help="held-out sequences per kind")
    ap.add_argument("--final-eval", action="store_true",
                    help="after training, evaluate every held-out sequence")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--svg", help="write the loss curve here")
    ap.add_argument("--log", help="write the per-step log (JSON lines) here")
    ap.add_argument("--no-round", action="store_true",
                    help="write float32 weights as trained (default: rounded to bfloat16 "
                         "precision, which lets the file compress)")
    ap.add_argument("--name", default="magnetar-tiny", help="general.name of the output")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, args.threads))
    rng = np.random.default_rng(args.seed)
    f, hp, w = gguf_io.load(args.template, torch.float32)
    bos = int(f.metadata.get("tokenizer.ggml.bos_token_id", 0))
    data = Data(args.corpus, bos, args.ctx, args.mix)
    start = None
    if args.init:
        start = gguf_io.load(args.init, torch.float32)[2]
        data.vocab = np.union1d(data.vocab, trained_rows(start))
    model, params, full_shapes = build(hp, w, data.vocab, args.ctx, args.init_std, start)
    vocab_t = torch.from_numpy(data.vocab.astype(np.int64))

    def to_local(tokens):
        return torch.searchsorted(vocab_t, tokens)

    n_params = sum(t.numel() for t in params.values())
    print(f"train: {args.template} shape, {n_params / 1e6:.2f} M trained parameters, "
          f"vocabulary subset {len(data.vocab)} of {hp.n_vocab}, "
          f"{data.n_train_tokens:,} training tokens in "
          f"{sum(v.size for v in data.seqs.values())} sequences of {args.ctx} (mix "
          f"{', '.join(f'{k} {args.mix[k]:g}' for k in data.kinds)}), "
          f"{args.steps} steps of {args.batch}, {torch.get_num_threads()} threads, "
          f"BLAS {'OpenBLAS' if os.environ.get('MAGNETAR_TRAIN_REEXEC') else 'system default'}",
          file=sys.stderr)

    opt = torch.optim.AdamW(param_groups(params, args.weight_decay), lr=args.lr,
                            betas=(0.9, 0.95), eps=1e-8)

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        t = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    log = open(args.log, "w") if args.log else None
    train_curve, held_curve = [], []
    smooth = None
    held = None
    sampler = Sampler(data.seqs, args.mix, rng)
    t0 = time.time()
    for step in range(args.steps):
        items = [sampler.next() for _ in range(args.batch)]
        batch = data.batch(items, data.train)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        main, mtp, idx, idx_kl = losses(model, batch, to_local)
        loss = main
        if mtp is not None:
            loss = loss + args.mtp_weight * mtp
        if idx is not None:
            loss = loss + args.indexer_weight * idx
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = float(torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0))
        opt.step()
        with torch.no_grad():
            balance_routing(model, args.balance_gamma)
        m = float(main)
        smooth = m if smooth is None else 0.95 * smooth + 0.05 * m
        train_curve.append((step + 1, smooth))
        rec = {"step": step + 1, "lr": lr_at(step), "main": m, "grad_norm": gnorm,
               "mtp": None if mtp is None else float(mtp),
               "indexer": None if idx is None else float(idx), "indexer_kl": idx_kl}
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            ev = evaluate(model, data, to_local, args.eval_seqs, args.batch)
            held = sum(v[0] for v in ev.values()) / len(ev)
            held_curve.append((step + 1, held))
            rec["heldout"] = {k: {"main": v[0], "mtp": v[1]} for k, v in ev.items()}
        if log:
            log.write(json.dumps(rec) + "\n")
            log.flush()
        elapsed = time.time() - t0
        progress(step + 1, args.steps, smooth, held,
                 (step + 1) * args.batch * args.ctx / elapsed, elapsed)
    sys.stderr.write("\n")
    if log:
        log.close()

    meta = [gguf_io.kv_string("general.name", args.name),
            gguf_io.kv_string("general.description",
                              "trained by scripts/train/train.py on the corpus of "
                              "scripts/train/corpus.py; see scripts/train/README.md")]
    save(args.out, args.template, model, data.vocab, full_shapes, meta, not args.no_round)
    if args.svg:
        loss_svg(args.svg, train_curve, held_curve,
                 f"{args.name}: {args.steps} steps of {args.batch} x {args.ctx} tokens")
    ev = evaluate(model, data, to_local, 10 ** 9 if args.final_eval else args.eval_seqs,
                  args.batch)
    for kind, (nll, nll_mtp) in ev.items():
        print(f"held-out {kind}: NLL {nll:.4f} (perplexity {math.exp(nll):.2f}), "
              f"MTP NLL {nll_mtp:.4f}", file=sys.stderr)
    print(f"wrote {args.out} in {fmt_time(time.time() - t0)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
