#!/bin/bash
# One device call of the 2026-12-02 (second) session, run from the repository root with .gpu
# carried: .gpu/cuda from `AB_PLUGIN=cuda_w4a16 bench/ab_bundle.sh OLD_BUILD build .gpu/cuda`
# (OLD = 59a7dab, the tree of cuda.json, built with -Dnvcc_archs=90), .gpu/xeon from
# `bench/ab_bundle.sh - build .gpu/xeon`. Writes at most 8 files under $OUT.
#   1. GPU: GEMV v2u2 and v4 forced, old tree against new, M = 16, 32, PERF.md's 8 shapes (bench/ab.sh)
#   2. GPU: SASS of the GEMV kernels of both trees; ncu of v2u2 (both trees), s4 and wg64, where ncu runs
#   3. Xeon host: the prefetch hints nta / t0 / none (bench/ab.sh), 16 and 2 threads
#   4. Xeon host: --bits 8, 3, 2 at M = 1
set -u
O=${OUT:?}
S=$O/summary.txt
T0=$SECONDS
say() { echo "$*" | tee -a "$S"; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
say "== session $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"

# 1. GEMV A/B.
OUT=$O/gpu AB_BACKEND=cuda_w4a16 AB_ROUNDS=2 AB_BUDGET_S=150 AB_SHAPES=llama3-8b,llama3-70b AB_M=16,32 \
  AB_SIDES="old-v2u2:old+NIBBLE_CUDA_KERNEL=v2u2 new-v2u2:new+NIBBLE_CUDA_KERNEL=v2u2 old-v4:old+NIBBLE_CUDA_KERNEL=v4 new-v4:new+NIBBLE_CUDA_KERNEL=v4" \
  bash bench/ab.sh .gpu/cuda > "$O/gpu_ab.txt" 2>&1
say "-- 1. GEMV A/B done at $((SECONDS - T0)) s (gpu_ab.txt)"

# 2. SASS and ncu.
CUOBJ=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
{
  for side in old new; do
    echo "===== $side"
    [ -n "$CUOBJ" ] && "$CUOBJ" --dump-sass ".gpu/cuda/$side/plugins/cuda_w4a16/cuda_w4a16.so" 2>&1 |
      awk '/Function :/ {p = ($0 ~ /gemv/)} p'
  done
} > "$O/sass_gemv.txt" 2>&1
say "-- 2. SASS: $(grep -c 'Function :' "$O/sass_gemv.txt") GEMV functions (sass_gemv.txt.gz)"
gzip -f "$O/sass_gemv.txt"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
: > "$O/ncu.txt"
prof() {  # label side kernel shape m
  echo "===== $1" >> "$O/ncu.txt"
  LD_LIBRARY_PATH=".gpu/cuda/$2/core:.gpu/cuda/lib:$LD_LIBRARY_PATH" NIBBLE_PLUGIN_PATH=".gpu/cuda/$2/plugins/cuda_w4a16" \
    NIBBLE_CUDA_KERNEL=$3 timeout 80 "$NCU" --kernel-name regex:w4a16 --launch-skip 20 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis ".gpu/cuda/$2/tools/nibble/nibble" bench --backend cuda_w4a16 --shapes "$4" --m "$5" \
    --no-dense --iters 40 --rotate-mb 256 >> "$O/ncu.txt" 2>&1
  echo "exit $?" >> "$O/ncu.txt"
}
if [ -n "$NCU" ]; then
  prof "old v2u2 8192x57344 M=16" old v2u2 8192x57344 16
  prof "new v2u2 8192x57344 M=16" new v2u2 8192x57344 16
  prof "new s4 4096x6144 M=64" new s4 4096x6144 64
  prof "new wg64 8192x57344 M=64" new wg64 8192x57344 64
  say "-- ncu at $((SECONDS - T0)) s: $(grep -c 'Duration' "$O/ncu.txt") kernels profiled (ncu.txt)"
else
  say "-- no ncu on this machine"
fi

# 3. Xeon: prefetch hints.
left=$((560 - (SECONDS - T0)))
OUT=$O/xeon AB_ROUNDS=3 AB_BUDGET_S=$((left - 60 > 240 ? 240 : left - 60)) AB_M=1,8,32 \
  AB_SHAPES=4096x4096,14336x4096,8192x57344,28672x8192,4096x1024 \
  AB_SIDES="nta:new+NIBBLE_CPU_PREFETCH=nta t0:new+NIBBLE_CPU_PREFETCH=t0 none:new+NIBBLE_CPU_PREFETCH=none" \
  bash bench/ab.sh .gpu/xeon > "$O/xeon_ab.txt" 2>&1
say "-- 3. Xeon prefetch A/B done at $((SECONDS - T0)) s (xeon_ab.txt)"

# 4. Xeon: 8, 3 and 2 bits at M = 1, 16 threads.
B=$PWD/.gpu/xeon
: > "$O/bits.txt"
for b in 8 3 2; do
  left=$((585 - (SECONDS - T0)))
  [ "$left" -gt 20 ] || { echo "bits $b not run: out of time" >> "$O/bits.txt"; continue; }
  LD_LIBRARY_PATH="$B/new/core:$B/lib" NIBBLE_PLUGIN_PATH="$B/new/plugins/cpu_w4a16" timeout $((left / 2)) \
    "$B/new/tools/nibble/nibble" bench --backend cpu_w4a16 --bits $b --shapes 14336x4096,28672x8192,8192x57344 --m 1 \
    --threads 16 --no-dense --rotate-mb 640 --budget 0.2 >> "$O/bits.txt" 2>&1
  echo "bits $b exit $?" >> "$O/bits.txt"
done
say "-- 4. bits done at $((SECONDS - T0)) s (bits.txt)"
tar czf "$O/raw.tar.gz" -C "$O" gpu xeon 2>/dev/null && rm -rf "$O/gpu" "$O/xeon"
ls -la "$O" | tee -a "$S"
