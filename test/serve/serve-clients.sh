#!/usr/bin/env bash
# ctest serve.clients: installs the official openai client (pinned) from
# the npm registry into WORK once, then runs serve-clients.mjs with it.
# usage: serve-clients.sh KIMI_SERVE KIMI_RUN MODEL.kimi TOKENIZER WORK
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
serve=$1 run=$2 model=$3 tokenizer=$4 work=$5
command -v node >/dev/null || { echo "node (Node.js >= 20) is needed: scripts/setup.sh" >&2; exit 1; }
command -v npm >/dev/null || { echo "npm is needed: scripts/setup.sh" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is needed: scripts/setup.sh" >&2; exit 1; }
mkdir -p "$work"
npmdir=$work/npm
if [ ! -f "$npmdir/node_modules/openai/package.json" ]; then
  mkdir -p "$npmdir"
  (cd "$npmdir" && npm install --no-audit --no-fund --silent openai@4.104.0)
fi
cp "$here/serve-clients.mjs" "$npmdir/"
weights=$work/k3-tiny-seed7.safetensors
"$run" "$model" --random-weights 7 --save-weights "$weights" --prompt-ids 1 \
  --max-new-tokens 1 > /dev/null
exec timeout 540 node "$npmdir/serve-clients.mjs" "$serve" "$run" "$model" "$weights" \
  "$tokenizer" "$work/run"
