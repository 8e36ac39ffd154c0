#!/bin/bash
# Device call 2 of 2026-12-07 (fifth session), after call 1 found (a) the dense path still over
# the bf16 tolerance in cases with a bias although the bias was cuBLAS's C operand (beta = 1), and
# (b) one wrong answer of the GEMV v1 in the automatic choice with PDL (the first bf16 act-order
# case at M = 1; v1 forced and the automatic choice without PDL passed), for which the GEMV now
# reads x with ld.global.cg instead of the read-only path (__ldg), which PDL does not cover:
#   1. the conformance suite, in parallel: cuBLAS forced (bf16 with a bias now through an fp32 y
#      chunk and one rounding), the automatic choice with PDL three times and without once, v1
#      forced; each log keeps its seed;
#   2. the peers table in bf16: nibble bench through the automatic choice, M = 1-4096, the 8 shapes.
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
CONF=$here/build/tests/test_conformance
STD=$(mktemp -d)
say "== 1. conformance ($(nvidia-smi --query-gpu=name --format=csv,noheader))"
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
tar -czf "$OUT/std.tar.gz" -C "$STD" .
say "== 2. bench bf16 through the automatic choice ($((SECONDS - T0)) s)"
NIBBLE_PLUGIN_PATH=$P timeout $((230 - (SECONDS - T0))) "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b \
  --m 1,16,32,64,128,256,1024,4096 --dtype bf16 --budget 0.05 --json "$OUT/bench_bf16.json" > "$STD/bench_bf16.txt" 2>&1
say "   exit $? after $((SECONDS - T0)) s"
/usr/bin/env python3 "$here/peers.py" "$OUT/bench_bf16.json" 2>&1 | tee -a "$S"
say "== done in $((SECONDS - T0)) s"
