#!/bin/bash
# Device call 3 of 2026-12-04:
# 1. tests/test_cuda_graph with rocm_w4a16's source built by nvcc (rocm_w4a16_on_cuda) and again
#    with cuda_w4a16.
# 2. Which GEMV for 8-bit layers at M = 9-16: `nibble bench --backend cuda_w4a16 --shapes
#    llama3-8b,llama3-70b --m 9,16 --bits 8 --no-dense --budget 0.15 --dtype f16|bf16` with
#    v2u2 (the plan's choice on every llama shape at 8 bits) and v1 (two m tiles) forced,
#    alternating, 2 rounds.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; R=$here/build/plugins/rocm_w4a16/on_cuda; NIBBLE=$here/build/tools/nibble/nibble
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call3 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
NIBBLE_TEST_BACKEND=rocm_w4a16_on_cuda NIBBLE_TEST_PLUGIN_DIRS=$R timeout 200 build/tests/test_cuda_graph -s > "$OUT/graph_rocm_on_cuda.log" 2>&1
say "   test_cuda_graph rocm_w4a16_on_cuda: exit $? $(grep -m1 'graph launches' "$OUT/graph_rocm_on_cuda.log")"
grep -m4 -E "ERROR" -A3 "$OUT/graph_rocm_on_cuda.log" | tee -a "$S"
NIBBLE_TEST_PLUGIN_DIRS=$P timeout 200 build/tests/test_cuda_graph > "$TMP/g.log" 2>&1
say "   test_cuda_graph cuda_w4a16: exit $? $(grep -m1 'graph launches' "$TMP/g.log")"
for round in 1 2; do
  for dt in f16 bf16; do
    for k in v2u2 v1; do
      [ $((SECONDS - T0)) -lt 500 ] || { say "-- r$round $dt $k skipped (time)"; continue; }
      NIBBLE_CUDA_KERNEL=$k NIBBLE_PLUGIN_PATH=$P timeout 80 "$NIBBLE" bench --backend cuda_w4a16 \
        --shapes llama3-8b,llama3-70b --m 9,16 --bits 8 --dtype $dt --no-dense --budget 0.15 > "$TMP/b.txt" 2>&1
      say "-- r$round $dt $k: exit $? after $((SECONDS - T0)) s"
      { echo "== round $round $dt $k"; cat "$TMP/b.txt"; } >> "$OUT/bench.txt"
      grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r$round b8 $dt:$k /" >> "$S"
    done
  done
done
say "== done in $((SECONDS - T0)) s"
