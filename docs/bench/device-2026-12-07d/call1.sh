#!/bin/bash
# Device call 1 of 2026-12-07 (fifth session), after two accuracy fixes for bf16 with outlier
# activations: the dense path's bias as cuBLAS's C operand (y rounded once), and the tiled
# kernels' one-pass 8-bit instances (mma.sync and wgmma: both nibble planes of a code dequantized
# together, rounded once; half the mma of two planes).
#   1. gpu_check.sh correctness only (every kernel forced, the automatic choice with and without
#      PDL, CUDA graphs, the fixtures; the conformance suite has the outlier rows);
#   2. 8-bit layers, bf16 and fp16: s4, s8, l, wg64, wg128 (all one pass now) and the automatic
#      choice at M = 16-256 (nibble bench --bits 8 --asym, each kernel forced);
#   3. the peers table: nibble bench through the automatic choice, fp16, M = 1-4096 on the 8
#      shapes, cuBLAS dense beside it (docs/bench/h200-2026-12-02/peers.py).
# Bundle: plugins/cuda_w4a16/gpu_check.sh bundle; xz of cuda_w4a16.so and bench_kernels; this
# script and peers.py copied to .gpu/. Run: bash .gpu/call1.sh
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
GPU_CHECK_ONLY=1 OUT=$STD timeout 220 bash "$here/gpu_check.sh" run > "$STD/run.out" 2>&1
say "   exit $? after $((SECONDS - T0)) s"
grep -E "conformance|cases checked|graph launches|fixtures|failed|WRONG" "$STD/summary.log" | head -40 | tee -a "$S"
grep -h "logged\|tolerance)" "$STD"/conformance*.log 2>/dev/null | grep -v "largest error 0\.[0-8]" | head -30 | tee -a "$S"
tar -czf "$OUT/std.tar.gz" -C "$STD" .
say "== 2. 8-bit layers, kernels forced ($((SECONDS - T0)) s)"
for dt in bf16 f16; do
  for k in s8 l wg64 wg128 auto; do
    (( SECONDS - T0 < 300 )) || { say "   out of time before $dt $k"; continue; }
    env $([ $k = auto ] || echo NIBBLE_CUDA_KERNEL=$k) NIBBLE_PLUGIN_PATH=$P timeout 60 "$NIBBLE" bench \
      --backend cuda_w4a16 --bits 8 --asym --shapes 4096x4096,14336x4096,8192x8192,28672x8192 \
      --m 32,64,128,256 --dtype $dt --budget 0.05 --no-dense --json "$OUT/b8_${dt}_$k.json" > "$STD/b8.txt" 2>&1
    say "   $dt $k: exit $?"
    grep -E "^[0-9]+x[0-9]+ " "$STD/b8.txt" | cut -c1-120 | tee -a "$S"
  done
done
tar -czf "$OUT/b8.tar.gz" -C "$OUT" $(cd "$OUT" && ls b8_*.json) && rm -f "$OUT"/b8_*.json
say "== 3. bench f16 through the automatic choice ($((SECONDS - T0)) s)"
(( SECONDS - T0 < 320 )) && {
  NIBBLE_PLUGIN_PATH=$P timeout $((400 - (SECONDS - T0))) "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b \
    --m 1,16,32,64,128,256,1024,4096 --dtype f16 --budget 0.05 --json "$OUT/bench_f16.json" \
    > "$STD/bench_f16.txt" 2>&1
  say "   exit $? after $((SECONDS - T0)) s"
  /usr/bin/env python3 "$here/peers.py" "$OUT/bench_f16.json" 2>&1 | tee -a "$S"
}
say "== done in $((SECONDS - T0)) s"
