#!/usr/bin/env bash
# Runs the whole test suite. Expects scripts/setup.sh to have run (the README command runs both).
#
#   0. the source checks (scripts/lint.sh: clang-format, clang-tidy);
#   1. the main build's tests (ctest on build/);
#   2. the parser and quant tests again under AddressSanitizer + UndefinedBehaviorSanitizer
#      (build-asan/);
#   3. when clang is present, the libFuzzer targets (GGUF reader, DSML parsers, tokenizer, chat
#      renderer and prompt builder, server request parser and schemas, session payload and disk
#      KV file readers) for a short time each (build-fuzz/).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

log=$(mktemp)
trap 'rm -f "$log"' EXIT

bash scripts/lint.sh

echo "== tests: main build"
ctest --test-dir build --output-on-failure -j "$jobs" | tee -a "$log"

echo "== tests: ASan + UBSan build of the parsers"
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMAGNETAR_SANITIZE=ON \
    -DMAGNETAR_WERROR=$werror >/dev/null
cmake --build build-asan --target test_unit test_quant v41_formats_dump
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -L 'unit|quant' | tee -a "$log"

if command -v clang++ >/dev/null 2>&1; then
    echo "== fuzz: GGUF reader (libFuzzer, 30 s)"
    cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
        -DCMAKE_C_COMPILER=clang -DMAGNETAR_FUZZ=ON -DMAGNETAR_BUILD_TESTS=OFF >/dev/null
    cmake --build build-fuzz --target fuzz_gguf
    mkdir -p build-fuzz/corpus
    build-fuzz/bin/fuzz_gguf -max_total_time=30 -max_len=65536 -rss_limit_mb=2048 \
        build-fuzz/corpus tests/fuzz/seeds

    echo "== fuzz: DSML parsers (libFuzzer, 15 s)"
    cmake --build build-fuzz --target fuzz_dsml
    mkdir -p build-fuzz/dsml-corpus
    # The markers as a dictionary, so mutations reach inside tool blocks quickly.
    cat > build-fuzz/dsml.dict <<'DICT'
"<\xef\xbd\x9cDSML\xef\xbd\x9ctool_calls>"
"</\xef\xbd\x9cDSML\xef\xbd\x9ctool_calls>"
"<\xef\xbd\x9cDSML\xef\xbd\x9cinvoke name=\"f\">"
"</\xef\xbd\x9cDSML\xef\xbd\x9cinvoke>"
"<\xef\xbd\x9cDSML\xef\xbd\x9cparameter name=\"k\" string=\"true\">"
"<\xef\xbd\x9cDSML\xef\xbd\x9cparameter name=\"k\" string=\"false\">"
"<\xef\xbd\x9cDSML\xef\xbd\x9cparameter name=\"k\">"
"</\xef\xbd\x9cDSML\xef\xbd\x9cparameter>"
"<DSML\xef\xbd\x9ctool_calls>"
"<tool_calls>"
"</think>"
"&amp;"
DICT
    build-fuzz/bin/fuzz_dsml -max_total_time=15 -max_len=4096 -rss_limit_mb=2048 \
        -dict=build-fuzz/dsml.dict build-fuzz/dsml-corpus

    echo "== fuzz: tokenizer (libFuzzer, 20 s)"
    cmake --build build-fuzz --target fuzz_tokenizer
    mkdir -p build-fuzz/tokenizer-corpus
    build-fuzz/bin/fuzz_tokenizer -max_total_time=20 -max_len=512 -rss_limit_mb=4096 \
        build-fuzz/tokenizer-corpus tests/tokenizer/data
fi
if command -v clang++ >/dev/null 2>&1; then
    echo "== fuzz: chat renderer and server prompt builder (libFuzzer, 20 s)"
    cmake --build build-fuzz --target fuzz_render
    mkdir -p build-fuzz/render-corpus
    build-fuzz/bin/fuzz_render -max_total_time=20 -max_len=2048 -rss_limit_mb=4096 \
        -dict=tests/fuzz/render.dict build-fuzz/render-corpus

    echo "== fuzz: server request parser and schemas (libFuzzer, 20 s)"
    cmake --build build-fuzz --target fuzz_request
    mkdir -p build-fuzz/request-corpus build-fuzz/request-seeds
    # Seeds: the bodies of the malformed-request corpus, one file each.
    python3 - tests/server/data/malformed_requests.jsonl build-fuzz/request-seeds <<'PY'
import json, sys
for i, line in enumerate(open(sys.argv[1], encoding="utf-8")):
    body = json.loads(line).get("body", "")
    open(f"{sys.argv[2]}/{i:04d}", "wb").write(body.encode("utf-8", "surrogatepass"))
PY
    build-fuzz/bin/fuzz_request -max_total_time=20 -max_len=8192 -rss_limit_mb=2048 \
        build-fuzz/request-corpus build-fuzz/request-seeds

    echo "== fuzz: session payload and disk KV file readers (libFuzzer, 20 s)"
    cmake --build build-fuzz --target fuzz_kv
    mkdir -p build-fuzz/kv-corpus
    build-fuzz/bin/fuzz_kv -max_total_time=20 -max_len=1048576 -rss_limit_mb=4096 \
        build-fuzz/kv-corpus tests/fuzz/seeds-kv
fi
# One closing line over both ctest runs (the fuzzers print their own statistics above).
total=$(awk '/tests passed, [0-9]+ tests failed out of/ {n += $NF} END {print n + 0}' "$log")
failed=$(awk '/tests passed, [0-9]+ tests failed out of/ {n += $(NF-4)} END {print n + 0}' "$log")
echo "== all test stages passed"
echo "ctest: $((total - failed)) passed, $failed failed"
