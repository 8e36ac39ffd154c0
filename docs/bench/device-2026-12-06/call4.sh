#!/bin/bash
# Device call 4 of 2026-12-06 (H100): every kernel forced at M = 16-4096 on the 8 shapes
# (bench_kernels --sweep, fp16; the data behind the choice rules, which were set on the H200),
# the file call 1 ran but could not bring back. Bundle as call1.sh. Run: bash .gpu/call4.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
P=$here/build/plugins/cuda_w4a16
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi -L > "$OUT/machine.txt"
timeout 500 "$P/bench_kernels" --sweep --m 16,32,64,128,256,1024,4096 --out "$OUT/sweep.txt" > "$OUT/stdout.txt" 2>&1
echo "exit $?" >> "$OUT/stdout.txt"
grep -E "^  sweep" "$OUT/sweep.txt" | head -60
