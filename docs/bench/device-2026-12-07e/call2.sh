#!/bin/bash
# Device call 2 of 2026-12-07 (sixth session), the host's CPU only (the 16-core Xeon with AMX of
# issue 15; any lent machine's host): bench/ab.sh, the CPU plugin before the byte forms (8-bit
# layers as nibble rows; commit 6761b59) against this one (8-bit layers have their own calibrated
# plan; fused-avx512 and dot-avx512vnni read their bytes; rows through row_src gathered by the
# whole team), and this one with dot-avx512vnni forced; --bits 8, M = 1 and 4, 16 and 2 threads,
# 2 rounds (as run: AB_BUDGET_S=290, timeout 310, to fit the session's device time); then the new build's probe (its plans, the 8-bit one included, and the calibrations).
# Bundle: docs/bench/device-2026-12-07e/bundle.sh 2. Run (carry [".gpu"]): bash .gpu/call2.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
T0=$SECONDS
S=$OUT/summary.log
STD=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== CPU A/B, 8 bits ($(lscpu | grep -m1 'Model name'))"
(cd "$here/.." && OUT=$STD/ab AB_SHAPES=4096x4096,14336x4096,8192x57344 AB_M=1,4 AB_THREADS=16,2 \
   AB_ARGS="--bits 8" AB_ROUNDS=2 AB_BUDGET_S=420 AB_SIDES="old new dot:new+NIBBLE_CPU_ISA=avx512vnni" \
   timeout 450 bash bench/ab.sh "$here/ab" > "$STD/ab.log" 2>&1)
say "   exit $? after $((SECONDS - T0)) s"
cat "$STD/ab/summary.txt" 2>/dev/null | tee -a "$S"
LD_LIBRARY_PATH=$here/ab/lib NIBBLE_PLUGIN_PATH=$here/ab/new/plugins/cpu_w4a16 \
  "$here/ab/new/tools/nibble/nibble" plugins 2>&1 | grep probe | tee -a "$S"
tar -czf "$OUT/ab.tar.gz" -C "$STD" .
say "== done in $((SECONDS - T0)) s"
