#!/usr/bin/env bash
# README command (1): set up, build, and run the main job: compile k3-tiny for
# the CPU, create deterministic random weights (a real safetensors file), run
# a prompt through prefill and greedy decode, printing the tokens, throughput
# and memory, then answer a chat message as text through the demo tokenizer
# (random weights give random text: it shows the path).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KIMI_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
"$root/scripts/build.sh"

echo "== kimi-compile models/k3-tiny.json --target cpu"
"$build/bin/kimi-compile" "$root/models/k3-tiny.json" --target cpu \
  -o "$build/k3-tiny.kimi"
echo "== kimi-run (random weights, seed 7, 100-token prompt, 32 new tokens)"
"$build/bin/kimi-run" "$build/k3-tiny.kimi" \
  --random-weights 7 --save-weights "$build/k3-tiny-seed7.safetensors" \
  --prompt-random 100 --seed 1 --max-new-tokens 32
echo "== kimi-run --chat (demo tokenizer build/tokenizers/kimi-tiny; sampled, seed 1)"
"$build/bin/kimi-run" "$build/k3-tiny.kimi" \
  --weights "$build/k3-tiny-seed7.safetensors" \
  --tokenizer "$build/tokenizers/kimi-tiny" --chat "Hello! Who are you?" \
  --max-new-tokens 32 --temperature 0.7 --top-p 0.9 --seed 1
