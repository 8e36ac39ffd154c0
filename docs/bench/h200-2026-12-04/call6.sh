#!/bin/bash
# Device call 6 of 2026-12-04: is v2u2 slower than on 2026-12-03 (4 bits, 8192x57344 M = 16: 98.5 µs
# in 2026-12-03 call 7, 121.7 in today's call 4)? Three plugins: old/ = commit 12b58a7 (before v2u2
# was bounded to 4 blocks per SM, 22e676a), cur/ = 540ac33, fix/ = this tree (v2u2 unbounded again).
# `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 9,16 --bits 4|8 --no-dense
# --budget 0.15`, fp16, automatic choice, and v2u2 forced at 4 bits; 2 rounds, alternating.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NIBBLE=$here/build/tools/nibble/nibble
for z in "$here"/old/*.xz "$here"/cur/*.xz "$here"/fix/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call6 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$here/fix timeout 200 build/tests/test_conformance > "$TMP/c" 2>&1
say "   conformance fix (auto): exit $? $(grep -m1 'cases checked' "$TMP/c")"
NIBBLE_CUDA_KERNEL=v2u2 NIBBLE_TEST_REQUIRE_KERNEL=v2u2 NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$here/fix timeout 200 build/tests/test_conformance > "$TMP/c" 2>&1
say "   conformance fix (v2u2): exit $? $(grep -m1 'cases checked' "$TMP/c")"
for round in 1 2; do
  for cfg in auto:4 auto:8 v2u2:4; do
    k=${cfg%%:*}; bits=${cfg#*:}
    for side in old cur fix; do
      [ $((SECONDS - T0)) -lt 170 ] || { say "-- r$round $cfg $side skipped (time)"; continue; }
      NIBBLE_CUDA_KERNEL=$k NIBBLE_PLUGIN_PATH=$here/$side timeout 60 "$NIBBLE" bench --backend cuda_w4a16 \
        --shapes llama3-8b,llama3-70b --m 9,16 --bits $bits --no-dense --budget 0.15 > "$TMP/b.txt" 2>&1
      say "-- r$round $cfg $side: exit $? after $((SECONDS - T0)) s"
      { echo "== round $round $cfg $side"; cat "$TMP/b.txt"; } >> "$OUT/bench.txt"
      grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r$round b$bits $side:$k /" >> "$S"
    done
  done
done
say "== done in $((SECONDS - T0)) s"
