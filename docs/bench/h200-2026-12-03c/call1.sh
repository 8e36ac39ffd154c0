#!/bin/bash
# Device call 1 of 2026-12-03c (issue 17's 8-bit M = 1 target): the bulk-copy GEMV (gemv_bulk.cu:
# a producer warp fills a shared-memory ring per compute warp) against v1.
# 1. Conformance with each GEMV kernel forced (vb4, vb3 new; v1 v2 v4 v2u2 because gemv.cu now
#    takes its arithmetic from gemv_core.cuh), and every fixture through nibble verify with vb4
#    and with vb3 forced.
# 2. `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 1,4,8 --bits 8|4
#    --no-dense --budget 0.15` with NIBBLE_CUDA_KERNEL = v1 on the previous commit's plugin (old/),
#    v1, vb4, vb3 on this tree's, alternating, 3 rounds.
# Bundle: gpu_check.sh bundle, old/cuda_w4a16.so (the plugin of the commit before), xz'd.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble; CONF=$here/build/tests/test_conformance
for z in "$P"/*.xz "$here"/old/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call1 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)"
for k in vb4 vb3 v1 v2 v4 v2u2; do
  (NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P \
     timeout 240 "$CONF" > "$TMP/conf.$k" 2>&1; echo "exit=$?" >> "$TMP/conf.$k") &
done
for k in vb4 vb3; do
  for f in tests/data/fixtures/*/; do
    n=$(basename "$f")
    (NIBBLE_CUDA_KERNEL=$k NIBBLE_PLUGIN_PATH=$P timeout 200 "$NIBBLE" verify --backend cuda_w4a16 --model "$f" \
       --reference "$f/reference.safetensors" > "$TMP/fix.$k.$n" 2>&1; echo "exit=$?" >> "$TMP/fix.$k.$n") &
  done
done
wait
{ for f in "$TMP"/conf.* "$TMP"/fix.*; do echo "== ${f##*/}"; tail -12 "$f"; done; } > "$OUT/correctness.log"
for k in vb4 vb3 v1 v2 v4 v2u2; do
  say "   conformance $k: $(grep -m1 'cases checked' "$TMP/conf.$k" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$TMP/conf.$k")"
done
for k in vb4 vb3; do
  say "   fixtures $k: $(grep -l 'exit=0' "$TMP"/fix.$k.* | wc -l) of $(ls "$TMP"/fix.$k.* | wc -l) exit 0"
  grep -L "exit=0" "$TMP"/fix.$k.* 2>/dev/null | sed 's/.*fix\./   failed: /' | tee -a "$S"
done
say "-- correctness done after $((SECONDS - T0)) s"
for round in 1 2 3; do
  for bits in 8 4; do
    for side in old:v1 new:v1 new:vb4 new:vb3; do
      tree=${side%%:*}; k=${side#*:}; dir=$P; [ $tree = old ] && dir=$here/old
      [ $((SECONDS - T0)) -lt 480 ] || { say "-- r$round b$bits $side skipped (time)"; continue; }
      echo "== round $round bits $bits $side" >> "$OUT/bench.txt"
      NIBBLE_CUDA_KERNEL=$k NIBBLE_PLUGIN_PATH=$dir timeout 80 "$NIBBLE" bench --backend cuda_w4a16 \
        --shapes llama3-8b,llama3-70b --m 1,4,8 --bits $bits --no-dense --budget 0.15 > "$TMP/b.txt" 2>&1
      say "-- r$round b$bits $side: exit $? after $((SECONDS - T0)) s"
      cat "$TMP/b.txt" >> "$OUT/bench.txt"
      grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r$round b$bits $side /" >> "$S"
    done
  done
done
say "== done in $((SECONDS - T0)) s"
