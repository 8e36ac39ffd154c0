#!/bin/bash
# Device call 7 of 2026-12-06 (H100): the Hopper rows past M = 256 set from call 6 (plan.cpp).
#   1. conformance with the automatic choice (the new plugin)
#   2. nibble bench on the 8 shapes at M = 257-1024 through auto, fp16 and bf16, cuBLAS dense in the
#      same run, the plugin of d85c45d (old: wg128 past 256 on 28672x8192 only) and the new one,
#      one round old/new; then 8 bits at M = 320 (must stay on dequantize + cuBLAS)
# Bundle as call 5 (.gpu/oldplug holds d85c45d's plugin). Run: bash .gpu/call7.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
P=$here/build/plugins/cuda_w4a16; OLD=$here/oldplug
for z in "$P"/*.xz "$OLD"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NIB=$here/build/tools/nibble/nibble; S=$OUT/summary.log
nvidia-smi -L | tee "$S"
NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 200 "$here/build/tests/test_conformance" > "$OUT/conformance.log" 2>&1
echo "conformance auto: exit $? $(grep -m1 'cases checked' "$OUT/conformance.log")" | tee -a "$S"
for r in 1; do for side in old new; do for dt in f16 bf16; do
  d=$P; [ $side = old ] && d=$OLD
  echo "== round $r $side $dt" >> "$OUT/bench.txt"
  NIBBLE_PLUGIN_PATH=$d timeout 150 "$NIB" bench --backend cuda_w4a16 --shapes 4096x6144,4096x4096,4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192 \
    --m 257,320,384,448,512,640,768,1024 --dtype $dt --budget 0.15 >> "$OUT/bench.txt" 2>&1
done; done; done
for dt in f16 bf16; do
  echo "== 8 bits new $dt" >> "$OUT/bench8.txt"
  NIBBLE_PLUGIN_PATH=$P timeout 150 "$NIB" bench --backend cuda_w4a16 --shapes 4096x6144,4096x4096,4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192 --bits 8 --m 320 \
    --dtype $dt --budget 0.15 >> "$OUT/bench8.txt" 2>&1
done
grep -E "^[0-9]+x" "$OUT/bench8.txt" | awk '{print $1, $2, $4, $(NF-1), $NF}' | tee -a "$S"
/usr/bin/env python3 - "$OUT/bench.txt" <<'PY' | tee -a "$S"
import re, sys, collections, statistics
cur = None; d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"== round (\d) (\w+) (\w+)", line)
    if m: cur = m.groups(); continue
    f = line.split()
    if cur and len(f) > 10 and re.match(r"\d+x\d+$", f[0]) and f[1].isdigit():
        # shape M thr kernel-words... time GB/s GFLOP/s t_min %roof dense x-dense check
        d[(cur[2], f[0], int(f[1]), cur[1])].append((float(f[-8]), f[3], f[-3], f[-1]))
for key in sorted({k[:3] for k in d}):
    o = d.get(key + ("old",), []); n = d.get(key + ("new",), [])
    if not o or not n: continue
    mo = statistics.median(x[0] for x in o); mn = statistics.median(x[0] for x in n)
    print(f"{key[0]:4} {key[1]:11} M={key[2]:5} old {o[0][1]:7} {mo:8.1f}  new {n[0][1]:7} {mn:8.1f}  new/old {mn/mo:.3f}  dense {n[0][2]}  check {n[0][3]}")
PY
