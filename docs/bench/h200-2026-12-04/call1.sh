#!/bin/bash
# Device call 1 of 2026-12-04: cuda_w4a16 inside CUDA graphs, and the 8-bit M <= 16 figures with
# the automatic choice and the dense baseline.
# 1. tests/test_cuda_graph with this tree's plugin, then with the plugin of commit 12b58a7 (old/,
#    before the capture-safe scratch: the test must fail there).
# 2. The conformance suite (automatic choice) and the fixtures, on this tree.
# 3. `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 1,4,8,16 --bits 8
#    --dtype f16|bf16` (automatic choice, cuBLAS fp16 dense in the same run).
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble
for z in "$P"/*.xz "$here"/old/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log
say() { echo "$*" | tee -a "$S"; }
say "== call1 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
for side in new old; do
  dir=$P; [ $side = old ] && dir=$here/old
  NIBBLE_TEST_PLUGIN_DIRS=$dir timeout 200 build/tests/test_cuda_graph -s > "$OUT/graph_$side.log" 2>&1
  say "   test_cuda_graph $side: exit $? ($(grep -cE 'ERROR|FAILED' "$OUT/graph_$side.log") error lines) $(grep -m1 'graph launches' "$OUT/graph_$side.log")"
  grep -E "ERROR|status: |kernel|graph nodes" "$OUT/graph_$side.log" | grep -v "^\s*$" | head -12 | sed 's/^/     /' | tee -a "$S"
done
NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 240 build/tests/test_conformance > "$OUT/conformance.log" 2>&1
say "   conformance auto: exit $? $(grep -m1 'cases checked' "$OUT/conformance.log")"
n=0; ok=0
for f in tests/data/fixtures/*/; do
  n=$((n+1)); NIBBLE_PLUGIN_PATH=$P timeout 200 "$NIBBLE" verify --backend cuda_w4a16 --model "$f" \
    --reference "$f/reference.safetensors" >> "$OUT/fixtures.log" 2>&1 && ok=$((ok+1))
done
say "   fixtures: $ok of $n exit 0 after $((SECONDS - T0)) s"
for dt in f16 bf16; do
  NIBBLE_PLUGIN_PATH=$P timeout 150 "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b \
    --m 1,4,8,16 --bits 8 --dtype $dt --budget 0.15 > "$OUT/bench_8bit_$dt.txt" 2>&1
  say "-- bench 8 bits $dt: exit $? after $((SECONDS - T0)) s"
  grep -E "^[0-9]+x[0-9]+ " "$OUT/bench_8bit_$dt.txt" | sed "s/^/   $dt /" >> "$S"
done
say "== done in $((SECONDS - T0)) s"
