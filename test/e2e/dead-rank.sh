#!/usr/bin/env bash
# A rank that dies or stops mid-run (issue 36): the job ends within a bound,
# never hangs, and says which rank. A partitioned k3-shard (N ranks) decodes
# under mpirun; rank 1 is
#   killed (SIGKILL) 0.5 s after the prompt line: mpirun ends the job and
#     names rank 1;
#   stopped (SIGSTOP): the other ranks' collectives wait --comm-timeout (3 s)
#     and end with "kimi: error: rank R: OP over N ranks has not completed".
# Each case must end within 60 s with a non-zero status.
#   usage: dead-rank.sh KIMI_COMPILE KIMI_RUN CONFIG RANKS STRATEGY WORKDIR -- MPIEXEC... NP_FLAG
set -uo pipefail
compile=$1 run=$2 config=$3 ranks=$4 strategy=$5 work=$6
shift 6
[ "$1" = "--" ] && shift
rm -rf "$work" && mkdir -p "$work"
model="$work/dead-rank-$strategy-$ranks.kimi"
"$compile" "$config" --target cpu --grid "$ranks" --strategy "$strategy" -o "$model" || exit 1

# The pid of rank 1 of the job running $model (Open MPI sets the variable).
rank1() {
  for p in $(pgrep -f -- "$model"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
      echo "$p"; return 0
    fi
  done
  return 1
}

fails=0
for signal in KILL STOP; do
  out="$work/$signal.out" err="$work/$signal.err"
  "$@" "$ranks" "$run" "$model" --random-weights 3 --prompt-random 500 \
    --max-new-tokens 3500 --comm-timeout 3 > "$out" 2> "$err" &
  job=$!
  for _ in $(seq 600); do grep -q "^prompt:" "$out" && break; sleep 0.1; done
  sleep 0.5
  victim=$(rank1) || { echo "FAIL ($signal): rank 1 not found (the run ended first?)"; fails=1; wait $job; continue; }
  kill -"$signal" "$victim"
  start=$(date +%s%N)
  for _ in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  if kill -0 $job 2>/dev/null; then
    echo "FAIL ($signal): the job still runs 60 s after rank 1 was signalled"
    kill -9 "$victim" $job 2>/dev/null; pkill -9 -f -- "$model"; fails=1; continue
  fi
  wait $job; rc=$?
  pkill -9 -f -- "$model" 2>/dev/null  # a stopped rank mpirun left behind
  echo "$signal: the job ended ${elapsed_ms} ms after rank 1 was signalled, status $rc"
  grep -h -E "kimi: error|rank 1|exited on signal" "$err" "$out" | head -4
  if [ "$rc" = 0 ]; then echo "FAIL ($signal): status 0"; fails=1; fi
  if [ "$signal" = KILL ] && ! grep -q "rank 1" "$err" "$out"; then
    echo "FAIL (KILL): no message names rank 1"; fails=1
  fi
  if [ "$signal" = STOP ] && ! grep -q "kimi: error: rank [0-9]*: [a-zA-Z]* over $ranks ranks has not completed after 3 s (--comm-timeout)" "$err"; then
    echo "FAIL (STOP): no rank reported the timeout"; fails=1
  fi
done
exit $fails
