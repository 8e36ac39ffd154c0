#!/bin/bash
# The second device call of the 2026-12-02 (second) session, from the repository root with .gpu
# carried: .gpu from `plugins/cuda_w4a16/gpu_check.sh bundle` (the packed-GemmParams tree, 7d4ca98;
# bench_kernels and its tests/data copy left out), .gpu/old the first call's new side (26e0ee9,
# 136-byte GemmParams, plugin xz-compressed), .gpu/xeon from `bench/ab_bundle.sh - build .gpu/xeon`.
#   1. GPU: old against new, the automatic plan at M = 1-256 and v2u2 / v4 / s4 forced (bench/ab.sh)
#   2. GPU: test_conformance with every kernel forced and the automatic plan; every fixture verified
#   3. Xeon host: the prefetch default (t0 on Intel) against nta; then nibble bench with the dense
#      baseline at 16 and 2 threads (the issue's targets)
set -u
O=${OUT:?}
S=$O/summary.txt
T0=$SECONDS
say() { echo "$*" | tee -a "$S"; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
xz -d -f .gpu/old/plugins/cuda_w4a16/cuda_w4a16.so.xz
say "== session2 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"

# 1. A/B on the GPU.
OUT=$O/gpu AB_BACKEND=cuda_w4a16 AB_ROUNDS=2 AB_BUDGET_S=170 AB_SHAPES=llama3-8b,llama3-70b AB_M=1,8,16,32,64,128,256 \
  AB_SIDES="old build:build" bash bench/ab.sh .gpu > "$O/gpu_ab.txt" 2>&1
OUT=$O/gpu_forced AB_BACKEND=cuda_w4a16 AB_ROUNDS=1 AB_BUDGET_S=90 AB_SHAPES=llama3-8b,llama3-70b AB_M=16,32,64 \
  AB_SIDES="old-v4:old+NIBBLE_CUDA_KERNEL=v4 new-v4:build+NIBBLE_CUDA_KERNEL=v4 old-s4:old+NIBBLE_CUDA_KERNEL=s4 new-s4:build+NIBBLE_CUDA_KERNEL=s4" \
  bash bench/ab.sh .gpu >> "$O/gpu_ab.txt" 2>&1
say "-- 1. GPU A/B done at $((SECONDS - T0)) s (gpu_ab.txt)"

# 2. Conformance (every kernel forced, automatic with and without PDL) and fixtures, in parallel.
P=$PWD/.gpu/build/plugins/cuda_w4a16
TMP=$(mktemp -d)
export LD_LIBRARY_PATH=$PWD/.gpu/build/core:$PWD/.gpu/lib:$LD_LIBRARY_PATH
for k in v1 v2 v4 v2u2 s1 s2 s4 s8 l wg16 wg32 wg64 wg128 cublas auto; do
  (env NIBBLE_CUDA_KERNEL=$k $( [ $k != auto ] && echo NIBBLE_TEST_REQUIRE_KERNEL=$k ) NIBBLE_TEST_BACKEND=cuda_w4a16 \
     NIBBLE_TEST_PLUGIN_DIRS=$P timeout 240 .gpu/build/tests/test_conformance > "$TMP/conf.$k" 2>&1; echo "exit=$?" >> "$TMP/conf.$k") &
done
for f in tests/data/fixtures/*/; do
  n=$(basename "$f")
  (NIBBLE_PLUGIN_PATH=$P timeout 200 .gpu/build/tools/nibble/nibble verify --backend cuda_w4a16 --model "$f" \
     --reference "$f/reference.safetensors" > "$TMP/fix.$n" 2>&1; echo "exit=$?" >> "$TMP/fix.$n") &
done
wait
{
  for f in "$TMP"/conf.*; do echo "== conformance ${f##*/conf.}: $(grep -m1 'cases checked' "$f") $(tail -1 "$f")"; grep -E "FAIL|ERROR|out of tolerance" "$f" | head -5; done
  for f in "$TMP"/fix.*; do echo "== fixture ${f##*/fix.}: $(tail -1 "$f")"; grep -iE "fail|error" "$f" | head -3; done
} > "$O/conformance.txt"
say "-- 2. conformance at $((SECONDS - T0)) s: $(grep -c 'exit=0' "$O/conformance.txt") of $(grep -c '^==' "$O/conformance.txt") exit 0 (conformance.txt)"

# 3. Xeon.
left=$((590 - (SECONDS - T0)))
OUT=$O/xeon AB_ROUNDS=2 AB_BUDGET_S=$((left / 3)) AB_M=1,8 AB_SHAPES=4096x4096,14336x4096,8192x57344,4096x1024 \
  AB_SIDES="default:new nta:new+NIBBLE_CPU_PREFETCH=nta" bash bench/ab.sh .gpu/xeon > "$O/xeon_ab.txt" 2>&1
B=$PWD/.gpu/xeon
for preset in llama3-8b llama3-70b; do
  left=$((590 - (SECONDS - T0)))
  [ "$left" -gt 30 ] || { say "-- bench $preset not run: out of time"; continue; }
  limit=$((left - 10))
  [ "$preset" = llama3-8b ] && limit=$((left / 2))
  LD_LIBRARY_PATH="$B/new/core:$B/lib" NIBBLE_PLUGIN_PATH="$B/new/plugins/cpu_w4a16" timeout $limit \
    "$B/new/tools/nibble/nibble" bench --backend cpu_w4a16 --shapes $preset --m 1,2,8,32,64,256 --threads 16,2 \
    --rotate-mb 640 --budget 0.15 --json "$O/xeon_$preset.json" >> "$O/xeon_bench.txt" 2>&1
  say "-- 3. Xeon bench $preset exit $? at $((SECONDS - T0)) s"
done
tar czf "$O/raw.tar.gz" -C "$O" gpu gpu_forced xeon 2>/dev/null && rm -rf "$O/gpu" "$O/gpu_forced" "$O/xeon"
ls -la "$O" | tee -a "$S"
