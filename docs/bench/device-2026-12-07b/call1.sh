#!/bin/bash
# Device call 1 of 2026-12-07 (second session). What it checks and times:
#   1. gpu_check.sh run on this tree, correctness only (every kernel forced through the conformance
#      suite, the automatic choice with and without PDL, CUDA graphs, the 19 fixtures): the tree's
#      wgmma kernel now walks items through WgItems (default stream_k);
#   2. the conformance suite with wgmma_sched=waves: wg16, wg32, wg64, wg128, wg256 forced, and auto,
#      and wg16, wg64, wg256 with min_stages=200 (small grids: whole waves, raster bands and a tail
#      on the suite's shapes); wg256, the new BN 128 x BM 256 tile, is forced in step 1 as well;
#   3. nibble bench fp16 at M = 256, 512, 1024, 4096 on the 8 shapes: wg128 and wg256 forced, each with
#      stream_k and with waves (each run has cuBLAS fp16 dense beside it);
#   3b. bench_kernels --wgmma-diag for wg128 with and without waves at M = 1024 and 4096;
#   4. on the host's Xeon, the CPU plugin's conformance suite with gemm-avx512bf16 (its walk moved to
#      kernel_gemm_impl.h), gemm-avx2 and gemm-avx512 (new) forced; the f32 GEMM forms against the
#      one-tile forms (M = 8, 64, 256; 2 and 16 threads); then docs/bench/device-2026-12-07/call12.sh's
#      CPU runs (M = 1, cached against streamed weights, 1, 2 and 16 threads), while time is left.
# Bundle (here): plugins/cuda_w4a16/gpu_check.sh bundle; xz .gpu/build/plugins/cuda_w4a16/bench_kernels;
#   the CPU plugin and libdnnl.so.2.xz, libgomp, libnuma added from bench/xeon_bundle.sh's bundle;
#   xz .gpu/build/plugins/cuda_w4a16/cuda_w4a16.so; this script and call12.sh copied to .gpu/.
# Run: bash .gpu/call1.sh   (files under $OUT: summary.log, std.tar.gz, waves.tar.gz, cpu.tar.gz)
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
T0=$SECONDS
S=$OUT/summary.log
say() { echo "$*" | tee -a "$S"; }
# (bench_kernels stays packed until step 3b: gpu_check.sh would run its long --sweep)
find "$here" -name '*.xz' ! -name 'bench_kernels.xz' -exec xz -d -k -f {} \;
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16
NIBBLE=$here/build/tools/nibble/nibble
CONF=$here/build/tests/test_conformance
STD=$(mktemp -d); W=$(mktemp -d); C=$(mktemp -d)

# 1.
say "== 1. gpu_check.sh run, correctness only"
GPU_CHECK_ONLY=1 OUT=$STD timeout 240 bash "$here/gpu_check.sh" run > "$STD/run.out" 2>&1
say "   exit $? after $((SECONDS - T0)) s"
grep -E "conformance|cases checked|graph launches|fixtures|failed|bench|WRONG" "$STD/summary.log" | head -40 | tee -a "$S"
tar -czf "$OUT/std.tar.gz" -C "$STD" .

# 2.
say "== 2. conformance with wgmma_sched=waves ($((SECONDS - T0)) s)"
# The suite's shapes are small (N <= 200: one n tile), so with the plan's grid most launches have
# fewer tiles than blocks and no whole waves; with min_stages=200 the grids shrink to a few blocks
# and the launches at M = 257 (wg16: 17 m tiles) have whole waves, a raster band past 8 m tiles and
# a stream-K tail.
conf() {  # name, environment...
  local name=$1; shift
  (env "$@" NIBBLE_CUDA_WGMMA_SCHED=waves NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P \
     timeout 200 "$CONF" > "$W/conf.$name" 2>&1; echo "exit=$?" >> "$W/conf.$name") &
}
for k in wg16 wg32 wg64 wg128 wg256; do
  conf $k NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k
done
for k in wg16 wg64 wg256; do
  conf ${k}_ms200 NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_CUDA_MIN_STAGES=200
done
conf auto NIBBLE_CUDA_KERNEL=auto
wait
for f in "$W"/conf.*; do
  say "   ${f##*/conf.}: $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
done

# 3.
say "== 3. bench fp16, M = 256-4096 ($((SECONDS - T0)) s)"
bench() {  # name, environment...
  local name=$1; shift
  [ $((SECONDS - T0)) -gt 480 ] && { say "   $name skipped: $((SECONDS - T0)) s"; return; }
  env "$@" NIBBLE_PLUGIN_PATH=$P timeout 120 "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b \
    --m 256,512,1024,4096 --dtype f16 --budget 0.15 --json "$W/$name.json" > "$W/$name.txt" 2>&1
  say "   $name: exit $? after $((SECONDS - T0)) s"
}
bench wg128_sk NIBBLE_CUDA_KERNEL=wg128 NIBBLE_CUDA_WGMMA_SCHED=stream_k
bench wg128_waves NIBBLE_CUDA_KERNEL=wg128 NIBBLE_CUDA_WGMMA_SCHED=waves
bench wg256_sk NIBBLE_CUDA_KERNEL=wg256 NIBBLE_CUDA_WGMMA_SCHED=stream_k
bench wg256_waves NIBBLE_CUDA_KERNEL=wg256 NIBBLE_CUDA_WGMMA_SCHED=waves
/usr/bin/env python3 - "$W" <<'PY' 2>&1 | tee -a "$S"
import json, os, sys
w = sys.argv[1]
runs = {}
for n in ("wg128_sk", "wg128_waves", "wg256_sk", "wg256_waves"):
    p = os.path.join(w, n + ".json")
    if os.path.exists(p):
        runs[n] = {(r.get("k"), r.get("n"), r.get("m")): r for r in json.load(open(p))["results"]}
