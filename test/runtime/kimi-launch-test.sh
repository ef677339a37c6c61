#!/usr/bin/env bash
# kimi-launch, the launcher of GPU ranks, with a stand-in for kimi-run:
# every rank 0..N-1 starts once with the same fresh store, a failing rank's
# status comes back and stops the others (which would wait in NCCL), and a
# bad command line is a usage error.
#   usage: kimi-launch-test.sh KIMI_LAUNCH WORKDIR
set -uo pipefail
launch=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

# The stand-in: records "rank store", then exits with $CODE on rank $BAD
# (else sleeps $NAP seconds and succeeds).
cat > "$work/rank.sh" <<'SH'
#!/usr/bin/env bash
rank=$2 store=$4
echo "$rank $store" >> "$LOG"
[ "$rank" = "${BAD:--1}" ] && exit "$CODE"
exec sleep "${NAP:-0}"
SH
chmod +x "$work/rank.sh"

export LOG=$work/ranks.log
"$launch" -np 4 "$work/rank.sh" || fail "four good ranks: status $?"
[ "$(cut -d' ' -f1 "$LOG" | sort -n | tr '\n' ' ')" = "0 1 2 3 " ] ||
  fail "ranks started: $(cut -d' ' -f1 "$LOG" | tr '\n' ' ')"
[ "$(cut -d' ' -f2 "$LOG" | sort -u | wc -l)" = 1 ] || fail "ranks got different stores"
store=$(head -1 "$LOG" | cut -d' ' -f2)
[ ! -e "$store" ] || fail "the store $store was left behind"

: > "$LOG"
start=$(date +%s)
BAD=2 CODE=7 NAP=60 "$launch" -np 3 "$work/rank.sh"
status=$?
took=$(( $(date +%s) - start ))
[ "$status" = 7 ] || fail "a failing rank's status: got $status, want 7"
[ "$took" -lt 30 ] || fail "the other ranks were not stopped ($took s)"

"$launch" -np 0 "$work/rank.sh" > /dev/null 2>&1
[ $? = 2 ] || fail "-np 0 is not a usage error"
"$launch" "$work/rank.sh" > /dev/null 2>&1
[ $? = 2 ] || fail "a missing -np is not a usage error"
echo "PASS"
