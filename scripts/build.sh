#!/usr/bin/env bash
# Configures (once) and builds kimi into ./build with all cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KIMI_BUILD_DIR:-$root/build}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=${KIMI_BUILD_TYPE:-Release} \
    -DKIMI_WERROR=${KIMI_WERROR:-OFF}
fi
cmake --build "$build" -j "$(nproc)"
