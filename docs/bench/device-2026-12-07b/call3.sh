#!/bin/bash
# Device call 3 of 2026-12-07 (second/third session): the new defaults of the wgmma kernel
# (wg256 where the rules had wg128, M = 129-1024; whole waves for BM >= 128, `wgmma_sched=auto`).
#   1. gpu_check.sh correctness only (every kernel forced, auto with and without PDL, CUDA graphs,
#      the 19 fixtures);
#   2. nibble bench through the automatic choice, fp16 and bf16, M = 1-4096 on the 8 shapes, with
#      cuBLAS dense beside it; the peers table (docs/bench/h200-2026-12-02/peers.py).
# Bundle: as call1.sh (plugins/cuda_w4a16/gpu_check.sh bundle, xz of the large files); this script
# and peers.py copied to .gpu/. Run: bash .gpu/call3.sh  (files: summary.log, bench_f16.json,
# bench_bf16.json, std.tar.gz)
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
T0=$SECONDS
S=$OUT/summary.log
say() { echo "$*" | tee -a "$S"; }
find "$here" -name '*.xz' ! -name 'bench_kernels.xz' -exec xz -d -k -f {} \;
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16
NIBBLE=$here/build/tools/nibble/nibble
STD=$(mktemp -d)
say "== 1. gpu_check.sh run, correctness only"
GPU_CHECK_ONLY=1 OUT=$STD timeout 200 bash "$here/gpu_check.sh" run > "$STD/run.out" 2>&1
say "   exit $? after $((SECONDS - T0)) s"
grep -E "conformance|cases checked|graph launches|fixtures|failed|WRONG" "$STD/summary.log" | head -40 | tee -a "$S"
tar -czf "$OUT/std.tar.gz" -C "$STD" .
for dt in f16 bf16; do
  say "== 2. bench $dt ($((SECONDS - T0)) s)"
  NIBBLE_PLUGIN_PATH=$P timeout 150 "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b \
    --m 1,2,4,8,16,32,64,128,256,512,1024,4096 --dtype $dt --budget 0.2 --json "$OUT/bench_$dt.json" \
    > "$STD/bench_$dt.txt" 2>&1
  say "   exit $? after $((SECONDS - T0)) s"
  /usr/bin/env python3 "$here/peers.py" "$OUT/bench_$dt.json" 2>&1 | tee -a "$S"
done
say "== done in $((SECONDS - T0)) s"
