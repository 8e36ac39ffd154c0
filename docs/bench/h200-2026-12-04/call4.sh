#!/bin/bash
# Device call 4 of 2026-12-04: the GEMV's grid with the m tiles of one n tile adjacent in launch
# order (blockIdx.x = n tile * m_tiles + m tile), so that the second m tile at M = 9-16 reads the
# weights from L2, against the tree before (old/, commit 5009360: m tiles outermost).
# 1. Conformance with v1 and v2u2 forced and the automatic choice; test_cuda_graph.
# 2. `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 9,16 --bits 4|8
#    --no-dense --budget 0.15`, fp16: old v1, new v1, new v2u2 forced, alternating, 2 rounds.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble; CONF=$here/build/tests/test_conformance
for z in "$P"/*.xz "$here"/old/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call4 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
for k in v1 v2u2 auto; do
  req=(); [ $k = auto ] || req=(NIBBLE_TEST_REQUIRE_KERNEL=$k)
  (env NIBBLE_CUDA_KERNEL=$k "${req[@]}" NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P \
     timeout 240 "$CONF" > "$TMP/conf.$k" 2>&1; echo "exit=$?" >> "$TMP/conf.$k") &
done
(NIBBLE_TEST_PLUGIN_DIRS=$P timeout 200 build/tests/test_cuda_graph > "$TMP/conf.graph" 2>&1; echo "exit=$?" >> "$TMP/conf.graph") &
wait
for f in "$TMP"/conf.*; do
  say "   ${f##*/conf.}: $(grep -m1 -E 'cases checked|graph launches' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
  grep -m3 -E "ERROR|out of tolerance" "$f" | tee -a "$S"
done
for round in 1 2; do
  for bits in 4 8; do
    for side in old:v1 new:v1 new:v2u2; do
      tree=${side%%:*}; k=${side#*:}; dir=$P; [ $tree = old ] && dir=$here/old
      [ $((SECONDS - T0)) -lt 500 ] || { say "-- r$round b$bits $side skipped (time)"; continue; }
      NIBBLE_CUDA_KERNEL=$k NIBBLE_PLUGIN_PATH=$dir timeout 80 "$NIBBLE" bench --backend cuda_w4a16 \
        --shapes llama3-8b,llama3-70b --m 9,16 --bits $bits --no-dense --budget 0.15 > "$TMP/b.txt" 2>&1
      say "-- r$round b$bits $side: exit $? after $((SECONDS - T0)) s"
      { echo "== round $round bits $bits $side"; cat "$TMP/b.txt"; } >> "$OUT/bench.txt"
      grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r$round b$bits $side /" >> "$S"
    done
  done
done
say "== done in $((SECONDS - T0)) s"
