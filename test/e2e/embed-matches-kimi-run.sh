#!/usr/bin/env bash
# The C embedding example and kimi-run generate the same greedy tokens from
# the same compiled k3-tiny artifact and weights file; kimi-run refuses bad
# input with a message naming it.
#   usage: embed-matches-kimi-run.sh KIMI_RUN KIMI_EMBED MODEL.kimi WORKDIR
set -euo pipefail
run=$1 embed=$2 model=$3 work=$4
mkdir -p "$work"
weights="$work/k3-tiny-seed7.safetensors"

from_run=$("$run" "$model" --random-weights 7 --save-weights "$weights" \
  --prompt-ids 1,2,3,4,5 --max-new-tokens 8 | sed -n 's/^generated: //p')
from_embed=$("$embed" -p 1,2,3,4,5 -n 8 "$model" "$weights" 2>/dev/null |
  sed -n 's/^generated: //p')
echo "kimi-run:   $from_run"
echo "kimi-embed: $from_embed"
[ -n "$from_run" ] && [ "$from_run" = "$from_embed" ]

# --dump-logits: 5 prompt rows + 7 decode rows of 512 f32 logits, and the
# greedy tokens are the arg-max of the rows that produced them.
"$run" "$model" --weights "$weights" --prompt-ids 1,2,3,4,5 --max-new-tokens 8 \
  --dump-logits "$work/logits.f32" >/dev/null
size=$(stat -c %s "$work/logits.f32")
[ "$size" -eq $((12 * 512 * 4)) ] || { echo "dumped $size bytes"; exit 1; }
dumped=$(python3 - "$work/logits.f32" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
rows = [struct.unpack_from("<512f", data, 4 * 512 * r) for r in range(12)]
print(" ".join(str(max(range(512), key=row.__getitem__)) for row in rows[4:]))
PY
)
echo "from dump:  $dumped"
[ "$dumped" = "$from_run" ]

expect_error() { # expected-substring command...
  local want=$1; shift
  local out
  if out=$("$@" 2>&1); then
    echo "expected failure: $*"; exit 1
  fi
  grep -qF -- "$want" <<<"$out" || { echo "missing '$want' in: $out"; exit 1; }
}
expect_error "token id 512 at position 1 is outside the vocabulary [0, 512)" \
  "$run" "$model" --weights "$weights" --prompt-ids 3,512
head -c 1000 "$model" >"$work/truncated.kimi"
expect_error "artifact truncated" \
  "$run" "$work/truncated.kimi" --weights "$weights" --prompt-ids 1
expect_error "give exactly one of --weights and --random-weights" \
  "$run" "$model" --prompt-ids 1
echo "ok"
