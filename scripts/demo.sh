#!/usr/bin/env bash
# README command (1): set up, build and run the main job. For now the main job
# is verifying and printing two decoder layers of Kimi K3 with kimi-opt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
"${KIMI_BUILD_DIR:-$root/build}/bin/kimi-opt" "$root/models/examples/k3-layers.mlir"
echo "kimi-opt: models/examples/k3-layers.mlir verified" >&2
