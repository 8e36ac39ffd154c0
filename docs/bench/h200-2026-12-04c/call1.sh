#!/bin/bash
# Device call 1 of 2026-12-04c: the wide GEMV variants (v1w: 128 features x 8 rows, v2w: 128 x 16)
# and the instance without bounds checks ("whole batches") of every GEMV variant.
#   1. gpu_check.sh run (every kernel forced through the conformance suite, the new ones included;
#      fixtures; bench through auto; bench_kernels --check and --sweep)
#   2. forced: `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 8,12,16
#      --no-dense --budget 0.12` with v1, v1w, v2u2, v2u2 with gemv_whole=0, v2w; fp16 and bf16,
#      4 bits; then 8 bits fp16 with v1, v2u2, v2w at M = 16.
# Bundle: plugins/cuda_w4a16/gpu_check.sh bundle, this script copied into .gpu, the plugin and
# bench_kernels xz-compressed. Run: bash .gpu/call1.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
P=$here/build/plugins/cuda_w4a16
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS
bash "$here/gpu_check.sh" run
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NIBBLE=$here/build/tools/nibble/nibble
S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call1 forced GEMV runs, after $((SECONDS - T0)) s"
run() {  # label, env..., -- bench args
  local label=$1; shift
  [ $((SECONDS - T0)) -lt 560 ] || { say "-- $label skipped (time)"; return; }
  env "$@" > "$TMP/b.txt" 2>&1
  local rc=$?
  say "-- $label: exit $rc after $((SECONDS - T0)) s"
  { echo "== $label"; cat "$TMP/b.txt"; } >> "$OUT/forced.txt"
  grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   $label /" >> "$S"
}
for dt in f16 bf16; do
  for cfg in v1:1 v1w:1 v2u2:1 v2u2:0 v2w:1; do
    k=${cfg%%:*}; wh=${cfg#*:}
    run "b4 $dt $k whole=$wh" NIBBLE_CUDA_KERNEL=$k NIBBLE_CUDA_GEMV_WHOLE=$wh NIBBLE_PLUGIN_PATH=$P timeout 60 \
      "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 8,12,16 --dtype $dt --no-dense --budget 0.12
  done
done
for k in v1 v2u2 v2w; do
  run "b8 f16 $k" NIBBLE_CUDA_KERNEL=$k NIBBLE_PLUGIN_PATH=$P timeout 60 \
    "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 16 --bits 8 --dtype f16 --no-dense --budget 0.12
done
say "== call1 done in $((SECONDS - T0)) s"
