#!/usr/bin/env bash
# Runs the whole test suite. Expects scripts/setup.sh to have run (the README command runs both).
#
#   1. the main build's tests (ctest on build/);
#   2. the parser and quant tests again under AddressSanitizer + UndefinedBehaviorSanitizer
#      (build-asan/);
#   3. when clang is present, the GGUF reader's libFuzzer target for a short time
#      (build-fuzz/).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== tests: main build"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== tests: ASan + UBSan build of the parsers"
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMAGNETAR_SANITIZE=ON \
    -DMAGNETAR_WERROR=$werror >/dev/null
cmake --build build-asan --target test_unit test_quant
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -L 'unit|quant'

if command -v clang++ >/dev/null 2>&1; then
    echo "== fuzz: GGUF reader (libFuzzer, 30 s)"
    cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
        -DCMAKE_C_COMPILER=clang -DMAGNETAR_FUZZ=ON -DMAGNETAR_BUILD_TESTS=OFF >/dev/null
    cmake --build build-fuzz --target fuzz_gguf
    mkdir -p build-fuzz/corpus
    build-fuzz/bin/fuzz_gguf -max_total_time=30 -max_len=65536 -rss_limit_mb=2048 \
        build-fuzz/corpus tests/fuzz/seeds
fi
echo "== all test stages passed"
