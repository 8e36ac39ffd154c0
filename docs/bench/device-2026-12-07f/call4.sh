#!/bin/bash
# Device call 4 of 2026-12-07 (seventh session): clusters of 2 (x multicast) off / on through the
# plugin after the fix of call 3 (remote arrivals at CTA-scope release; call 1's .release.cluster
# arrivals made the clusters 1.3-1.95x slower): nibble bench, fp16, the 8 shapes, M = 256, 1024,
# 2048, 4096, 2 rounds: wg128 forced off / on.
# Bundle: docs/bench/device-2026-12-07f/bundle.sh. Run: bash .gpu/call4.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
T0=$SECONDS
find "$here" -name '*.xz' -exec xz -d -k -f {} \;
(cd "$here/.." && OUT=$OUT/abcl AB_BACKEND=cuda_w4a16 AB_SHAPES=llama3-8b,llama3-70b AB_M=256,1024,2048,4096 AB_ROUNDS=2 \
   AB_SIDES="off:new+NIBBLE_CUDA_KERNEL=wg128 on:new+NIBBLE_CUDA_KERNEL=wg128+NIBBLE_CUDA_WGMMA_CLUSTER=on" \
   AB_BUDGET_S=240 timeout 260 bash bench/ab.sh "$here/abgpu" > "$OUT/abcl.log" 2>&1)
echo "exit $? after $((SECONDS - T0)) s"
grep -E "geometric|NOT RUN" "$OUT/abcl/summary.txt"
rm -f "$OUT"/abcl/*.json
