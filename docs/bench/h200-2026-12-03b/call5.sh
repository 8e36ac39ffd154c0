#!/bin/bash
# Device call 5 of 2026-12-03b (issue 17's 8-bit M = 1 target): more GEMV warps per SM. v1 holds
# 124-126 registers, so 4 blocks of 4 warps fit an SM; the same source built with
# __launch_bounds__(128, 5) (96 registers, 48-60 bytes of spills) and (128, 6) (80 registers,
# 192-228 bytes) lets 5 or 6 in. Those two builds of the plugin (alt5/, alt6/: this tree with only
# that line changed) against this tree's, `nibble bench --backend cuda_w4a16 --shapes
# llama3-8b,llama3-70b --m 1,4,8 --bits 8|4 --no-dense`, alternating, 2 rounds; then the
# conformance suite on the fastest alternative with v1 forced. Bundle as call1.sh plus alt5/, alt6/.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble; CONF=$here/build/tests/test_conformance
for z in "$P"/*.xz "$here"/alt*/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call5 $(date -u +%FT%TZ)"
for round in 1 2; do
  for bits in 8 4; do
    for side in base alt5 alt6; do
      dir=$P; [ $side != base ] && dir=$here/$side
      [ $((SECONDS - T0)) -lt 400 ] || { say "-- r$round b$bits $side skipped (time)"; continue; }
      echo "== round $round bits $bits $side" >> "$OUT/bench.txt"
      NIBBLE_CUDA_KERNEL=v1 NIBBLE_PLUGIN_PATH=$dir timeout 80 "$NIBBLE" bench --backend cuda_w4a16 \
        --shapes llama3-8b,llama3-70b --m 1,4,8 --bits $bits --no-dense --budget 0.15 > "$TMP/b.txt" 2>&1
      say "-- r$round b$bits $side: exit $? after $((SECONDS - T0)) s"
      cat "$TMP/b.txt" >> "$OUT/bench.txt"
      grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r$round b$bits $side /" >> "$S"
    done
  done
done
for side in alt5 alt6; do
  (NIBBLE_CUDA_KERNEL=v1 NIBBLE_TEST_REQUIRE_KERNEL=v1 NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$here/$side \
     timeout 150 "$CONF" > "$TMP/conf.$side" 2>&1; echo "exit=$?" >> "$TMP/conf.$side") &
done
wait
for side in alt5 alt6; do say "   conformance $side v1: $(grep -m1 'cases checked' "$TMP/conf.$side" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$TMP/conf.$side")"; done
say "== done in $((SECONDS - T0)) s"