if runs:
    first = next(iter(runs.values()))
    print("   K x N, M: " + " | ".join(f"{n} us (x dense)" for n in runs))
    for key in sorted(first, key=lambda k: (k[2], k[0] * k[1])):
        cells = []
        for n, r in runs.items():
            x = r.get(key)
            if x is None:
                cells.append("-")
                continue
            us = x.get("us") or x.get("time_us")
            d = x.get("dense_us")
            cells.append(f"{x.get('kernel', '?').split()[0]} {us:.1f} ({d / us:.2f}x)" if us and d else str(x)[:60])
        print(f"   {key[0]}x{key[1]} M={key[2]}: " + " | ".join(cells))
PY
# 3b. where wg128's time goes at M = 1024 and 4096 (bench_kernels --wgmma-diag on the production
# path: x image, weights by cp.async), with and without whole waves; nodeq / nomma / nowait as in
# docs/cuda.md "Where the wgmma kernel's time goes".
if [ $((SECONDS - T0)) -lt 470 ]; then
  say "== 3b. wgmma diagnostics ($((SECONDS - T0)) s)"
  xz -d -k -f "$P/bench_kernels.xz"
  NIBBLE_CUDA_WGMMA_ABLATE=ximg+lsu,ximg+lsu+waves,ximg+lsu+nodeq,ximg+lsu+waves+nodeq,ximg+lsu+nomma,ximg+lsu+nowait,ximg+lsu+waves+noepi \
    timeout $((540 - (SECONDS - T0))) "$P/bench_kernels" --wgmma-diag --shapes 4096x4096,8192x57344,28672x8192 \
    --m 1024,4096 > "$W/diag.txt" 2>&1
  say "   exit $? after $((SECONDS - T0)) s"
  grep -vE "^ *$" "$W/diag.txt" | tail -30 >> "$S"
fi
tar -czf "$OUT/waves.tar.gz" -C "$W" .

# 4.
if [ $((SECONDS - T0)) -lt 440 ]; then
  say "== 4. Xeon: conformance with gemm-avx512bf16 and gemm-avx2 forced ($((SECONDS - T0)) s)"
  CP=$here/build/plugins/cpu_w4a16
  for v in "gemm_avx512bf16 avx512bf16" "gemm_avx2 avx2" "gemm_avx512 avx512"; do
    set -- $v
    (NIBBLE_CPU_PATH=fused NIBBLE_CPU_ISA=$2 NIBBLE_CPU_GEMM_MIN_M=1 NIBBLE_TEST_BACKEND=cpu_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$CP \
       NIBBLE_TEST_REQUIRE_KERNEL=$1 timeout 120 "$CONF" > "$C/conf.$1" 2>&1; echo "exit=$?" >> "$C/conf.$1") &
  done
  wait
  for f in "$C"/conf.*; do say "   ${f##*/conf.}: $(grep -m1 'cases checked' "$f") $(tail -1 "$f")"; done
  # The f32 GEMM forms against their one-tile forms (bf16 x, 2 and 16 threads).
  for isa in avx512 avx2; do
    for g in 1000000 1; do
      NIBBLE_PLUGIN_PATH=$CP NIBBLE_CPU_PATH=fused NIBBLE_CPU_ISA=$isa NIBBLE_CPU_GEMM_MIN_M=$g timeout 60 "$NIBBLE" bench \
        --backend cpu_w4a16 --shapes 4096x4096,14336x4096 --m 8,64,256 --threads 2,16 --dtype bf16 --budget 0.2 --no-dense \
        > "$C/gemm_f32.$isa.$g.txt" 2>&1
      grep -E "^ *[0-9]+x[0-9]+ +[0-9]" "$C/gemm_f32.$isa.$g.txt" | sed "s/^/   $isa min_m=$g: /" | tee -a "$S"
    done
  done
  say "== 4. Xeon: call12 ($((SECONDS - T0)) s)"
  OUT=$C timeout $((580 - (SECONDS - T0))) bash "$here/call12.sh" > "$C/run.out" 2>&1
  say "   exit $? after $((SECONDS - T0)) s"
  tail -40 "$C/summary.log" >> "$S"
  tar -czf "$OUT/cpu.tar.gz" -C "$C" .
else
  say "== 4. Xeon: skipped, $((SECONDS - T0)) s"
fi
say "== done in $((SECONDS - T0)) s"
