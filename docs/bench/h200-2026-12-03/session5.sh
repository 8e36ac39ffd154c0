#!/bin/bash
# Device call 5 of 2026-12-03 (issue 20): the wgmma kernel without the consumers' proxy fence when
# x comes as the image (checked: conformance of wg16-128 forced on the default paths and with the
# x warps' copies; pfence in the diagnostics puts the fence back), and the epilogue split into its
# y stores (noy) and its stream-K partials and fix-up (nofix). Run from .gpu, OUT set.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; CONF=$here/build/tests/test_conformance; BK=$P/bench_kernels
S=$OUT/summary.log; T0=$SECONDS; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== session5 $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$S"
run_conf() { local name=$1; shift
  (env "$@" NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 170 "$CONF" > "$TMP/conf.$name" 2>&1
   echo "exit=$?" >> "$TMP/conf.$name") & }
for k in wg16 wg32 wg64 wg128; do
  run_conf "$k.default" NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k
  run_conf "$k.img-bulk" NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_CUDA_WGMMA_W=bulk
  run_conf "$k.copy-lsu" NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_CUDA_WGMMA_X=copy
done
run_conf auto
wait
for f in "$TMP"/conf.*; do
  echo "== conformance ${f##*/conf.}" >> "$OUT/conformance.log"
  grep -E "cases checked|SKIP|ERROR|FAIL|out of tolerance|declined|exit=|Status|assertions" "$f" | head -30 >> "$OUT/conformance.log"
  say "   ${f##*/conf.}: $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
done
say "-- conformance done after $((SECONDS - T0)) s"
B=ximg+lsu
NIBBLE_CUDA_WGMMA_ABLATE=$B,$B+pfence,$B+noepi,$B+noy,$B+nofix,$B+noy+nofix,$B+nodeq,$B+nodeq+noepi,nowait+noepi,$B+onewg \
  timeout 300 "$BK" --wgmma-diag --shapes 4096x4096,8192x8192,28672x8192,8192x57344 --m 16,64,128,256,1024 \
  --out "$OUT/diag.txt" > "$OUT/diag.stdout" 2>&1
say "-- diag: exit $? after $((SECONDS - T0)) s; $(grep -c 'check ok' "$OUT/diag.txt") ok, $(grep -c WRONG "$OUT/diag.txt") WRONG"
awk '/^== wgmma diagnostics, us/ {p=1} p' "$OUT/diag.txt" >> "$S"
say "== done in $((SECONDS - T0)) s"
