#!/bin/bash
# Device call 4 of 2026-12-03b (issue 17's 8-bit M = 1 target): the pipelined GEMV v1p (two
# batches of half the size, the next loading while one computes) against v1. Call 3 found a plain
# read of the same bytes in v1's grid 1.3x faster than v1 on the N = 8192-10240 layers: the time a
# warp computes with nothing in flight is the suspect. First the conformance suite with v1p forced
# (and v1), then `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 1,4,8 --bits
# 8|4 --no-dense` with NIBBLE_CUDA_KERNEL=v1 and =v1p, alternating, 2 rounds. Bundle as call1.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble; CONF=$here/build/tests/test_conformance
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call4 $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$S"
for k in v1p v1; do
  (NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P \
     timeout 300 "$CONF" > "$TMP/conf.$k" 2>&1; echo "exit=$?" >> "$TMP/conf.$k") &
done
wait
for k in v1p v1; do say "   conformance $k: $(grep -m1 'cases checked' "$TMP/conf.$k" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$TMP/conf.$k")"; done
grep -E "FAIL|ERROR|out of tolerance" "$TMP/conf.v1p" | head -20 >> "$S"
for round in 1 2; do
  for bits in 8 4; do
    for k in v1 v1p; do
      [ $((SECONDS - T0)) -lt 420 ] || { say "-- r$round b$bits $k skipped (time)"; continue; }
      echo "== round $round bits $bits kernel $k" >> "$OUT/bench.txt"
      NIBBLE_CUDA_KERNEL=$k NIBBLE_PLUGIN_PATH=$P timeout 80 "$NIBBLE" bench --backend cuda_w4a16 \
        --shapes llama3-8b,llama3-70b --m 1,4,8 --bits $bits --no-dense --budget 0.15 > "$TMP/b.txt" 2>&1
      say "-- r$round b$bits $k: exit $? after $((SECONDS - T0)) s"
      cat "$TMP/b.txt" >> "$OUT/bench.txt"
      grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r$round b$bits /" | tee -a "$S"
    done
  done
done
say "== done in $((SECONDS - T0)) s"
