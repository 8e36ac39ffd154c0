#!/bin/bash
# Device call 2 of 2026-12-04: the one-pass 8-bit planes in v2u2 (the GEMV of M = 9-16 on layers
# of 32 Mi weights or more), against v2u2 plane by plane (NIBBLE_CUDA_GEMV_PLANES8=0).
# 1. Conformance with v2u2 forced, planes8 1 and 0; the automatic choice; test_cuda_graph.
# 2. `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 9,12,16 --bits 8
#    --budget 0.15` (automatic choice, cuBLAS fp16 dense in the same run), planes8 1 and 0
#    alternating, 2 rounds.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble; CONF=$here/build/tests/test_conformance
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call2 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
for c in v2u2:1 v2u2:0 auto:1; do
  k=${c%%:*}; p8=${c#*:}; req=(); [ $k = auto ] || req=(NIBBLE_TEST_REQUIRE_KERNEL=$k)
  (env NIBBLE_CUDA_KERNEL=$k NIBBLE_CUDA_GEMV_PLANES8=$p8 "${req[@]}" NIBBLE_TEST_BACKEND=cuda_w4a16 \
     NIBBLE_TEST_PLUGIN_DIRS=$P timeout 240 "$CONF" > "$TMP/conf.$k.$p8" 2>&1; echo "exit=$?" >> "$TMP/conf.$k.$p8") &
done
(NIBBLE_TEST_PLUGIN_DIRS=$P timeout 200 build/tests/test_cuda_graph > "$TMP/conf.graph" 2>&1; echo "exit=$?" >> "$TMP/conf.graph") &
wait
for f in "$TMP"/conf.*; do
  say "   ${f##*/conf.}: $(grep -m1 -E 'cases checked|graph launches' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
  grep -m3 -E "ERROR|out of tolerance" "$f" | tee -a "$S"
done
for round in 1 2; do
  for p8 in 1 0; do
    [ $((SECONDS - T0)) -lt 480 ] || { say "-- r$round p8=$p8 skipped (time)"; continue; }
    NIBBLE_CUDA_GEMV_PLANES8=$p8 NIBBLE_PLUGIN_PATH=$P timeout 100 "$NIBBLE" bench --backend cuda_w4a16 \
      --shapes llama3-8b,llama3-70b --m 9,12,16 --bits 8 --budget 0.15 > "$TMP/b.txt" 2>&1
    say "-- r$round p8=$p8: exit $? after $((SECONDS - T0)) s"
    { echo "== round $round planes8 $p8"; cat "$TMP/b.txt"; } >> "$OUT/bench.txt"
    grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r$round b8 p8:$p8 /" >> "$S"
  done
done
say "== done in $((SECONDS - T0)) s"
