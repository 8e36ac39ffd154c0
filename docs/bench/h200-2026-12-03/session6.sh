#!/bin/bash
# Device call 6 of 2026-12-03 (issue 20): the split stream-K fix-up (option wgmma_fixup=split, a
# cooperative launch; every block whose last tile is a shared tile sums a slice of it). First a
# 20-second smoke run (a hang there stops the call), then conformance of wg16-128 forced and of
# the automatic choice with the split fix-up, the diagnostics with and without it, and the sweep
# with it (to set against call 2's). Run from .gpu (wgmma_diag.sh bundle + this script), OUT set.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; CONF=$here/build/tests/test_conformance; BK=$P/bench_kernels
S=$OUT/summary.log; T0=$SECONDS; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== session6 $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$S"
NIBBLE_CUDA_WGMMA_ABLATE=ximg+lsu,ximg+lsu+split timeout 20 "$BK" --wgmma-diag --shapes 4096x4096 --m 128 \
  --out "$OUT/smoke.txt" > "$TMP/smoke.stdout" 2>&1
rc=$?
say "-- smoke: exit $rc after $((SECONDS - T0)) s: $(grep -E '^ +ximg\+lsu' "$OUT/smoke.txt" | tr -s ' ' | tr '\n' ';')"
grep -h "cooperative launches" "$OUT/smoke.txt" | tee -a "$S"
if [ $rc -ne 0 ]; then tail -5 "$TMP/smoke.stdout" | tee -a "$S"; say "== stopped (smoke run failed)"; exit 0; fi
run_conf() { local name=$1; shift
  (env "$@" NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 120 "$CONF" > "$TMP/conf.$name" 2>&1
   echo "exit=$?" >> "$TMP/conf.$name") & }
for k in wg16 wg32 wg64 wg128; do
  run_conf "$k.split" NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_CUDA_WGMMA_FIXUP=split
done
run_conf auto.split NIBBLE_CUDA_WGMMA_FIXUP=split
run_conf auto.split.nopdl NIBBLE_CUDA_WGMMA_FIXUP=split NIBBLE_CUDA_OVERLAP=0
wait
for f in "$TMP"/conf.*; do
  echo "== conformance ${f##*/conf.}" >> "$OUT/conformance.log"
  grep -E "cases checked|SKIP|ERROR|FAIL|out of tolerance|declined|exit=|Status|assertions" "$f" | head -30 >> "$OUT/conformance.log"
  say "   ${f##*/conf.}: $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
done
say "-- conformance done after $((SECONDS - T0)) s"
B=ximg+lsu
NIBBLE_CUDA_WGMMA_ABLATE=$B,$B+split,$B+noepi,$B+split+pfence \
  timeout 150 "$BK" --wgmma-diag --shapes 4096x4096,8192x8192,8192x10240,28672x8192,8192x57344 --m 16,64,128,256,1024 \
  --out "$OUT/diag.txt" > "$OUT/diag.stdout" 2>&1
say "-- diag: exit $? after $((SECONDS - T0)) s; $(grep -c 'check ok' "$OUT/diag.txt") ok, $(grep -c WRONG "$OUT/diag.txt") WRONG"
grep -h "cooperative launches" "$OUT/diag.txt" | tee -a "$S"
awk '/^== wgmma diagnostics, us/ {p=1} p' "$OUT/diag.txt" >> "$S"
NIBBLE_CUDA_WGMMA_FIXUP=split timeout 150 "$BK" --sweep --m 16,32,64,128,256,1024 --out "$OUT/sweep_split.txt" > "$TMP/sweep.stdout" 2>&1
say "-- sweep (split): exit $? after $((SECONDS - T0)) s"
say "== done in $((SECONDS - T0)) s"
