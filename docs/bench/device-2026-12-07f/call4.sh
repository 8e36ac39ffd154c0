#!/bin/bash
# Device call 4 of 2026-12-07 (seventh session): clusters of 2 (x multicast) off / on through the
# plugin after the fix of call 3 (remote arrivals at CTA-scope release; call 1's .release.cluster
# arrivals made the clusters 1.3-1.95x slower): nibble bench, fp16, the 8 shapes, M = 1024 and
# 4096, 2 rounds: wg128 forced off / on. Before it, bench_kernels' diagnostics of wg128 at
# M = 256-4096: two wgmma groups in flight while dequantizing (deep), a shallower ring (st6, st4),
# clusters.
# Bundle: docs/bench/device-2026-12-07f/bundle.sh. Run: bash .gpu/call4.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
T0=$SECONDS
find "$here" -name '*.xz' -exec xz -d -k -f {} \;
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
NIBBLE_CUDA_WGMMA_ABLATE=ximg+lsu+waves,ximg+lsu+waves+deep,ximg+lsu+waves+st6,ximg+lsu+waves+st4,ximg+lsu+waves+cluster \
  timeout 100 "$here/build/plugins/cuda_w4a16/bench_kernels" --wgmma-diag --shapes 8192x8192,8192x57344,4096x28672 \
  --m 256,1024,4096 --out "$OUT/diag.txt" > /dev/null 2>&1
echo "diag exit $? after $((SECONDS - T0)) s"
awk '/^== wgmma diagnostics, time/ {p=1} p' "$OUT/diag.txt"
(cd "$here/.." && OUT=$OUT/abcl AB_BACKEND=cuda_w4a16 AB_SHAPES=llama3-8b,llama3-70b AB_M=1024,4096 AB_ROUNDS=2 \
   AB_SIDES="off:new+NIBBLE_CUDA_KERNEL=wg128 on:new+NIBBLE_CUDA_KERNEL=wg128+NIBBLE_CUDA_WGMMA_CLUSTER=on" \
   AB_BUDGET_S=110 timeout 125 bash bench/ab.sh "$here/abgpu" > "$OUT/abcl.log" 2>&1)
echo "exit $? after $((SECONDS - T0)) s"
grep -E "geometric|NOT RUN" "$OUT/abcl/summary.txt"
rm -f "$OUT"/abcl/*.json
