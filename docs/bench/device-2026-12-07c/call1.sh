#!/bin/bash
# Device call 1 of 2026-12-07 (fourth session): the GPU part (docs/bench/device-2026-12-07b/call3.sh:
# correctness, bench through the automatic choice, the peers table) and then the CPU part on the
# same host (bench/xeon_run.sh, its output packed into xeon.tar.gz).
# Bundle: plugins/cuda_w4a16/gpu_check.sh bundle, xz of the CUDA plugin and bench_kernels, call3.sh
# and peers.py copied to .gpu/, then the CPU plugin, its tests and libraries from
# bench/xeon_bundle.sh build .xeon copied into .gpu (see this directory's README.md).
# Run: bash .gpu/call1.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
T0=$SECONDS
timeout 170 bash "$here/call3.sh"
echo "== GPU part done after $((SECONDS - T0)) s" | tee -a "$OUT/summary.log"
mkdir -p "$OUT/x"
left=$((560 - (SECONDS - T0)))
OUT=$OUT/x XEON_BUDGET_S=$left XEON_PRESETS=llama3-8b XEON_BENCH_S=90 timeout $((left + 20)) \
  bash bench/xeon_run.sh "$here" 16,2 1,2,4,8,64,256 > /dev/null 2>&1
echo "== CPU part exit $? after $((SECONDS - T0)) s" | tee -a "$OUT/summary.log"
tar -czf "$OUT/xeon.tar.gz" -C "$OUT" x && rm -rf "$OUT/x"
