#!/usr/bin/env bash
# Device check of the CUDA backend, in one run on a machine with an NVIDIA GPU (H200 first):
#   1. configure and build for sm_90 (test_gpu, magnetar, magnetar_cuda_bench);
#   2. run the `gpu` tests (every CUDA op against the CPU backend, tiny models end to end);
#   3. generate a `flash-layers:4 --weights published` model and benchmark it: per-layer decode
#      time, the projected 43-layer decode speed, prefill speed, and the achieved bandwidth next
#      to a device-to-device copy measured in the same run.
# Results go to $OUT when set (else to the build folder): ctest-gpu.txt, bench.txt, bench.json,
# summary.txt. Sized to finish in under 10 minutes on a 16-core machine.
#
# Environment: BUILD_DIR (default build-gpu-check), MODEL_DIR (where the ~10 GB model is
# written; default the build folder), BENCH_ARGS (extra arguments of magnetar_cuda_bench).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu-check}
RESULTS=${OUT:-$BUILD/gpu-check}
MODEL_DIR=${MODEL_DIR:-$BUILD}
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$RESULTS" "$MODEL_DIR"
START=$(date +%s)

log() { echo "[gpu-check +$(( $(date +%s) - START ))s] $*" | tee -a "$RESULTS/summary.txt"; }
die() { log "FAILED: $*"; exit 1; }

: > "$RESULTS/summary.txt"
log "repository $ROOT, build $BUILD, results $RESULTS, $JOBS jobs"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
        | tee -a "$RESULTS/summary.txt" || true
fi

# ---- 1. build ----
NVCC=""
if command -v nvcc >/dev/null 2>&1; then NVCC=$(command -v nvcc);
elif [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc; fi
[ -n "$NVCC" ] || die "nvcc not found (install the CUDA toolkit)"
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
log "configure (nvcc: $NVCC)"
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DMAGNETAR_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 \
    > "$RESULTS/configure.txt" 2>&1 || { tail -30 "$RESULTS/configure.txt"; die "configure"; }
log "build"
cmake --build "$BUILD" -j "$JOBS" --target test_gpu magnetar magnetar_cuda_bench \
    > "$RESULTS/build.txt" 2>&1 || { tail -40 "$RESULTS/build.txt"; die "build"; }
log "build done"

BENCH="$BUILD/bin/magnetar_cuda_bench"
"$BENCH" --probe 2>&1 | tee -a "$RESULTS/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || die "no usable CUDA device"

# ---- 2. gpu tests ----
log "ctest -L gpu"
( cd "$BUILD" && timeout 300 ctest -L gpu --output-on-failure --timeout 240 ) \
    > "$RESULTS/ctest-gpu.txt" 2>&1
TEST_RC=$?
grep -E "tests passed|tests failed|Failed|\*\*\*|SKIPPED|nmse" "$RESULTS/ctest-gpu.txt" \
    | tail -40 | tee -a "$RESULTS/summary.txt"
log "gpu tests exit code $TEST_RC"

# ---- 3. model and benchmark ----
MODEL="$MODEL_DIR/flash-layers-4-published.gguf"
if [ ! -s "$MODEL" ]; then
    log "generate flash-layers:4 --weights published"
    timeout 240 "$BUILD/bin/magnetar" gen-model --overwrite --preset flash-layers:4 --weights published \
        -o "$MODEL" -q > "$RESULTS/gen-model.txt" 2>&1 || { tail -20 "$RESULTS/gen-model.txt"; die "gen-model"; }
fi
log "model $(du -h "$MODEL" | cut -f1)"
log "benchmark"
# shellcheck disable=SC2086
timeout 240 "$BENCH" -m "$MODEL" --prefill 2048 --chunk 2048 --decode 64 \
    --json "$RESULTS/bench.json" ${BENCH_ARGS:-} > "$RESULTS/bench.txt" 2>&1
BENCH_RC=$?
grep -v "^upload" "$RESULTS/bench.txt" | tee -a "$RESULTS/summary.txt"
log "benchmark exit code $BENCH_RC"

if [ "$TEST_RC" -ne 0 ] || [ "$BENCH_RC" -ne 0 ]; then
    log "FAILED (tests $TEST_RC, bench $BENCH_RC)"
    exit 1
fi
log "OK"
