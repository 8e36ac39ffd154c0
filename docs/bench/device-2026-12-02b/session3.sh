#!/bin/bash
# The third device call of the 2026-12-02 (second) session: session2.sh's GPU A/B again (its first
# try found no libnibble in .gpu/build/core: the GPU bundle keeps it in .gpu/lib, now copied there),
# and on the Xeon host the one-tile form at M = 1 with the weights in cache (not rotated) against
# streamed, bf16 and f32-order kernels: is M = 1 bound by the kernel's arithmetic on this CPU?
set -u
O=${OUT:?}
S=$O/summary.txt
T0=$SECONDS
say() { echo "$*" | tee -a "$S"; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
xz -d -f .gpu/old/plugins/cuda_w4a16/cuda_w4a16.so.xz
say "== session3 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
OUT=$O/gpu AB_BACKEND=cuda_w4a16 AB_ROUNDS=3 AB_BUDGET_S=150 AB_SHAPES=llama3-8b,llama3-70b AB_M=1,8,16,32,64,128,256 \
  AB_SIDES="old build:build" bash bench/ab.sh .gpu > "$O/gpu_ab.txt" 2>&1
OUT=$O/gpu_forced AB_BACKEND=cuda_w4a16 AB_ROUNDS=1 AB_BUDGET_S=150 AB_SHAPES=llama3-8b,llama3-70b AB_M=16,32,64,128 \
  AB_SIDES="old-v2u2:old+NIBBLE_CUDA_KERNEL=v2u2 new-v2u2:build+NIBBLE_CUDA_KERNEL=v2u2 old-v4:old+NIBBLE_CUDA_KERNEL=v4 new-v4:build+NIBBLE_CUDA_KERNEL=v4 old-s4:old+NIBBLE_CUDA_KERNEL=s4 new-s4:build+NIBBLE_CUDA_KERNEL=s4 old-s8:old+NIBBLE_CUDA_KERNEL=s8 new-s8:build+NIBBLE_CUDA_KERNEL=s8 old-wg64:old+NIBBLE_CUDA_KERNEL=wg64 new-wg64:build+NIBBLE_CUDA_KERNEL=wg64" \
  bash bench/ab.sh .gpu > "$O/gpu_forced.txt" 2>&1
say "-- GPU A/B done at $((SECONDS - T0)) s (gpu_ab.txt, gpu_forced.txt)"
B=$PWD/.gpu/xeon
: > "$O/xeon_cache.txt"
for isa in avx512bf16 avx512; do
  for rot in 1 640; do
    echo "===== NIBBLE_CPU_ISA=$isa rotate-mb $rot" >> "$O/xeon_cache.txt"
    NIBBLE_CPU_ISA=$isa LD_LIBRARY_PATH="$B/new/core:$B/lib" NIBBLE_PLUGIN_PATH="$B/new/plugins/cpu_w4a16" timeout 60 \
      "$B/new/tools/nibble/nibble" bench --backend cpu_w4a16 --shapes 4096x4096,14336x4096 --m 1 --threads 16,2,1 \
      --rotate-mb $rot --budget 0.2 --no-dense >> "$O/xeon_cache.txt" 2>&1
  done
done
say "-- Xeon in cache / streamed done at $((SECONDS - T0)) s (xeon_cache.txt)"
tar czf "$O/raw.tar.gz" -C "$O" gpu gpu_forced 2>/dev/null && rm -rf "$O/gpu" "$O/gpu_forced"
