#!/bin/bash
# Device call 1 of 2026-12-03 (issue 20): the wgmma kernel with coalesced stream-K partials and the
# cp.async weight path (wgmma_w=lsu). Run from .gpu (wgmma_diag.sh bundle + this script), OUT set.
#   1. conformance, wg16/32/64/128 forced, each x image + bulk weights (the default), x image +
#      lsu, x copy + lsu
#   2. bench_kernels --sweep with the x image, M = 16 ... 1024, the 8 shapes (wg kernels with both
#      weight paths)
#   3. bench_kernels --wgmma-diag on three shapes at M = 16, 64, 256, the variants that tell the
#      epilogue and the weight stream apart
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; CONF=$here/build/tests/test_conformance; BK=$P/bench_kernels
S=$OUT/summary.log; T0=$SECONDS; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== session1 $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$S"
run_conf() { local name=$1; shift
  (env "$@" NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 170 "$CONF" > "$TMP/conf.$name" 2>&1
   echo "exit=$?" >> "$TMP/conf.$name") & }
for k in wg16 wg32 wg64 wg128; do
  run_conf "$k.img-bulk" NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_CUDA_WGMMA_X=image NIBBLE_CUDA_WGMMA_W=bulk
  run_conf "$k.img-lsu" NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_CUDA_WGMMA_X=image NIBBLE_CUDA_WGMMA_W=lsu
  run_conf "$k.copy-lsu" NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_CUDA_WGMMA_X=copy NIBBLE_CUDA_WGMMA_W=lsu
done
wait
for f in "$TMP"/conf.*; do
  echo "== conformance ${f##*/conf.}" >> "$OUT/conformance.log"
  grep -E "cases checked|SKIP|ERROR|FAIL|out of tolerance|declined|exit=|Status|assertions" "$f" | head -30 >> "$OUT/conformance.log"
  say "   ${f##*/conf.}: $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
done
say "-- conformance done after $((SECONDS - T0)) s"
NIBBLE_CUDA_WGMMA_X=image timeout 260 "$BK" --sweep --m 16,32,64,128,256,1024 --out "$OUT/sweep.txt" > "$TMP/sweep.stdout" 2>&1
say "-- sweep: exit $? after $((SECONDS - T0)) s"; tail -3 "$TMP/sweep.stdout" >> "$S"
left=$((560 - (SECONDS - T0)))
if [ $left -gt 40 ]; then
  NIBBLE_CUDA_WGMMA_ABLATE=full,noepi,nowait,ring,ximg,ximg+noepi,ximg+ring,ximg+lsu,ximg+lsu+noepi,ximg+lsu+ring,lsu \
    timeout $((left - 10)) "$BK" --wgmma-diag --shapes 4096x4096,8192x8192,8192x57344 --m 16,64,256 \
    --out "$OUT/diag.txt" > "$TMP/diag.stdout" 2>&1
  say "-- diag: exit $? after $((SECONDS - T0)) s; $(grep -c 'check ok' "$OUT/diag.txt") ok, $(grep -c WRONG "$OUT/diag.txt") WRONG"
  awk '/^== wgmma diagnostics, us/ {p=1} p' "$OUT/diag.txt" >> "$S"
fi
say "== done in $((SECONDS - T0)) s"
