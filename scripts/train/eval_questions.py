#!/usr/bin/env python3
"""Writes the question set of `magnetar eval` about the training corpus' invented world.

The answers come from the same World (world.py) the corpus is generated from, so the trained
default model can answer some of them: star distances and planet moon counts (integer), the
constellation of a star and the discoverer of an object (exact), spectral colours and
constellations offered as lettered options (choice), and lists whose magnetar lines are to be
named (lines). The integer and exact questions carry a "prompt" worded like the corpus' chats
(the model answers in its own sentences, graded as free text); the choice and lines questions
use the harness' lettered options and "Answer:" instruction, a form the model never saw.

    python3 scripts/train/eval_questions.py [--seed 1] [--out examples/eval/magnetar-world.jsonl]

Only the standard library; the same seed always writes the same file.
"""

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from world import World  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1, help="world seed (the corpus' --seed)")
    ap.add_argument("--out", default="examples/eval/magnetar-world.jsonl")
    args = ap.parse_args()
    w = World(args.seed)
    rng = random.Random(f"magnetar-eval/{args.seed}")
    out = []
    count = {}

    def qid(prefix):
        count[prefix] = count.get(prefix, 0) + 1
        return f"{prefix}-{count[prefix]}"

    for s in rng.sample(w.stars, 8):
        out.append({"id": qid("distance"), "kind": "integer",
                    "question": f"How far away is the star {s.name}, in light years?",
                    "prompt": f"How far away is the star {s.name}?", "answer": s.distance})
    for p in rng.sample(w.planets, 6):
        out.append({"id": qid("moons"), "kind": "integer",
                    "question": f"How many moons does {p.name} have?",
                    "prompt": f"How many moons does {p.name} have?", "answer": p.moons})
    for s in rng.sample(w.stars, 6):
        out.append({"id": qid("constellation"), "kind": "exact",
                    "question": f"In which constellation is the star {s.name}?",
                    "prompt": f"Where is the star {s.name}?", "answer": s.const.name,
                    "aliases": [f"the constellation {s.const.name}"]})
    for o in rng.sample(w.stars + w.magnetars, 5):
        out.append({"id": qid("discoverer"), "kind": "exact",
                    "question": f"Who discovered {o.name}?",
                    "prompt": f"When was {o.name} discovered?", "answer": o.discoverer.name})
    colours = sorted({s.colour for s in w.stars})
    for s in rng.sample(w.stars, 4):
        options = rng.sample([c for c in colours if c != s.colour], 3) + [s.colour]
        rng.shuffle(options)
        out.append({"id": qid("colour"), "kind": "choice",
                    "question": f"What colour is the star {s.name}?", "choices": options,
                    "answer": "ABCD"[options.index(s.colour)]})
    for m in rng.sample(w.magnetars, 3):
        others = rng.sample([c.name for c in w.constellations if c is not m.const], 3)
        options = others + [m.const.name]
        rng.shuffle(options)
        out.append({"id": qid("magnetar-const"), "kind": "choice",
                    "question": f"In which constellation is the magnetar {m.name}?",
                    "choices": options, "answer": "ABCD"[options.index(m.const.name)]})
    for _ in range(2):
        names = rng.sample(w.magnetars, 2) + rng.sample(w.stars, 2) + rng.sample(w.planets, 2)
        rng.shuffle(names)
        listing = "\n".join(f"{i + 1}. {o.name}" for i, o in enumerate(names))
        lines = [[i + 1] for i, o in enumerate(names) if o.kind == "magnetar"]
        out.append({"id": qid("magnetar-lines"), "kind": "lines",
                    "question": f"Which lines of this list name magnetars?\n{listing}",
                    "answer": lines})

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for q in out:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"{args.out}: {len(out)} questions", file=sys.stderr)


if __name__ == "__main__":
    main()
