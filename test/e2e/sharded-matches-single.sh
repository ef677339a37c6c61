#!/usr/bin/env bash
# A model partitioned over N CPU ranks (kimi-compile --grid N|GxT --strategy
# S) run under mpirun produces the logits of the single-rank artifact: every
# prompt row and every greedy decode row, relative L2 error <= 1e-4 (f32
# sums in another order), and the same greedy tokens. With several sequences
# (dp over D groups, or BATCH sequences), sequence s runs the prompt of seed
# 5 + s: the reference is one single-rank run per sequence.
#   usage: sharded-matches-single.sh KIMI_COMPILE KIMI_RUN CONFIG SINGLE.kimi
#          RANKS(N or GxT) STRATEGY WORKDIR PROMPT_TOKENS NEW_TOKENS PREFILL_CHUNK
#          [BATCH] -- MPIEXEC [FLAGS...] NP_FLAG
#   (the launcher ends with its rank-count flag, e.g. mpirun ... -np).
#   PREFILL_CHUNK 0 keeps kimi-compile's default; otherwise SINGLE.kimi must
#   have been compiled with the same --prefill-chunk.
#   KIMI_COMPILE "-" takes WORKDIR/model-STRATEGY-RANKS.kimi as compiled;
#   KIMI_COMPILE_FLAGS adds flags (--target sm_90a); KIMI_WEIGHTS names a
#   weights file to use instead of random weights of seed 11.
set -euo pipefail
compile=$1 run=$2 config=$3 single=$4 ranks=$5 strategy=$6 work=$7 prompt=$8
new=$9 chunk=${10}
shift 10
batch=0
if [ "$1" != "--" ]; then batch=$1; shift; fi
[ "$1" = "--" ] && shift
mkdir -p "$work"
model="$work/model-$strategy-$ranks.kimi"
flags=()
[ "$chunk" != 0 ] && flags=(--prefill-chunk "$chunk")
[ "$batch" != 0 ] && flags+=(--batch "$batch")
if [ "$compile" != - ]; then
  # shellcheck disable=SC2086  # KIMI_COMPILE_FLAGS is a list of flags
  "$compile" "$config" ${KIMI_COMPILE_FLAGS:-} "${flags[@]}" --grid "$ranks" \
    --strategy "$strategy" -o "$model"
fi

# GxT grids run G * T ranks; dp runs one sequence per group (outer axis).
np=$(( ${ranks/x/*} ))
# Sequences over the grid: --batch, else one per dp group (else one).
groups=1
case ",$strategy," in *,dp,*) groups=${ranks%%x*} ;; esac
[ "$batch" != 0 ] && groups=$batch

args=(--random-weights 11)
[ -n "${KIMI_WEIGHTS:-}" ] && args=(--weights "$KIMI_WEIGHTS")
args+=(--prompt-random "$prompt" --max-new-tokens "$new")
tokens_one=""
: > "$work/single.f32"
for ((g = 0; g < groups; g++)); do
  one=$("$run" "$single" "${args[@]}" --seed $((5 + g)) --dump-logits "$work/single-$g.f32")
  cat "$work/single-$g.f32" >> "$work/single.f32"
  tokens_one="$tokens_one $(echo "$one" | sed -n 's/^generated: //p')"
done
many=$("$@" "$np" "$run" "$model" "${args[@]}" --seed 5 --dump-logits "$work/sharded.f32")
echo "$many" | grep -E "^(ranks|prefill|decode):"
tokens_many=""
while read -r line; do
  tokens_many="$tokens_many $line"
done < <(echo "$many" | sed -n 's/^generated\(\[[0-9]*\]\)\{0,1\}: //p')
echo "single:  $tokens_one"
echo "sharded: $tokens_many"
python3 - "$work/single.f32" "$work/sharded.f32" <<'PY'
import math, struct, sys
a = open(sys.argv[1], "rb").read()
b = open(sys.argv[2], "rb").read()
if len(a) != len(b) or not a:
    sys.exit(f"logits differ in size: {len(a)} vs {len(b)} bytes")
n = len(a) // 4
x = struct.unpack(f"<{n}f", a)
y = struct.unpack(f"<{n}f", b)
err = math.sqrt(sum((p - q) ** 2 for p, q in zip(x, y)))
ref = math.sqrt(sum(p * p for p in x))
worst = max(abs(p - q) for p, q in zip(x, y))
print(f"{n} logits: relative L2 error {err / ref:.3g}, max abs diff {worst:.3g}")
sys.exit(0 if err <= 1e-4 * ref else 1)
PY
[ -n "${tokens_one// }" ] && [ "$tokens_one" = "$tokens_many" ]
