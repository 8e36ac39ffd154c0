#!/bin/bash
# The fifth device call of the 2026-12-02 (second) session, Xeon host: the default plan
# (fused-avx512bf16 at small M, gemm-amx above) against NIBBLE_CPU_ISA=avx512 (the f32 order,
# fused-avx512 at every M) at M = 1-64: what the f32 order gains at decode and costs in batches.
set -u
O=${OUT:?}
OUT=$O/ab AB_ROUNDS=2 AB_BUDGET_S=300 AB_M=1,2,4,8,16,32,64 AB_SHAPES=14336x4096,8192x57344,4096x1024 \
  AB_SIDES="default:new isa-avx512:new+NIBBLE_CPU_ISA=avx512" bash bench/ab.sh .gpu/xeon > "$O/xeon_isa_ab.txt" 2>&1
tar czf "$O/raw.tar.gz" -C "$O" ab && rm -rf "$O/ab"
