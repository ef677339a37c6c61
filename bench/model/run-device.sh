#!/usr/bin/env bash
# On the H200 (device machine), with gpucheck/ from prepare-device.sh carried:
# the GPU model tests on k3-tiny, then kimi-bench-model on every k3-mini
# artifact there, then the PyTorch eager baseline. JSON and logs go to $OUT
# (or ./device-out); the last lines printed are a short table.
#
#   bench/model/run-device.sh [--no-tests] [--no-bench] [--no-eager] [--profile NAME]
#                             [--model-tests GTEST_FILTER] [--no-pdl NAME] [--ncu NAME]
#                             [--no-in-place NAME] [--ncu-detail NAME REGEX]
#                             [--ncu-source NAME REGEX]
# --no-pdl NAME: also time k3-mini-NAME.kimi with KIMI_GPU_PDL=0 (plain
#   launches), as bench-NAME-nopdl.json.
# --no-in-place NAME: also time k3-mini-NAME.kimi with
#   KIMI_GPU_STATES_IN_PLACE=0 (decode graphs copy the states in and out),
#   as bench-NAME-noinplace.json, and with KIMI_GPU_STATE_COPY_KERNEL=0
#   (in place, copied back by memcpy nodes), as bench-NAME-memcpy.json.
# --ncu NAME: Nsight Compute's duration of every kernel of one batch-1
#   decode step of k3-mini-NAME.kimi (step 4 of 8, graphs replayed), as
#   ncu-NAME.csv; needs hardware counters (Firecracker machines).
# --ncu-detail NAME REGEX: Nsight Compute's throughput, occupancy and warp
#   stall sections for the first kernel of each name matching REGEX in that
#   decode step, as ncu-detail-NAME.txt.
# --ncu-source NAME REGEX: the first kernel matching REGEX, SASS instruction
#   by instruction with its warp-stall samples (ncu's source page), as
#   ncu-source-NAME.csv; prints the instructions holding the most samples.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root/gpucheck" || exit 1
out=${OUT:-$root/device-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for z in *.kimi.gz models/*.kimi.gz kda/*.kimi.gz attn_res/*.kimi.gz moe/*.kimi.gz; do
  [ -f "$z" ] && gunzip -f "$z"
done
tests=1 eager=1 bench=1 profile="" filter="*" nopdl="" ncu="" noinplace=""
detail="" detailRegex="" source="" sourceRegex=""
while [ $# -gt 0 ]; do
  case $1 in
    --no-tests) tests=0 ;;
    --no-eager) eager=0 ;;
    --no-bench) bench=0 ;;
    --profile) profile=$2; shift ;;
    --model-tests) filter=$2; shift ;;
    --no-pdl) nopdl=$2; shift ;;
    --ncu) ncu=$2; shift ;;
    --no-in-place) noinplace=$2; shift ;;
    --ncu-detail) detail=$2; detailRegex=$3; shift 2 ;;
    --ncu-source) source=$2; sourceRegex=$3; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$out/gpu.txt"
if [ $tests = 1 ]; then
  KIMI_REQUIRE_GPU=1 ./kimi-gpu-blas-tests 2>&1 | grep -E "error|FAIL|PASSED" 
  if [ -x ./kimi-runtime-cuda-tests ]; then
    KIMI_REQUIRE_GPU=1 ./kimi-runtime-cuda-tests > "$out/cuda-tests.log" 2>&1
    echo "runtime cuda tests: rc $?"; grep -E "^\[ *(FAILED|PASSED) " "$out/cuda-tests.log" | head
  fi
  if [ -x ./kimi-gpu-kernel-tests ]; then
    KIMI_REQUIRE_GPU=1 KIMI_KDA_ARTIFACT_DIR=$PWD/kda KIMI_ATTNRES_ARTIFACT_DIR=$PWD/attn_res \
      KIMI_MOE_ARTIFACT_DIR=$PWD/moe \
      ./kimi-gpu-kernel-tests > "$out/kernel-tests.log" 2>&1
    echo "kernel tests: rc $?"; grep -E "^\[ *(FAILED|PASSED|error) " "$out/kernel-tests.log" | head -30
  fi
  KIMI_REQUIRE_GPU=1 KIMI_MODEL_GPU_ARTIFACT_DIR=$PWD/models ./kimi-gpu-model-tests \
    --gtest_filter="$filter" > "$out/model-tests.log" 2>&1
  echo "model tests: rc $?"
  # The errors and floors of every case, then the verdicts (a call's output
  # tail is 12,000 characters: the OK lines are counted, not listed).
  grep -E "^\[ *(errors|floor|graphs) " "$out/model-tests.log" | head -60
  echo "model tests OK: $(grep -c '^\[       OK \]' "$out/model-tests.log")"
  grep -E "^\[ *(FAILED|PASSED) " "$out/model-tests.log" | head -20
fi
# Each k3-mini-cCHUNK[SUFFIX].kimi is timed with k3-mini-b64[SUFFIX].kimi as
# its batched artifact (the first such one per suffix: f32 against the
# default stored types, side by side).
used=" "
shopt -s nullglob
for a in $([ $bench = 1 ] && echo k3-mini-c*.kimi); do
  name=${a#k3-mini-}; name=${name%.kimi}
  suffix=$(echo "$name" | sed 's/^c[0-9]*//')
  extra=""
  if [ -f "k3-mini-b64$suffix.kimi" ] && [[ "$used" != *" $suffix "* ]]; then
    extra="--batch-artifact k3-mini-b64$suffix.kimi"; used="$used$suffix "
  fi
  timeout 300 ./kimi-bench-model "$a" $extra --prefill-tokens 8192 \
    --decode-steps 64 --context 1024 --repeats 3 > "$out/bench-$name.json" \
    2> "$out/bench-$name.err"
  echo "bench $name: rc $?"
done
# Kimi-Linear-48B-A3B at full size (prepare-device.sh --kl48): its weights
# (98 GB in bf16) are generated on the device; the batch-1 model is
# released before the batch-64 one loads.
for a in $([ $bench = 1 ] && echo kimi-linear-48b-c*.kimi); do
  name=${a%.kimi}
  extra=""
  [ -f kimi-linear-48b-b64.kimi ] && extra="--batch-artifact kimi-linear-48b-b64.kimi"
  timeout 420 ./kimi-bench-model "$a" $extra --device-random-weights \
    --prefill-tokens 8192 --decode-steps 64 --context 1024 --repeats 2 \
    > "$out/bench-$name.json" 2> "$out/bench-$name.err"
  echo "bench $name: rc $?"
done
if [ -n "$nopdl" ]; then
  KIMI_GPU_PDL=0 timeout 300 ./kimi-bench-model "k3-mini-$nopdl.kimi" --prefill-tokens 8192 \
    --decode-steps 64 --context 1024 --repeats 3 > "$out/bench-$nopdl-nopdl.json" \
    2> "$out/bench-$nopdl-nopdl.err"
  echo "bench $nopdl without PDL: rc $?"
fi
if [ -n "$noinplace" ]; then
  KIMI_GPU_STATES_IN_PLACE=0 timeout 300 ./kimi-bench-model "k3-mini-$noinplace.kimi" \
    --prefill-tokens 8192 --decode-steps 64 --context 1024 --repeats 3 \
    > "$out/bench-$noinplace-noinplace.json" 2> "$out/bench-$noinplace-noinplace.err"
  echo "bench $noinplace with states copied: rc $?"
  KIMI_GPU_STATE_COPY_KERNEL=0 timeout 300 ./kimi-bench-model "k3-mini-$noinplace.kimi" \
    --prefill-tokens 8192 --decode-steps 64 --context 1024 --repeats 3 \
    > "$out/bench-$noinplace-memcpy.json" 2> "$out/bench-$noinplace-memcpy.err"
  echo "bench $noinplace with memcpy nodes: rc $?"
fi
if [ -n "$ncu" ]; then
  timeout 400 ncu --clock-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --csv \
    ./kimi-bench-model "k3-mini-$ncu.kimi" --prefill-tokens 8192 --decode-steps 8 \
    --repeats 1 --cuda-profiler-step 4 > "$out/ncu-$ncu.csv" 2> "$out/ncu-$ncu.err"
  echo "ncu $ncu: rc $?"
  python3 - "$out/ncu-$ncu.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
# The bench's JSON comes first; its lines may have many commas too.
rows = rows[next((i for i, r in enumerate(rows) if "Kernel Name" in r), len(rows)):]
if not rows:
    print("ncu: no kernel rows"); sys.exit(0)
h = rows[0]; k = h.index("Kernel Name"); v = h.index("Metric Value"); u = h.index("Metric Unit")
by = collections.defaultdict(lambda: [0, 0.0])
total = 0.0
for r in rows[1:]:
    try: t = float(r[v].replace(",", ""))
    except ValueError: continue
    t *= {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(r[u], 1e-3)
    name = r[k].split("(")[0]
    by[name][0] += 1; by[name][1] += t; total += t
print("ncu: %d kernels, %.1f us of kernel time in one decode step" % (sum(c for c, _ in by.values()), total))
for name, (c, t) in sorted(by.items(), key=lambda x: -x[1][1])[:25]:
    print("  %8.1f us %4d x  %s" % (t, c, name[:90]))
PY
fi
if [ -n "$detail" ]; then
  timeout 400 ncu --clock-control none --profile-from-start off \
    --kernel-id "::regex:$detailRegex:1" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats \
    ./kimi-bench-model "k3-mini-$detail.kimi" --prefill-tokens 8192 --decode-steps 8 \
    --repeats 1 --cuda-profiler-step 4 > "$out/ncu-detail-$detail.txt" \
    2> "$out/ncu-detail-$detail.err"
  echo "ncu detail $detail: rc $?"
  grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Warp Cycles Per Issued|Stall" \
    "$out/ncu-detail-$detail.txt" | head -80
fi
if [ -n "$source" ]; then
  timeout 400 ncu --clock-control none --profile-from-start off \
    --kernel-id "::regex:$sourceRegex:1" --section SourceCounters \
    --section WarpStateStats --page source --print-source sass --csv \
    ./kimi-bench-model "k3-mini-$source.kimi" --prefill-tokens 8192 --decode-steps 8 \
    --repeats 1 --cuda-profiler-step 4 > "$out/ncu-source-$source.csv" \
    2> "$out/ncu-source-$source.err"
  echo "ncu source $source: rc $?"
  python3 - "$out/ncu-source-$source.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
start = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
if start is None:
    print("ncu source: no instruction rows"); sys.exit(0)
h = rows[start]; data = [r for r in rows[start + 1:] if len(r) == len(h)]
si, src = h.index("Warp Stall Sampling (All Samples)"), h.index("Source")
total = sum(float(r[si] or 0) for r in data) or 1.0
print("ncu source: %d instructions, %d stall samples" % (len(data), total))
for k in sorted(range(len(data)), key=lambda k: -float(data[k][si] or 0))[:20]:
    print("  %5.1f%%  #%-5d %s" % (100 * float(data[k][si] or 0) / total, k, data[k][src][:80]))
PY
fi
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
python3 "$root/bench/model/summarize.py" "$out"
