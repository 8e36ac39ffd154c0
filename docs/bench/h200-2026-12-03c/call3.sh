#!/bin/bash
# Device call 3 of 2026-12-03c (issue 17's 8-bit M = 1 target): fewer instructions per weight byte
# in the GEMV. This tree (bulk-copy GEMV removed) against the plugin of commit 12b58a7 (old/):
#  - whole batches load with constant offsets and no bounds checks (v1, every width);
#  - 8-bit layers' two nibble planes dequantized in one pass (v1, fp16; option gemv_planes8, on by
#    default; NIBBLE_CUDA_GEMV_PLANES8=0 runs plane by plane as before).
# 1. Conformance: v1, v1 with planes8 off, v2, v4, v2u2, auto; the fixtures (auto).
# 2. Nsight Compute: instructions, issue and DRAM of v1 old / new / new without planes8 on
#    8192x8192 and 8192x57344, 8 bits M = 1.
# 3. `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 1,4,8 --bits 8|4
#    --no-dense --budget 0.15`, v1 forced: old, new, new with planes8 off (8 bits), alternating,
#    3 rounds.
# 4. The SASS of the new v1 fp16 kernels (both instances), for reading here.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble; CONF=$here/build/tests/test_conformance
for z in "$P"/*.xz "$here"/old/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call3 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)"
for c in v1 v1:0 v2 v4 v2u2 auto; do
  k=${c%%:*}; p8=1; [ "$c" != "$k" ] && p8=${c#*:}
  req=(); [ $k = auto ] || req=(NIBBLE_TEST_REQUIRE_KERNEL=$k)
  (env NIBBLE_CUDA_KERNEL=$k NIBBLE_CUDA_GEMV_PLANES8=$p8 "${req[@]}" NIBBLE_TEST_BACKEND=cuda_w4a16 \
     NIBBLE_TEST_PLUGIN_DIRS=$P timeout 240 "$CONF" > "$TMP/conf.$k.$p8" 2>&1; echo "exit=$?" >> "$TMP/conf.$k.$p8") &
done
for f in tests/data/fixtures/*/; do
  n=$(basename "$f")
  (NIBBLE_PLUGIN_PATH=$P timeout 200 "$NIBBLE" verify --backend cuda_w4a16 --model "$f" \
     --reference "$f/reference.safetensors" > "$TMP/fix.$n" 2>&1; echo "exit=$?" >> "$TMP/fix.$n") &
done
wait
{ for f in "$TMP"/conf.* "$TMP"/fix.*; do echo "== ${f##*/}"; tail -12 "$f"; done; } > "$OUT/correctness.log"
for f in "$TMP"/conf.*; do
  say "   conformance ${f##*/conf.}: $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
done
say "   fixtures: $(grep -l 'exit=0' "$TMP"/fix.* | wc -l) of $(ls "$TMP"/fix.* | wc -l) exit 0"
grep -L "exit=0" "$TMP"/fix.* 2>/dev/null | sed 's/.*fix\./   failed: /' | tee -a "$S"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for shape in 8192x8192 8192x57344; do
  for side in old new new:0; do
    dir=$P; [ $side = old ] && dir=$here/old; p8=1; [ $side = new:0 ] && p8=0
    NIBBLE_CUDA_KERNEL=v1 NIBBLE_CUDA_GEMV_PLANES8=$p8 NIBBLE_PLUGIN_PATH=$dir timeout 100 "$NCU" --target-processes all \
      --kernel-name regex:gemv --launch-skip 20 --launch-count 1 \
      --metrics smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_active.avg.per_cycle_active,launch__registers_per_thread \
      "$NIBBLE" bench --backend cuda_w4a16 --shapes $shape --m 1 --bits 8 --no-dense --budget 0.05 > "$TMP/ncu.txt" 2>&1
    echo "== $shape $side" >> "$OUT/ncu.txt"; grep -vE "^==PROF==|^ *$" "$TMP/ncu.txt" | tail -10 >> "$OUT/ncu.txt"
    say "   ncu $shape $side: $(grep -E 'inst_executed.sum|issue_active|time_duration|dram__throughput|registers' "$TMP/ncu.txt" | awk '{print $1"="$NF}' | tr '\n' ' ')"
  done
done
say "-- correctness and ncu done after $((SECONDS - T0)) s"
for round in 1 2 3; do
  for bits in 8 4; do
    for side in old:1 new:1 new:0; do
      tree=${side%%:*}; p8=${side#*:}; dir=$P; [ $tree = old ] && dir=$here/old
      [ $bits = 4 ] && [ $side = new:0 ] && continue
      [ $((SECONDS - T0)) -lt 470 ] || { say "-- r$round b$bits $side skipped (time)"; continue; }
      echo "== round $round bits $bits $side" >> "$OUT/bench.txt"
      NIBBLE_CUDA_KERNEL=v1 NIBBLE_CUDA_GEMV_PLANES8=$p8 NIBBLE_PLUGIN_PATH=$dir timeout 80 "$NIBBLE" bench --backend cuda_w4a16 \
        --shapes llama3-8b,llama3-70b --m 1,4,8 --bits $bits --no-dense --budget 0.15 > "$TMP/b.txt" 2>&1
      say "-- r$round b$bits $side: exit $? after $((SECONDS - T0)) s"
      cat "$TMP/b.txt" >> "$OUT/bench.txt"
      grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r$round b$bits $side /" >> "$S"
    done
  done
done
CUOBJ=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
"$CUOBJ" -sass "$P/cuda_w4a16.so" > "$TMP/sass.txt" 2>&1
awk '/Function :.*gemv_kernelI6__halfLi2ELi1ELi4ELb/ {p=1; n=0} /Function :/ && !/gemv_kernelI6__halfLi2ELi1ELi4ELb/ {p=0} p' "$TMP/sass.txt" > "$OUT/sass_v1_f16.txt"
say "   sass: $(wc -l < "$OUT/sass_v1_f16.txt") lines ($(grep -c 'Function :' "$OUT/sass_v1_f16.txt") functions)"
say "== done in $((SECONDS - T0)) s"
