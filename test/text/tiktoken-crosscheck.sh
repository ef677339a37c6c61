#!/usr/bin/env bash
# ctest text.tiktoken-crosscheck: installs js-tiktoken (pinned) from the npm
# registry into WORK_DIR once, then runs tiktoken-crosscheck.mjs with it.
# usage: tiktoken-crosscheck.sh KIMI_TOKENIZE WORK_DIR [EXTRA_CORPUS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tool=$1 work=$2
shift 2
command -v node >/dev/null || { echo "node (Node.js >= 20) is needed: scripts/setup.sh" >&2; exit 1; }
command -v npm >/dev/null || { echo "npm is needed: scripts/setup.sh" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "Node.js $major is too old: the check needs regular expressions with the v flag (Node.js >= 20)" >&2
  exit 1
fi
npmdir=$work/npm
if [ ! -f "$npmdir/node_modules/js-tiktoken/package.json" ]; then
  mkdir -p "$npmdir"
  (cd "$npmdir" && npm install --no-audit --no-fund --silent js-tiktoken@1.0.21)
fi
# ES modules resolve packages from the script's own folder.
cp "$here/tiktoken-crosscheck.mjs" "$npmdir/"
exec node "$npmdir/tiktoken-crosscheck.mjs" "$tool" "$work/run" "$@"
