#!/usr/bin/env bash
# The KL-divergence table of `magnetar quantize` schemes against a full-precision model, on the
# held-out split of the training corpus (docs/quality.md, scripts/train/README.md).
#
#   scripts/train/quality_table.sh MODEL.gguf CORPUS_DIR OUT_DIR [CHUNKS]
#
# CORPUS_DIR holds the rendered corpus (*.heldout.tokens, *.train.jsonl; see README.md). Writes
# into OUT_DIR the quantized files, the imatrix, the reference and one JSON per scheme, and
# prints a Markdown table: scheme, file size, KLD mean / p99, top-1 agreement, NLL, perplexity.
# It also scores the random model of the same shape (gen-model) against the reference, for the
# perplexity ratio.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=$1
corpus=$2
out=$3
chunks=${4:-48}
bin=build/bin/magnetar
mkdir -p "$out"

cat "$corpus"/prose.heldout.tokens "$corpus"/chat.heldout.tokens "$corpus"/agent.heldout.tokens \
    > "$out/heldout.tokens"
"$bin" score save -m "$model" --tokens "$out/heldout.tokens" -o "$out/ref.mgref" --ctx 512 \
    --chunks "$chunks"

# Calibration text for the imatrix: training prose and rendered training chats (plain text).
head -n 2000 "$corpus/prose.train.jsonl" | "$bin" render -m "$model" --text > "$out/calib.txt"
head -n 1000 "$corpus/chat.train.jsonl" | "$bin" render -m "$model" --text >> "$out/calib.txt"
"$bin" imatrix -m "$model" -f "$out/calib.txt" -o "$out/imatrix.gguf" --max-chunks 200 -q

"$bin" gen-model --preset tiny-mtp --weights f32 --seed 1 -q -o "$out/random.gguf"
"$bin" quantize "$model" "$out/q8.gguf" --scheme q8 -q
"$bin" quantize "$model" "$out/q4.gguf" --scheme q4 -q
"$bin" quantize "$model" "$out/q2.gguf" --scheme q2 -q
"$bin" quantize "$model" "$out/q2-imatrix.gguf" --scheme q2 --imatrix "$out/imatrix.gguf" -q

for s in q8 q4 q2 q2-imatrix random; do
    "$bin" score kld -q -m "$out/$s.gguf" --ref "$out/ref.mgref" --json "$out/$s.json" > /dev/null
done

python3 - "$out" "$model" <<'EOF'
import json, math, os, sys
out, model = sys.argv[1], sys.argv[2]
rows = ["| model | size (MiB) | KLD mean | KLD p99 | top-1 | NLL | perplexity | greedy LCP |",
        "|---|---|---|---|---|---|---|---|"]
ref = None
for s in ["q8", "q4", "q2", "q2-imatrix", "random"]:
    j = json.load(open(os.path.join(out, s + ".json")))
    ref = j["reference_nll"]
    size = os.path.getsize(os.path.join(out, s + ".gguf")) / 2**20
    rows.append(f"| {s} | {size:.1f} | {j['kld']['mean']:.5f} | {j['kld']['p99']:.4f} | "
                f"{100 * j['top1']:.2f} % | {j['nll']:.4f} | {math.exp(j['nll']):.3f} | "
                f"{j['greedy_lcp']:.1f} |")
size = os.path.getsize(model) / 2**20
rows.insert(2, f"| F32 (reference) | {size:.1f} | 0 | 0 | 100 % | {ref:.4f} | "
               f"{math.exp(ref):.3f} | - |")
print("\n".join(rows))
EOF
