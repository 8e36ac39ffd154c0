#!/bin/bash
# Device call 3 of 2026-12-04b, from the repository root with .gpu carried (.gpu = gpu_check.sh's
# bundle of commit 10883f7, .gpu/ab = bench/ab_bundle.sh - build of the same tree):
#  GPU: the M = 9-16 rule by dtype through the automatic choice: conformance (auto), then
#    `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 9,12,16 --bits 4|8
#    --dtype f16|bf16 --budget 0.2` with cuBLAS dense in the same run.
#  Xeon host (issue 15): gemm-amx from M = 4 (NIBBLE_CPU_GEMM_MIN_M=4) against the default plan
#    (fused-avx512 M < 8) at M = 4, 6 with 2, 4 and 16 threads, 3 rounds alternating (bench/ab.sh).
set -u
root=$PWD
G=$root/.gpu
export LD_LIBRARY_PATH="$G/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$G/build/plugins/cuda_w4a16
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call3 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 200 $G/build/tests/test_conformance > "$TMP/c" 2>&1
say "   conformance (auto): exit $? $(grep -m1 'cases checked' "$TMP/c")"
for bits in 4 8; do
  for dt in f16 bf16; do
    NIBBLE_PLUGIN_PATH=$P timeout 90 $G/build/tools/nibble/nibble bench --backend cuda_w4a16 \
      --shapes llama3-8b,llama3-70b --m 9,12,16 --bits $bits --dtype $dt --budget 0.2 > "$TMP/b.txt" 2>&1
    say "-- auto b$bits $dt: exit $? after $((SECONDS - T0)) s"
    { echo "== auto b$bits $dt"; cat "$TMP/b.txt"; } >> "$OUT/bench_gpu.txt"
    grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   b$bits $dt /" >> "$S"
  done
done
say "-- GPU part done after $((SECONDS - T0)) s"
mkdir -p "$OUT/ab"
OUT=$OUT/ab AB_BUDGET_S=$((560 - (SECONDS - T0))) AB_ROUNDS=3 AB_M=4,6 AB_THREADS=2,4,16 \
  AB_SHAPES=llama3-8b,llama3-70b AB_SIDES="default:new amx4:new+NIBBLE_CPU_GEMM_MIN_M=4" \
  bash bench/ab.sh .gpu/ab > "$TMP/ab.log" 2>&1
say "-- ab: exit $? after $((SECONDS - T0)) s"
tar czf "$OUT/ab.tar.gz" -C "$OUT" ab && rm -rf "$OUT/ab"
