#!/bin/bash
# Device call 9 of 2026-12-06 (H100): dequantize + cuBLAS with column chunks of 8, 16, 32 and 128 MiB
# of dense weights (option dense_chunk_mib): does a chunk that stays in L2 (50 MB) save the dense
# copy's round trip through HBM? nibble bench, cublas forced, 4 bits fp16, the 8 shapes, M = 256,
# 1024, 4096, cuBLAS dense in the same run; chunk sizes in the order 128 8 16 32 128.
# Bundle as call 5. Run: bash .gpu/call9.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
P=$here/build/plugins/cuda_w4a16
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NIB=$here/build/tools/nibble/nibble; S=$OUT/summary.log
nvidia-smi -L | tee "$S"
SH=4096x6144,4096x4096,4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192
i=0
for c in 128 8 16 32 128; do
  i=$((i + 1))
  echo "== c$c.$i f16" >> "$OUT/bench.txt"
  NIBBLE_CUDA_DENSE_CHUNK_MIB=$c NIBBLE_CUDA_KERNEL=cublas NIBBLE_PLUGIN_PATH=$P timeout 110 "$NIB" bench \
    --backend cuda_w4a16 --shapes $SH --m 256,1024,4096 --dtype f16 --budget 0.15 >> "$OUT/bench.txt" 2>&1
done
/usr/bin/env python3 - "$OUT/bench.txt" <<'PY' | tee -a "$S"
import re, sys
cur = None; d = {}; sides = []
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+) (\S+)", line)
    if m: cur = m.group(1); sides.append(cur); continue
    f = line.split()
    if cur and len(f) > 10 and re.match(r"\d+x\d+$", f[0]) and f[1].isdigit():
        d[(f[0], int(f[1]), cur)] = (float(f[-8]), float(f[-3]))
print("shape M " + " ".join(sides) + " dense(last)")
for key in sorted({k[:2] for k in d}):
    print(f"{key[0]:11} {key[1]:5} " + " ".join(f"{d[key + (s,)][0]:8.1f}" for s in sides if key + (s,) in d)
          + f"  {d[key + (sides[-1],)][1]:8.1f}")
PY
