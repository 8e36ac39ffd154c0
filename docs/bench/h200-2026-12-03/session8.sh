#!/bin/bash
# Device call 8 of 2026-12-03 (issue 20): the split fix-up as its own kernel instance (the
# last-arrival instance is back to no spills; call 7 had both in one instance, whose spill slowed
# the wg128 points without the split). Conformance of wg64 / wg128 forced and of the automatic
# choice, the diagnostics with and without the split, and nibble bench at M = 64-256.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; CONF=$here/build/tests/test_conformance; BK=$P/bench_kernels
NIBBLE=$here/build/tools/nibble/nibble; S=$OUT/summary.log; T0=$SECONDS; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== session8 $(date -u +%FT%TZ)"
run_conf() { local name=$1; shift
  (env "$@" NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 40 "$CONF" > "$TMP/conf.$name" 2>&1
   echo "exit=$?" >> "$TMP/conf.$name") & }
run_conf wg64 NIBBLE_CUDA_KERNEL=wg64 NIBBLE_TEST_REQUIRE_KERNEL=wg64
run_conf wg128 NIBBLE_CUDA_KERNEL=wg128 NIBBLE_TEST_REQUIRE_KERNEL=wg128
run_conf wg128.split NIBBLE_CUDA_KERNEL=wg128 NIBBLE_TEST_REQUIRE_KERNEL=wg128 NIBBLE_CUDA_WGMMA_FIXUP=split
run_conf auto
wait
for f in "$TMP"/conf.*; do say "   ${f##*/conf.}: $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"; done
NIBBLE_CUDA_WGMMA_ABLATE=ximg+lsu,ximg+lsu+split timeout 40 "$BK" --wgmma-diag \
  --shapes 4096x4096,8192x8192,8192x10240,28672x8192,4096x28672 --m 64,128,256 --out "$OUT/diag.txt" > /dev/null 2>&1
say "-- diag: exit $? after $((SECONDS - T0)) s; $(grep -c 'check ok' "$OUT/diag.txt") ok, $(grep -c WRONG "$OUT/diag.txt") WRONG"
grep -h "cooperative launches" "$OUT/diag.txt" | tee -a "$S"
awk '/^== wgmma diagnostics, us/ {p=1} /^== wgmma diagnostics, time/ {p=0} p' "$OUT/diag.txt" >> "$S"
NIBBLE_PLUGIN_PATH=$P timeout 45 "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 64,128,256 \
  --dtype f16 --budget 0.1 --json "$OUT/bench_f16.json" > "$OUT/bench.txt" 2>&1
say "-- bench: exit $? after $((SECONDS - T0)) s"
say "== done in $((SECONDS - T0)) s"
