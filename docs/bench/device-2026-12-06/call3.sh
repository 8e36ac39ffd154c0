#!/bin/bash
# Device call 3 of 2026-12-06 (the H100 machine's Xeon host, 16 cores): bench/ab.sh with the plugin
# of 1f14c94 (old) against e93fb94 (new: gemm-amx's B tiles from L1 at M = 17-32 and its 4-bit
# dequantization loop), gemm-amx forced on both sides from M = 4 so that the calibration's choice
# does not differ between processes, at 16 and 2 threads; then the default plan against
# NIBBLE_CPU_GEMM_MIN_M=4 at M = 4-5 (is gemm-amx now the better form from M = 4?).
# Bundle: bench/ab_bundle.sh /tmp/build-old build .gpu (old: 1f14c94's plugin). Run from the root:
# bash docs/bench/device-2026-12-06/call3.sh
set -u
root=$(cd "$(dirname "$0")/../../.." && pwd); cd "$root"
O=$OUT
mkdir -p "$O/ab1" "$O/ab2"
OUT=$O/ab1 AB_SHAPES=4096x4096,14336x4096,8192x10240,28672x8192 AB_M=8,16,32,64 AB_ROUNDS=2 AB_BUDGET_S=300 \
  AB_SIDES="old+NIBBLE_CPU_ISA=amx+NIBBLE_CPU_GEMM_MIN_M=4 new+NIBBLE_CPU_ISA=amx+NIBBLE_CPU_GEMM_MIN_M=4" \
  bash bench/ab.sh .gpu > /dev/null 2>&1
OUT=$O/ab2 AB_SHAPES=llama3-8b,llama3-70b AB_M=4,5 AB_ROUNDS=3 AB_BUDGET_S=200 \
  AB_SIDES="default:new m4:new+NIBBLE_CPU_GEMM_MIN_M=4" bash bench/ab.sh .gpu > /dev/null 2>&1
tar -czf "$O/raw.tar.gz" -C "$O" ab1 ab2
cp "$O/ab1/summary.txt" "$O/ab1-summary.txt"; cp "$O/ab2/summary.txt" "$O/ab2-summary.txt"
rm -rf "$O/ab1" "$O/ab2"
tail -60 "$O/ab1-summary.txt"; tail -40 "$O/ab2-summary.txt"
