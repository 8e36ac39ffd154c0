#!/bin/bash
# Device call 1 of 2026-12-07 (sixth session): verify the two GPU fixes that the fifth session
# built but could not run (its call 2 never got a machine):
#   (a) the dense path, bf16 with a bias: cuBLAS writes an fp32 chunk of y, then one kernel adds
#       the bias and rounds once (call 1 of the fifth session: 20 bf16 cases at 1.00-1.16x the
#       tolerance with the bias as cuBLAS's C operand);
#   (b) the GEMV reads x with ld.global.cg instead of __ldg (one stale-x wrong answer of v1 in the
#       automatic choice with PDL).
# Steps:
#   1. the conformance suite, in parallel: cuBLAS forced, v1 forced, the automatic choice with PDL
#      three times and without once; each log keeps its seed;
#   2. the GEMV's x loads changed: M <= 8 must be no slower. bench/ab.sh on the GPU, the CUDA
#      plugin before the change (1fbde70^, x through __ldg) against this one (__ldcg), fp16, the 8
#      shapes, M = 1, 4, 8, 2 rounds (bundle: AB_PLUGIN=cuda_w4a16 bench/ab_bundle.sh
#      /work/build-oldcuda build .gpu/abgpu, the two plugins xz-compressed); the 2026-12-02 run
#      gave M = 1 6.4-66.2 us, M = 8 9.0-67.6 us;
#   3. the peers table in bf16 through the automatic choice, M = 16-4096, the 8 shapes.
# The CPU half of this session's device work (the Xeon host) is call2.sh.
# Bundle: docs/bench/device-2026-12-07e/bundle.sh 1 (builds the reference build where missing).
# Run (device, kind nvidia-h200, carry [".gpu"]): bash .gpu/call1.sh
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
CONF=$here/build/tests/test_conformance
STD=$(mktemp -d)
say "== 1. conformance ($(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader); $(lscpu | grep -m1 'Model name'))"
run_conf() {  # name, environment...
  local name=$1
  shift
  (env "$@" NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 200 "$CONF" > "$STD/conf.$name" 2>&1
   echo "exit=$?" >> "$STD/conf.$name") &
}
run_conf cublas NIBBLE_CUDA_KERNEL=cublas NIBBLE_TEST_REQUIRE_KERNEL=cublas
run_conf v1 NIBBLE_CUDA_KERNEL=v1 NIBBLE_TEST_REQUIRE_KERNEL=v1
for i in 1 2 3; do run_conf auto$i NIBBLE_CUDA_KERNEL=auto; done
run_conf auto_nopdl NIBBLE_CUDA_KERNEL=auto NIBBLE_CUDA_OVERLAP=0
wait
for f in "$STD"/conf.*; do
  say "-- ${f##*/conf.}: $(grep -m1 'conformance seed' "$f") | $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
  grep "logged" "$f" | head -8 | cut -c1-260 | tee -a "$S"
done
say "== 2. GEMV A/B, M = 1-8 ($((SECONDS - T0)) s)"
if [ -d "$here/abgpu" ]; then
  (cd "$here/.." && OUT=$STD/abgpu AB_BACKEND=cuda_w4a16 AB_SHAPES=llama3-8b,llama3-70b AB_M=1,4,8 AB_ROUNDS=2 \
     AB_BUDGET_S=150 timeout 170 bash bench/ab.sh "$here/abgpu" > "$STD/abgpu.log" 2>&1)
  say "   exit $? after $((SECONDS - T0)) s"
  grep -E "^[0-9a-z]|median|geometric" "$STD/abgpu/summary.txt" 2>/dev/null | tee -a "$S"
fi
say "== 3. bench bf16 through the automatic choice ($((SECONDS - T0)) s)"
NIBBLE_PLUGIN_PATH=$P timeout $((540 - (SECONDS - T0))) "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b \
  --m 16,32,64,128,256,1024,4096 --dtype bf16 --budget 0.05 --json "$OUT/bench_bf16.json" > "$STD/bench_bf16.txt" 2>&1
say "   exit $? after $((SECONDS - T0)) s"
/usr/bin/env python3 "$here/peers.py" "$OUT/bench_bf16.json" 2>&1 | tee -a "$S"
tar -czf "$OUT/std.tar.gz" -C "$STD" .
say "== done in $((SECONDS - T0)) s"
