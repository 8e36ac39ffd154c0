#!/bin/bash
# Device call 6 of 2026-12-03b (issue 17's 8-bit M = 1 target): v1a, v1 with its weights through a
# two-batch shared-memory ring per warp (16-byte cp.async: the next batch in flight while one is
# computed, without holding registers), against v1. Sides: base = v1 of this build; v1a = v1a of
# this build (__launch_bounds__(128, 4): 128 registers, 24-32 bytes of spills, 4 blocks per SM);
# alt3 = v1a built with (128, 3) (152-164 registers, no spills, 3 blocks per SM). `nibble bench
# --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 1,4,8 --bits 8|4 --no-dense`, alternating,
# 2 rounds; then the conformance suite with v1a forced on both builds. Bundle as call1.sh plus alt3/.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble; CONF=$here/build/tests/test_conformance
for z in "$P"/*.xz "$here"/alt*/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call6 $(date -u +%FT%TZ)"
for round in 1 2; do
  for bits in 8 4; do
    for side in base v1a alt3; do
      dir=$P; kern=v1a; [ $side = base ] && kern=v1; [ $side = alt3 ] && dir=$here/alt3
      [ $((SECONDS - T0)) -lt 400 ] || { say "-- r$round b$bits $side skipped (time)"; continue; }
      echo "== round $round bits $bits $side" >> "$OUT/bench.txt"
      NIBBLE_CUDA_KERNEL=$kern NIBBLE_PLUGIN_PATH=$dir timeout 80 "$NIBBLE" bench --backend cuda_w4a16 \
        --shapes llama3-8b,llama3-70b --m 1,4,8 --bits $bits --no-dense --budget 0.15 > "$TMP/b.txt" 2>&1
      say "-- r$round b$bits $side: exit $? after $((SECONDS - T0)) s"
      cat "$TMP/b.txt" >> "$OUT/bench.txt"
      grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r$round b$bits $side /" >> "$S"
    done
  done
done
for side in v1a alt3; do
  dir=$P; [ $side = alt3 ] && dir=$here/alt3
  (NIBBLE_CUDA_KERNEL=v1a NIBBLE_TEST_REQUIRE_KERNEL=v1a NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$dir \
     timeout 150 "$CONF" > "$TMP/conf.$side" 2>&1; echo "exit=$?" >> "$TMP/conf.$side") &
done
wait
for side in v1a alt3; do say "   conformance $side v1a: $(grep -m1 'cases checked' "$TMP/conf.$side" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$TMP/conf.$side")"; done
say "== done in $((SECONDS - T0)) s"
