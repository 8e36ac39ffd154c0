#!/bin/bash
# Device call 2 of 2026-12-04c: the whole-batch instances with v1 and v2u2 bounded to 4 blocks per
# SM (128 registers: call 1 showed v2u2 at 131 registers, 3 blocks per SM, up to 1.4x slower), and
# the wide variants removed.
#   1. conformance (tests/test_conformance; as run on 2026-12-04 the script lacked
#      NIBBLE_TEST_BACKEND, so this step SKIPPED: fixed here, not yet rerun) with v1, v2, v4, v2u2 forced and auto, in parallel
#   2. forced, 2 rounds alternating: `nibble bench --backend cuda_w4a16 --shapes
#      llama3-8b,llama3-70b --no-dense --budget 0.12` with gemv_whole 1 and 0:
#      v1 and v2u2 at M = 8, 12, 16 (4 bits, fp16 and bf16); v2 and v4 at M = 24, 32 (4 bits,
#      fp16 and bf16); 8 bits at M = 16, v1 and v2u2, fp16 and bf16.
# Bundle as call1.sh (gpu_check.sh bundle, xz of the plugin and bench_kernels). Run: bash .gpu/call2.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
NIBBLE=$here/build/tools/nibble/nibble; CONF=$here/build/tests/test_conformance
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call2 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
for k in v1 v2 v4 v2u2 auto; do
  ( if [ $k = auto ]; then env NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P NIBBLE_PLUGIN_PATH=$P timeout 200 "$CONF" > "$TMP/conf_$k.txt" 2>&1
    else env NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_PLUGIN_PATH=$P timeout 200 "$CONF" > "$TMP/conf_$k.txt" 2>&1; fi
    echo "exit=$?" >> "$TMP/conf_$k.txt" ) &
done
wait
for k in v1 v2 v4 v2u2 auto; do
  say "   conformance $k: $(grep -E 'cases checked|FAIL|exit=' "$TMP/conf_$k.txt" | tail -3 | tr '\n' ' ')"
  { echo "== conformance $k"; cat "$TMP/conf_$k.txt"; } >> "$OUT/conformance.log"
done
say "-- conformance done after $((SECONDS - T0)) s"
run() {  # label, env..., bench args via BENCH
  local label=$1; shift
  [ $((SECONDS - T0)) -lt 560 ] || { say "-- $label skipped (time)"; return; }
  env "$@" > "$TMP/b.txt" 2>&1
  local rc=$?
  say "-- $label: exit $rc after $((SECONDS - T0)) s"
  { echo "== $label"; cat "$TMP/b.txt"; } >> "$OUT/forced.txt"
  grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   $label /" >> "$S"
}
B="timeout 60 $NIBBLE bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --no-dense --budget 0.12"
for round in 1 2; do
  for dt in f16 bf16; do
    for k in v1 v2u2; do for wh in 1 0; do
      run "r$round b4 $dt $k whole=$wh" NIBBLE_CUDA_KERNEL=$k NIBBLE_CUDA_GEMV_WHOLE=$wh NIBBLE_PLUGIN_PATH=$P $B --m 8,12,16 --dtype $dt
    done; done
    for k in v2 v4; do for wh in 1 0; do
      run "r$round b4 $dt $k whole=$wh" NIBBLE_CUDA_KERNEL=$k NIBBLE_CUDA_GEMV_WHOLE=$wh NIBBLE_PLUGIN_PATH=$P $B --m 24,32 --dtype $dt
    done; done
    for k in v1 v2u2; do
      run "r$round b8 $dt $k whole=1" NIBBLE_CUDA_KERNEL=$k NIBBLE_PLUGIN_PATH=$P $B --m 16 --bits 8 --dtype $dt
    done
  done
done
say "== call2 done in $((SECONDS - T0)) s"
