#!/usr/bin/env bash
# Source checks of scripts/test.sh (also usable alone after a build):
#   1. clang-format (.clang-format) over every C++ and CUDA file: no file may differ from its
#      formatted form (`clang-format -i FILE` fixes one);
#   2. clang-tidy (.clang-tidy) over the libraries that take outside input or form the public
#      boundary: src/core, gguf, engine, kvstore, sampling, chat, tokenizer. Needs the
#      compile_commands.json of build/ (CMAKE_EXPORT_COMPILE_COMMANDS is on).
set -euo pipefail
cd "$(dirname "$0")/.."

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
else
    mapfile -t files < <(find src include tools tests examples \
        \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
fi
echo "== lint: clang-format over ${#files[@]} files"
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/magnetar-format.$$; then
    grep -E "error:" /tmp/magnetar-format.$$ | cut -d: -f1 | sort -u | sed 's/^/  not formatted: /'
    rm -f /tmp/magnetar-format.$$
    echo "lint: run clang-format -i on the files above"
    exit 1
fi
rm -f /tmp/magnetar-format.$$

echo "== lint: clang-tidy over the input-facing libraries"
[ -f build/compile_commands.json ] || { echo "lint: build/compile_commands.json missing (build first)"; exit 1; }
# The GCC-only warning flags of the build are unknown to clang.
run-clang-tidy -p build -quiet -j "$(nproc)" -extra-arg=-Wno-unknown-warning-option \
    'src/(core|gguf|engine|kvstore|sampling|chat|tokenizer)/' > /tmp/magnetar-tidy.$$ 2>&1 || true
if grep -qE "(warning|error): " /tmp/magnetar-tidy.$$; then
    grep -E "(warning|error): " /tmp/magnetar-tidy.$$ | sed 's/\x1b\[[0-9;]*m//g' | sort -u
    rm -f /tmp/magnetar-tidy.$$
    echo "lint: clang-tidy findings above"
    exit 1
fi
rm -f /tmp/magnetar-tidy.$$
echo "lint: clean"
