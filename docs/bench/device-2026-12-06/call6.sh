#!/bin/bash
# Device call 6 of 2026-12-06 (H100): every kernel forced at M = 320, 384, 512, 768 on the 8 shapes
# (bench_kernels --sweep, fp16): where wg128 beats dequantize + cuBLAS past M = 256 (call 5 showed
# the automatic choice taking 2x the time at M = 257 as at M = 256). Bundle as call5. Run: bash .gpu/call6.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
P=$here/build/plugins/cuda_w4a16
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi -L > "$OUT/machine.txt"
timeout 500 "$P/bench_kernels" --sweep --m 320,384,512,768 --out "$OUT/sweep.txt" > "$OUT/stdout.txt" 2>&1
echo "exit $?" >> "$OUT/stdout.txt"
grep -E "^  sweep" "$OUT/sweep.txt" | sed -E "s/s1=.* l=[0-9.]+//; s/wg16=.*wg64=/wg64=/"
