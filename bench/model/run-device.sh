#!/usr/bin/env bash
# On the H200 (device machine), with gpucheck/ from prepare-device.sh carried:
# the GPU model tests on k3-tiny, then kimi-bench-model on every k3-mini
# artifact there, then the PyTorch eager baseline. JSON and logs go to $OUT
# (or ./device-out); the last lines printed are a short table.
#
#   bench/model/run-device.sh [--no-tests] [--no-bench] [--no-eager] [--profile NAME]
#                             [--model-tests GTEST_FILTER]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root/gpucheck" || exit 1
out=${OUT:-$root/device-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for z in *.kimi.gz models/*.kimi.gz kda/*.kimi.gz attn_res/*.kimi.gz; do
  [ -f "$z" ] && gunzip -f "$z"
done
tests=1 eager=1 bench=1 profile="" filter="*"
while [ $# -gt 0 ]; do
  case $1 in
    --no-tests) tests=0 ;;
    --no-eager) eager=0 ;;
    --no-bench) bench=0 ;;
    --profile) profile=$2; shift ;;
    --model-tests) filter=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$out/gpu.txt"
if [ $tests = 1 ]; then
  KIMI_REQUIRE_GPU=1 ./kimi-gpu-blas-tests 2>&1 | grep -E "error|FAIL|PASSED" 
  if [ -x ./kimi-gpu-kernel-tests ]; then
    KIMI_REQUIRE_GPU=1 KIMI_KDA_ARTIFACT_DIR=$PWD/kda KIMI_ATTNRES_ARTIFACT_DIR=$PWD/attn_res \
      ./kimi-gpu-kernel-tests > "$out/kernel-tests.log" 2>&1
    echo "kernel tests: rc $?"; grep -E "^\[ *(FAILED|PASSED) " "$out/kernel-tests.log" | head -20
  fi
  KIMI_REQUIRE_GPU=1 KIMI_MODEL_GPU_ARTIFACT_DIR=$PWD/models ./kimi-gpu-model-tests \
    --gtest_filter="$filter" > "$out/model-tests.log" 2>&1
  echo "model tests: rc $?"; grep -E "^\[ *(OK|FAILED|PASSED|errors|graphs) " "$out/model-tests.log" | head -40
fi
b64=""
[ -f k3-mini-b64.kimi ] && b64="--batch-artifact k3-mini-b64.kimi"
[ $bench = 1 ] || shopt -s nullglob
for a in $([ $bench = 1 ] && echo k3-mini-c*.kimi); do
  name=${a#k3-mini-}; name=${name%.kimi}
  # The batch-64 artifact is timed once, with the first prefill artifact.
  extra=$b64 b64=""
  # shellcheck disable=SC2086
  timeout 300 ./kimi-bench-model "$a" $extra --prefill-tokens 8192 \
    --decode-steps 64 --context 1024 --repeats 3 > "$out/bench-$name.json" \
    2> "$out/bench-$name.err"
  echo "bench $name: rc $?"
done
if [ -n "$profile" ]; then
  timeout 300 ./kimi-bench-model "k3-mini-$profile.kimi" --prefill-tokens 8192 \
    --decode-steps 8 --context 1024 --repeats 1 --profile --profile-rows 400 \
    > "$out/profile-$profile.json" 2> "$out/profile-$profile.txt"
  echo "profile $profile: rc $?"
fi
if [ $eager = 1 ]; then
  (cd "$root" && timeout 400 python3 bench/baselines/k3_eager.py \
     --config models/k3-mini.json --random-weights 1 --prefill-tokens 8192 \
     --decode-batches 1,64 --decode-steps 16 --repeats 3 \
     > "$out/eager.json" 2> "$out/eager.err")
  echo "eager: rc $?"
fi
python3 - "$out" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        j = json.load(open(f))
    except Exception as e:
        print(os.path.basename(f), "unreadable:", e); continue
    p = j.get("prefill", {})
    d = j.get("decode", [])
    def step(x):
        s = "b%s %.2f ms" % (x.get("batch"), x.get("ms_per_step_median", x.get("ms", 0)))
        if "ms_per_single_step_median" in x:
            s += " (single step %.2f ms, %s replays, %s captures)" % (
                x["ms_per_single_step_median"], x.get("graph_replays"), x.get("graph_captures"))
        return s
    ds = ", ".join(step(x) for x in d) if isinstance(d, list) else str(d)[:120]
    print("%-22s prefill %s: %s ms | %s" % (os.path.basename(f), p.get("tokens"), p.get("ms_median", p.get("ms")), ds))
PY
