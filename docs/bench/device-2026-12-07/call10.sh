#!/bin/bash
# Device call 10 (2026-12-07, H100): dequantize + cuBLAS with chunk i + 1 dequantized on a second
# stream while chunk i's GEMM runs (option dense_overlap), and the chunk sweep of call 9 again
# (its files did not survive the session).
#   1. correctness, in parallel: tests/test_cuda_graph (its new case forces cublas, 1 MiB chunks and
#      the overlap: 3-8 chunks per call, in graphs and directly), the conformance suite with cublas
#      forced + overlap + 1 MiB chunks and with the automatic choice, the 19 fixtures through
#      nibble verify with cublas forced + overlap + 1 MiB chunks
#   2. nibble bench --backend cuda_w4a16, cublas forced, fp16, the 8 shapes, M = 256, 1024, 4096,
#      cuBLAS dense in the same run, in the order o0.c128 o1.c128 o1.c64 o1.c32 o0.c32 o0.c16
#      o0.c128 o1.c128 (oN = dense_overlap N, cN = dense_chunk_mib N)
# Bundle: plugins/cuda_w4a16/gpu_check.sh bundle, this script copied to .gpu/. Run: bash .gpu/call10.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
P=$here/build/plugins/cuda_w4a16
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NIB=$here/build/tools/nibble/nibble; S=$OUT/summary.log; L=$OUT/logs; mkdir -p "$L"
T0=$SECONDS
nvidia-smi -L | tee "$S"
cd "$here"
(NIBBLE_TEST_PLUGIN_DIRS=$P timeout 200 "$here/build/tests/test_cuda_graph" > "$L/conf.cuda_graph" 2>&1
 echo "exit=$?" >> "$L/conf.cuda_graph") &
(NIBBLE_CUDA_KERNEL=cublas NIBBLE_CUDA_DENSE_OVERLAP=1 NIBBLE_CUDA_DENSE_CHUNK_MIB=1 NIBBLE_TEST_BACKEND=cuda_w4a16 \
   NIBBLE_TEST_PLUGIN_DIRS=$P timeout 250 "$here/build/tests/test_conformance" > "$L/conf.cublas-overlap" 2>&1
 echo "exit=$?" >> "$L/conf.cublas-overlap") &
(NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 250 "$here/build/tests/test_conformance" \
   > "$L/conf.auto" 2>&1; echo "exit=$?" >> "$L/conf.auto") &
for f in tests/data/fixtures/*/; do
  n=$(basename "$f")
  (NIBBLE_CUDA_KERNEL=cublas NIBBLE_CUDA_DENSE_OVERLAP=1 NIBBLE_CUDA_DENSE_CHUNK_MIB=1 NIBBLE_PLUGIN_PATH=$P \
     timeout 200 "$NIB" verify --backend cuda_w4a16 --model "$f" --reference "$f/reference.safetensors" \
     > "$L/fix.$n" 2>&1; echo "exit=$?" >> "$L/fix.$n") &
done
wait
for f in "$L"/conf.*; do echo "${f##*/} $(grep -m1 -E 'cases checked|test cases' "$f") $(tail -1 "$f")"; done | tee -a "$S"
grep -h "second stream\|graph launches" "$L/conf.cuda_graph" | head -4 | tee -a "$S"
echo "fixtures (cublas + overlap + 1 MiB chunks): $(grep -l 'exit=0' "$L"/fix.* | wc -l) of $(ls "$L"/fix.* | wc -l) exit 0" | tee -a "$S"
grep -L 'exit=0' "$L"/fix.* | tee -a "$S"
echo "correctness done at $((SECONDS - T0)) s" | tee -a "$S"
SH=4096x6144,4096x4096,4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192
i=0
for v in o0.c128 o1.c128 o1.c64 o1.c32 o0.c32 o0.c16 o0.c128 o1.c128; do
  i=$((i + 1))
  [ $((SECONDS - T0)) -gt 500 ] && { echo "out of time before $v.$i" | tee -a "$S"; break; }
  o=${v%%.*}; c=${v#*.}
  echo "== $v.$i f16" >> "$OUT/bench.txt"
  NIBBLE_CUDA_DENSE_OVERLAP=${o#o} NIBBLE_CUDA_DENSE_CHUNK_MIB=${c#c} NIBBLE_CUDA_KERNEL=cublas NIBBLE_PLUGIN_PATH=$P \
    timeout 90 "$NIB" bench --backend cuda_w4a16 --shapes $SH --m 256,1024,4096 --dtype f16 --budget 0.1 \
    >> "$OUT/bench.txt" 2>&1
done
/usr/bin/env python3 - "$OUT/bench.txt" <<'PY' | tee -a "$S"
import re, sys
cur = None; d = {}; sides = []; checks = set()
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+) (\S+)", line)
    if m: cur = m.group(1); sides.append(cur); continue
    f = line.split()
    if cur and len(f) > 10 and re.match(r"\d+x\d+$", f[0]) and f[1].isdigit():
        d[(f[0], int(f[1]), cur)] = (float(f[-8]), float(f[-3]))
        checks.add(f[-1])
print("check column values:", sorted(checks))
print("shape       M     " + " ".join(f"{s:>9}" for s in sides) + "  dense(first)")
for key in sorted({k[:2] for k in d}):
    print(f"{key[0]:11} {key[1]:5} " + " ".join(f"{d[key + (s,)][0]:9.1f}" if key + (s,) in d else "        -" for s in sides)
          + f"  {d[key + (sides[0],)][1]:8.1f}")
PY
echo "total $((SECONDS - T0)) s" | tee -a "$S"
