#!/bin/bash
# Device call 8 of 2026-12-06 (H100): dequantize + cuBLAS for 8-bit layers with both nibble planes
# summed in one pass into the real K rows (launch_dequant_dense_planes8, Prepared::dense8).
#   1. correctness: the conformance suite with cublas forced and with the automatic choice,
#      tests/test_cuda_graph, the 19 fixtures through nibble verify with cublas forced
#   2. nibble bench --bits 8 on the 8 shapes at M = 64-1024: cublas forced with the plugin of call 7
#      (old: the planes as a 4-bit layer of twice K) and the new one, and the automatic choice (new)
# Bundle as call 5 (.gpu/oldplug holds the plugin of call 7). Run: bash .gpu/call8.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
P=$here/build/plugins/cuda_w4a16; OLD=$here/oldplug
for z in "$P"/*.xz "$OLD"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NIB=$here/build/tools/nibble/nibble; S=$OUT/summary.log; L=$OUT/logs; mkdir -p "$L"
nvidia-smi -L | tee "$S"
cd "$here"
for k in cublas auto; do
  (NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 300 \
     "$here/build/tests/test_conformance" > "$L/conf.$k" 2>&1; echo "exit=$?" >> "$L/conf.$k") &
done
(NIBBLE_TEST_PLUGIN_DIRS=$P timeout 300 "$here/build/tests/test_cuda_graph" > "$L/conf.cuda_graph" 2>&1
 echo "exit=$?" >> "$L/conf.cuda_graph") &
for f in tests/data/fixtures/*/; do
  n=$(basename "$f")
  (NIBBLE_CUDA_KERNEL=cublas NIBBLE_PLUGIN_PATH=$P timeout 200 "$NIB" verify --backend cuda_w4a16 --model "$f" \
     --reference "$f/reference.safetensors" > "$L/fix.$n" 2>&1; echo "exit=$?" >> "$L/fix.$n") &
done
wait
for f in "$L"/conf.*; do echo "${f##*/} $(grep -m1 -E 'cases checked|test cases' "$f") $(tail -1 "$f")"; done | tee -a "$S"
echo "fixtures (cublas forced): $(grep -l 'exit=0' "$L"/fix.* | wc -l) of $(ls "$L"/fix.* | wc -l) exit 0" | tee -a "$S"
grep -L 'exit=0' "$L"/fix.* | tee -a "$S"
SH=4096x6144,4096x4096,4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192
b() {  # label dir kernel dtype
  echo "== $1 $4" >> "$OUT/bench.txt"
  NIBBLE_CUDA_KERNEL=$3 NIBBLE_PLUGIN_PATH=$2 timeout 150 "$NIB" bench --backend cuda_w4a16 --bits 8 --shapes $SH \
    --m 64,128,256,320,512,1024 --dtype $4 --budget 0.15 >> "$OUT/bench.txt" 2>&1
}
b old-cublas "$OLD" cublas f16; b new-cublas "$P" cublas f16; b new-auto "$P" auto f16
b new-cublas "$P" cublas bf16; b new-auto "$P" auto bf16
/usr/bin/env python3 - "$OUT/bench.txt" <<'PY' | tee -a "$S"
import re, sys, collections
cur = None; d = {}
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+) (\S+)", line)
    if m: cur = m.groups(); continue
    f = line.split()
    if cur and len(f) > 10 and re.match(r"\d+x\d+$", f[0]) and f[1].isdigit():
        d[(cur[1], f[0], int(f[1]), cur[0])] = (float(f[-8]), f[3], float(f[-3]), f[-1])
for key in sorted({k[:3] for k in d}):
    row = [f"{key[0]:4} {key[1]:11} M={key[2]:5}"]
    for side in ("old-cublas", "new-cublas", "new-auto"):
        if key + (side,) in d:
            t, k, dn, ck = d[key + (side,)]
            row.append(f"{side} {k:6} {t:8.1f} {ck}")
    row.append(f"dense {dn:.1f}")
    print("  ".join(row))
PY
# (Only 8 files come back from $OUT: the fixture logs past the first three stayed on the machine; summary.log counts them.)
