#!/bin/bash
# Device call 5 of 2026-12-04b (Xeon host, issue 15), from the repository root with .gpu carried
# (.gpu = bench/xeon_bundle.sh build of commit 0026907: gemm-amx from M = 6):
#  1. `nibble plugins` (the plan) and the conformance suite with the default plan, 16 threads
#  2. the issue's targets: `nibble bench --backend cpu_w4a16 --shapes llama3-8b|llama3-70b
#     --m 1,2,4,6,8,16,32,64,256 --threads 16,2 --rotate-mb 640 --budget 0.12 --json ...`
#     (oneDNN bf16 dense in the same run), then bench/cpu_targets.py
set -u
B=$PWD/.gpu
for z in "$B"/lib/*.xz; do [[ -e "$z" ]] && xz -d -k -f "$z"; done
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NIB=$B/build/tools/nibble/nibble
P=$B/build/plugins/cpu_w4a16
S=$OUT/summary.txt
T0=$SECONDS
say() { echo "$*" | tee -a "$S"; }
say "== call5 $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) $(nproc) CPUs"
NIBBLE_PLUGIN_PATH=$P "$NIB" plugins 2>&1 | grep -o "bf16 activations:[^;]*" | tee -a "$S"
NIBBLE_TEST_BACKEND=cpu_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 150 $B/build/tests/test_conformance > "$OUT/conformance.log" 2>&1
say "conformance (default plan, 16 threads): exit $? $(grep -m1 'cases checked' "$OUT/conformance.log")"
for preset in llama3-8b llama3-70b; do
  left=$((540 - (SECONDS - T0)))
  [ $left -gt 40 ] || { say "-- $preset skipped: $left s left"; continue; }
  NIBBLE_PLUGIN_PATH=$P timeout $((left - 20)) "$NIB" bench --backend cpu_w4a16 --shapes $preset \
    --m 1,2,4,6,8,16,32,64,256 --threads 16,2 --rotate-mb 640 --budget 0.12 \
    --json "$OUT/bench-$preset.json" >> "$OUT/bench.txt" 2>&1
  say "-- bench $preset: exit $? after $((SECONDS - T0)) s"
done
python3 bench/cpu_targets.py "$OUT"/bench-llama3-*.json > "$OUT/targets.txt" 2>&1
say "-- targets: exit $? (targets.txt)"
