#!/bin/bash
# Device call 2 of 2026-12-07 (fourth session), after call 1 found (a) the dense path (dequantize +
# cuBLAS) over the bf16 tolerance with outlier activations and (b) dot-avx512vnni no faster than
# fused-avx512 at small M, its x gather then scalar double-precision code:
#   1. gpu_check.sh correctness (the conformance suite now with outliers; cuBLAS with fp32
#      split-K reductions);
#   2. nibble bench through the automatic choice, bf16 and fp16, M = 256, 1024, 4096 (the dense
#      path's time with the new math mode, against call 1 on the same kind of GPU);
#   3. on the host: `nibble plugins` (the calibration with the vectorized gather), the dot forms'
#      conformance, and dot-avx512vnni against fused-avx512 at M = 1, 2, 4 (2 and 16 threads),
#      two rounds in turn.
# Bundle as call1.sh. Run: bash .gpu/call2.sh
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
grep -h "logged" "$STD"/conformance*.log 2>/dev/null | head -20 | tee -a "$S"
for dt in bf16 f16; do
  say "== 2. bench $dt ($((SECONDS - T0)) s)"
  NIBBLE_PLUGIN_PATH=$P timeout 100 "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b \
    --m 256,1024,4096 --dtype $dt --budget 0.2 --json "$OUT/bench_$dt.json" > "$STD/bench_$dt.txt" 2>&1
  say "   exit $? after $((SECONDS - T0)) s"
  grep -E "^[0-9]+x[0-9]+ " "$STD/bench_$dt.txt" | cut -c1-160 | tee -a "$S"
done
tar -czf "$OUT/std.tar.gz" -C "$STD" .
say "== 3. CPU ($((SECONDS - T0)) s)"
C=$here/build/plugins/cpu_w4a16
export NIBBLE_PLUGIN_PATH=$C
for z in "$here"/lib/*.xz; do [[ -e "$z" ]] && xz -d -k -f "$z"; done
timeout 60 "$NIBBLE" plugins 2>&1 | grep -o "calibration: .*" | tee -a "$S"
conf=(NIBBLE_TEST_BACKEND=cpu_w4a16 NIBBLE_TEST_PLUGIN_DIRS="$C" NIBBLE_CPU_PATH=fused)
for v in "dot_avx512vnni NIBBLE_CPU_ISA=avx512vnni" "dot_avx512vnni NIBBLE_CPU_ISA=avx512vnni NIBBLE_NUM_THREADS=2" \
         "dot_avx2 NIBBLE_CPU_ISA=avx2-dot NIBBLE_CPU_GEMM_MIN_M=1000000"; do
  set -- $v
  name=$1; shift
  env "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=$name "$@" timeout 120 "$here/build/tests/test_conformance" > "$STD/c.log" 2>&1
  say "   conformance $name $* : exit $? $(grep -o '[0-9]* cases checked.*tolerance)' "$STD/c.log")"
done
for round in 1 2; do
  for isa in avx512vnni avx512; do
    (( SECONDS - T0 < 520 )) || { say "   out of time before round $round $isa"; continue; }
    NIBBLE_CPU_ISA=$isa timeout 60 "$NIBBLE" bench --backend cpu_w4a16 --shapes 4096x4096,14336x4096,8192x8192,4096x14336 \
      --m 1,2,4 --threads 2,16 --rotate-mb 640 --budget 0.2 --no-dense --json "$OUT/cpu_${isa}_$round.json" > "$STD/cpu.txt" 2>&1
    say "   round $round $isa: exit $?"
    grep -E "^[0-9]+x[0-9]+ " "$STD/cpu.txt" | cut -c1-100 | tee -a "$S"
  done
done
say "== done in $((SECONDS - T0)) s"
