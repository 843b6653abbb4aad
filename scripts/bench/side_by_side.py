#!/usr/bin/env python3
"""Magnetar and llama.cpp side by side on one GGUF: same threads, same prompt token ids, same
number of generated tokens, runs alternated, medians and ratios printed with the load average.

llama.cpp runs through the prebuilt CPU libraries of the npm package node-llama-cpp
(scripts/bench/package.json, a bench-only dependency: `npm install --prefix scripts/bench
--omit=optional --ignore-scripts`; this script installs it when it is missing). Magnetar runs as
`magnetar run --tokens` and reports its own prefill and decode rates.

    python3 scripts/bench/side_by_side.py -m MODEL.gguf [-t 2] [--prompt 512] [--gen 64] [--runs 3]

The prompt is BOS and random ids (fixed seed) of the vocabulary's ordinary range, prefilled in
one batch by both engines; generation is greedy, one token a step. docs/performance.md says how
to read the figures; measured runs go to docs/log.md.
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def ensure_peer():
    if os.path.isdir(os.path.join(HERE, "node_modules", "node-llama-cpp")):
        return
    print("side_by_side: installing node-llama-cpp into scripts/bench (bench only)", file=sys.stderr)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--omit=optional",
                    "--ignore-scripts"], cwd=HERE, check=True)


def run_llama(model, prompt_file, gen, threads):
    out = subprocess.run(["node", os.path.join(HERE, "llamacpp_run.mjs"), model, prompt_file,
                          str(gen), str(threads)], cwd=HERE, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("llama.cpp run failed:\n" + out.stderr[-2000:])
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["prefill_tps"], r["decode_tps"]


RATE = re.compile(r"^(prefill|decode):\s+(\d+) tokens in ([0-9.]+) s \(([0-9.]+) t/s\)", re.M)


def run_magnetar(binary, model, prompt_file, gen, threads, n_prompt):
    out = subprocess.run([binary, "run", "-m", model, "-t", str(threads), "--tokens", prompt_file,
                          "-n", str(gen), "-c", str(n_prompt + gen + 16), "-b", str(n_prompt)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("magnetar run failed:\n" + out.stderr[-2000:])
    rates = {m.group(1): float(m.group(4)) for m in RATE.finditer(out.stderr)}
    if "prefill" not in rates or "decode" not in rates:
        raise RuntimeError("magnetar run printed no timing lines:\n" + out.stderr[-2000:])
    return rates["prefill"], rates["decode"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF both engines load")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens (one batch)")
    ap.add_argument("--gen", type=int, default=64, help="generated tokens")
    ap.add_argument("--runs", type=int, default=3, help="runs of each engine, alternated")
    ap.add_argument("--magnetar", default=os.path.join(ROOT, "build", "bin", "magnetar"))
    a = ap.parse_args()
    if a.threads < 1 or a.prompt < 2 or a.gen < 2 or a.runs < 1:
        ap.error("--threads >= 1, --prompt >= 2, --gen >= 2 and --runs >= 1")
    if not os.path.isfile(a.model):
        ap.error(f"no model file {a.model}")
    if not os.access(a.magnetar, os.X_OK):
        ap.error(f"no magnetar binary at {a.magnetar} (build it, or pass --magnetar)")
    ensure_peer()
    rng = random.Random(1)
    ids = [0] + [rng.randrange(1000, 120000) for _ in range(a.prompt - 1)]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(ids, f)
        prompt_file = f.name
    rows = {"llama.cpp": [], "magnetar": []}
    print(f"# {os.path.basename(a.model)}, {a.threads} threads, prompt {a.prompt}, "
          f"generation {a.gen}, {a.runs} alternated runs each")
    print(f"{'run':>3}  {'engine':<10} {'prefill t/s':>12} {'decode t/s':>11} {'load':>5}")
    try:
        for i in range(a.runs):
            for name in ("llama.cpp", "magnetar"):
                load = load_average()
                if name == "llama.cpp":
                    p, d = run_llama(a.model, prompt_file, a.gen, a.threads)
                else:
                    p, d = run_magnetar(a.magnetar, a.model, prompt_file, a.gen, a.threads,
                                        a.prompt)
                rows[name].append((p, d))
                print(f"{i + 1:>3}  {name:<10} {p:>12.2f} {d:>11.2f} {load:>5.2f}", flush=True)
    finally:
        os.unlink(prompt_file)
    med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
           for k, v in rows.items()}
    print(f"median     llama.cpp  prefill {med['llama.cpp'][0]:.2f} t/s, decode "
          f"{med['llama.cpp'][1]:.2f} t/s")
    print(f"median     magnetar   prefill {med['magnetar'][0]:.2f} t/s, decode "
          f"{med['magnetar'][1]:.2f} t/s")
    print(f"ratio      magnetar / llama.cpp: prefill {med['magnetar'][0] / med['llama.cpp'][0]:.2f}x,"
          f" decode {med['magnetar'][1] / med['llama.cpp'][1]:.2f}x")


if __name__ == "__main__":
    main()
