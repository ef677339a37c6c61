#!/usr/bin/env bash
# README command (2): set up, build and run every test. Ends with ctest's summary line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
# The test job builds with warnings as errors in kimi's own code (CI runs it).
KIMI_WERROR=${KIMI_WERROR:-ON} "$root/scripts/build.sh"
cd "${KIMI_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "$(nproc)"
