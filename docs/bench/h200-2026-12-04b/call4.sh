#!/bin/bash
# Device call 4 of 2026-12-04b (Xeon host, issue 15), from the repository root with .gpu carried
# (.gpu/ab = bench/ab_bundle.sh - build of the tree with gemm-amx's prior at M = 6): the new
# default plan against the old crossover (NIBBLE_CPU_GEMM_MIN_M=8: fused-avx512 M < 8) at
# M = 5, 6, 7 with 2, 4 and 16 threads, 3 rounds alternating (bench/ab.sh).
set -u
mkdir -p "$OUT/ab"
OUT=$OUT/ab AB_BUDGET_S=420 AB_ROUNDS=3 AB_M=5,6,7 AB_THREADS=2,4,16 \
  AB_SHAPES=llama3-8b,llama3-70b AB_SIDES="m8:new+NIBBLE_CPU_GEMM_MIN_M=8 default:new" \
  bash bench/ab.sh .gpu/ab > "$OUT/ab.log" 2>&1
echo "ab: exit $?"
tar czf "$OUT/ab.tar.gz" -C "$OUT" ab && rm -rf "$OUT/ab"
