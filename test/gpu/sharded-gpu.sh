#!/usr/bin/env bash
# A model partitioned over N GPUs (kimi-compile --target sm_90a --grid N
# --strategy S), its ranks started by kimi-launch and talking through NCCL,
# produces the logits and greedy tokens of the single-GPU artifact
# (sharded-matches-single.sh does the comparison: relative L2 <= 1e-4).
# Skips (77) with fewer than N GPUs or without libnccl.so.2.
#   usage: sharded-gpu.sh KIMI_COMPILE KIMI_RUN KIMI_LAUNCH CONFIG SINGLE.kimi
#          RANKS STRATEGY WORKDIR PROMPT_TOKENS NEW_TOKENS
set -euo pipefail
compile=$1 run=$2 launch=$3
shift 3
ranks=$3
np=$(( ${ranks/x/*} ))
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -lt "$np" ]; then
  echo "SKIP: $np GPUs needed, ${gpus:-0} found"
  exit 77
fi
if [ -z "${KIMI_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
  echo "SKIP: no libnccl.so.2 (set KIMI_NCCL_LIBRARY)"
  exit 77
fi
# The single-GPU artifact is the reference configuration (f32 activations,
# exact products); partitioned models compute in f32 by default.
export KIMI_COMPILE_FLAGS="--target sm_90a --gpu-bf16-weight-products=false ${KIMI_COMPILE_FLAGS:-}"
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../e2e/sharded-matches-single.sh" "$compile" "$run" "$@" 0 -- \
  "$launch" -np
