#!/bin/bash
# Device call 1 of 2026-12-07 (seventh session). Bundle: docs/bench/device-2026-12-07f/bundle.sh.
# Run (device, carry [".gpu"]): bash .gpu/call1.sh
#   1. correctness: gpu_check.sh with GPU_CHECK_ONLY=1 (every kernel of the menu forced through the
#      conformance suite, the automatic choice with and without PDL, CUDA graphs, the ROCm kernels
#      on CUDA, the 19 fixtures through nibble verify), after the GEMV's x loads became plain
#      (weak, L1-cached) loads; beside it the suite with clusters of 2 (NIBBLE_CUDA_WGMMA_CLUSTER=on:
#      x multicast) for wg128 and wg256 forced and the automatic choice;
#   2. the GEMV A/B, M = 1, 4, 8: the plugin of 1fbde70^ (x through __ldg) against this one (plain
#      loads); the sixth session's __ldcg cost 0-9% (geomean 1.026) on an H100;
#   3. where the wgmma kernel's time goes at M >= 256 on large layers: wg128 (x image, weights by
#      cp.async, whole waves) against the same with clusters of 2 (x multicast), with half of each
#      stage's x copied (xhalf: multicast's L2 traffic without the cluster), with no x (nox) and no
#      weights (now);
#   4. clusters off / on through the plugin (nibble bench, fp16, M = 256-4096, 2 rounds): wg128
#      forced, and the automatic choice (wg256 at 129-256 and 385-512, wg128 elsewhere on the larger layers).
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
T0=$SECONDS
S=$OUT/summary.log
say() { echo "$*" | tee -a "$S"; }
find "$here" -name '*.xz' -exec xz -d -k -f {} \;
[ -e "$here/tests/data" ] || ln -s "$here/../tests/data" "$here/tests/data"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16
CONF=$here/build/tests/test_conformance
STD=$(mktemp -d)
say "== 1. correctness ($(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader); $(lscpu | grep -m1 'Model name'))"
mkdir -p "$STD/check"
run_conf() {  # name, environment...
  local name=$1
  shift
  (env "$@" NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 200 "$CONF" > "$STD/conf.$name" 2>&1
   echo "exit=$?" >> "$STD/conf.$name") &
}
run_conf cluster.wg128 NIBBLE_CUDA_WGMMA_CLUSTER=on NIBBLE_CUDA_KERNEL=wg128 NIBBLE_TEST_REQUIRE_KERNEL=wg128
run_conf cluster.wg256 NIBBLE_CUDA_WGMMA_CLUSTER=on NIBBLE_CUDA_KERNEL=wg256 NIBBLE_TEST_REQUIRE_KERNEL=wg256
run_conf cluster.auto NIBBLE_CUDA_WGMMA_CLUSTER=on NIBBLE_CUDA_KERNEL=auto
(OUT=$STD/check GPU_CHECK_ONLY=1 timeout 240 bash "$here/gpu_check.sh" run > "$STD/check.stdout" 2>&1
 echo "gpu_check exit $?" >> "$STD/check.stdout")
wait
say "   $(tail -1 "$STD/check.stdout") after $((SECONDS - T0)) s"
grep -E "^   |^--|logged" "$STD/check/summary.log" | head -40 | cut -c1-260 | tee -a "$S"
for f in "$STD"/conf.*; do
  say "   ${f##*/conf.}: $(grep -m1 'conformance seed' "$f") | $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
  grep "logged" "$f" | head -6 | cut -c1-260 | tee -a "$S"
done
cp "$STD/check/conformance.log" "$OUT/conformance.log" 2>/dev/null
say "== 2. GEMV A/B, M = 1-8 ($((SECONDS - T0)) s)"
(cd "$here/.." && OUT=$STD/abgpu AB_BACKEND=cuda_w4a16 AB_SHAPES=llama3-8b,llama3-70b AB_M=1,4,8 AB_ROUNDS=2 \
   AB_BUDGET_S=100 timeout 115 bash bench/ab.sh "$here/abgpu" > "$STD/abgpu.log" 2>&1)
say "   exit $? after $((SECONDS - T0)) s"
grep -E "^[0-9a-z]|median|geometric" "$STD/abgpu/summary.txt" 2>/dev/null | tee -a "$S"
say "== 3. wgmma diagnostics: clusters, half of x, no x, no weights ($((SECONDS - T0)) s)"
NIBBLE_CUDA_WGMMA_ABLATE=ximg+lsu+waves,ximg+lsu+waves+cluster,ximg+lsu+waves+xhalf,ximg+lsu+waves+nox,ximg+lsu+waves+now \
  timeout 110 "$P/bench_kernels" --wgmma-diag --shapes 8192x8192,8192x57344 --m 1024,4096 \
  --out "$OUT/diag.txt" > "$STD/diag.stdout" 2>&1
say "   exit $? after $((SECONDS - T0)) s"
grep -E "^--|ximg|plugin:cublas|not run" "$OUT/diag.txt" | tee -a "$S"
say "== 4. clusters off/on through the plugin ($((SECONDS - T0)) s)"
left=$((570 - (SECONDS - T0)))
(cd "$here/.." && OUT=$STD/abcl AB_BACKEND=cuda_w4a16 AB_SHAPES=llama3-8b,llama3-70b AB_M=256,512,1024,4096 AB_ROUNDS=2 \
   AB_SIDES="off:new+NIBBLE_CUDA_KERNEL=wg128 on:new+NIBBLE_CUDA_KERNEL=wg128+NIBBLE_CUDA_WGMMA_CLUSTER=on autooff:new autoon:new+NIBBLE_CUDA_WGMMA_CLUSTER=on" \
   AB_BUDGET_S=$((left - 15)) timeout $((left - 5)) bash bench/ab.sh "$here/abgpu" > "$STD/abcl.log" 2>&1)
say "   exit $? after $((SECONDS - T0)) s"
cat "$STD/abcl/summary.txt" 2>/dev/null | tee -a "$S" | tail -5
tar -czf "$OUT/std.tar.gz" -C "$STD" .
say "== done in $((SECONDS - T0)) s"
