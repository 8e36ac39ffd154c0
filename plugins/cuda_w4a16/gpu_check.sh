#!/bin/bash
# gpu_check.sh: every GPU-side check and timing of cuda_w4a16 in one device call.
#
#   here (the development machine, after `ninja -C build`):
#     plugins/cuda_w4a16/gpu_check.sh bundle        # -> .gpu (pruned to what the run needs, < 64 MiB)
#   there (the GPU machine, with .gpu carried; writes everything under $OUT):
#     bash .gpu/gpu_check.sh run
#
# The run, in order, each step under its own timeout and the later steps only while time is left:
#   1. device facts (nvidia-smi) and the SASS of the kernels (cuobjdump: HGMMA present in the wgmma
#      kernels, no local memory in any)
#   2. in parallel: test_conformance with every kernel of the plan's table forced
#      (NIBBLE_CUDA_KERNEL + NIBBLE_TEST_REQUIRE_KERNEL) and with the automatic choice (PDL on and
#      off), rocm_w4a16_on_cuda's conformance, tests/test_cuda_graph (apply in CUDA graphs),
#      `nibble verify --backend cuda_w4a16` on every fixture and `--backend rocm_w4a16_on_cuda`
#      on the 4- and 8-bit ones (the widths rocm_w4a16 declares)
#   3. nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 1,...,4096, fp16 and bf16,
#      JSON with the kernel of every point and the dense cuBLAS baseline
#   4. bench_kernels --check (every kernel against cuBLAS on dequantized weights, odd M) and
#      --sweep (every kernel forced at M = 16 ... 4096 on the 8 shapes: the data behind the plan's
#      choice rules)
# GPU_CHECK_ONLY=1 stops after step 2 (correctness only).
# Files under $OUT (at most 8 come back): summary.log (read it first), conformance.log,
# bench_f16.json, bench_bf16.json, bench.txt, cuda.svg (fp16), sweep.txt, sass.txt.
set -u

mode=${1:-}

if [ "$mode" = bundle ]; then
  set -e
  root=$(cd "$(dirname "$0")/../.." && pwd)
  cd "$root"
  scripts/gpu-bundle build .gpu tests/data
  # What the run does not load: the CPU plugin and oneDNN, the ROCm plugin and its runtime, the
  # other tests.
  rm -rf .gpu/build/plugins/cpu_w4a16 .gpu/build/plugins/rocm_w4a16/rocm_w4a16.so \
    .gpu/build/plugins/rocm_w4a16/rocm_w4a16_kernels.o .gpu/build/plugins/rocm_w4a16/test_* \
    .gpu/build/plugins/cuda_w4a16/test_* .gpu/build/plugins/cuda_w4a16/layout_check
  rm -f .gpu/lib/libdnnl* .gpu/lib/libamdhip64* .gpu/lib/libhsa* .gpu/lib/libOpenCL* .gpu/lib/libdrm* \
    .gpu/lib/libnuma* .gpu/lib/libelf* .gpu/lib/libgomp*
  find .gpu/build/tests -maxdepth 1 -type f ! -name test_conformance ! -name test_cuda_graph -delete
  rm -rf .gpu/build/tests/plugins .gpu/build/fuzz
  cp "$0" .gpu/gpu_check.sh
  chmod +x .gpu/gpu_check.sh
  du -sh .gpu
  size=$(du -sm .gpu | cut -f1)
  [ "$size" -le 63 ] || { echo "bundle is $size MiB: over the 64 MiB a call may carry" >&2; exit 1; }
  exit 0
fi

if [ "$mode" != run ]; then
  echo "usage: $0 bundle | run" >&2
  exit 2
fi

# ---- on the GPU machine ----
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
: "${OUT:?OUT must name the folder whose files come back}"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16
R=$here/build/plugins/rocm_w4a16/on_cuda
NIBBLE=$here/build/tools/nibble/nibble
CONF=$here/build/tests/test_conformance
BK=$P/bench_kernels
S=$OUT/summary.log
T0=$SECONDS
TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
left() { echo $((540 - (SECONDS - T0))); }  # seconds left of a 540 s plan (the call's limit is 600)

say "== gpu_check.sh run, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$S"

# 1. SASS: per kernel, HGMMA and HMMA counts and local-memory instructions (LDL/STL).
{
  CUOBJ=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
  if [ -n "$CUOBJ" ]; then
    "$CUOBJ" --dump-sass "$P/cuda_w4a16.so" > "$TMP/sass.full" 2>&1
    awk '/Function :/ {if (f) printf "%s hgmma=%d hmma=%d ldl_stl=%d\n", f, g, h, l; f=$3; g=h=l=0}
         /HGMMA/ {g++} /HMMA/ {h++} /LDL|STL/ {l++}
         END {if (f) printf "%s hgmma=%d hmma=%d ldl_stl=%d\n", f, g, h, l}' "$TMP/sass.full"
    echo "-- the wgmma kernel (f16, BM 128), first 400 lines of its SASS:"
    awk '/Function :.*wgmma_kernel.*6__half.*Li128/ {p=1} p && n < 400 {print; n++}' "$TMP/sass.full"
  else
    echo "no cuobjdump on this machine"
  fi
} > "$OUT/sass.txt" 2>&1
say "-- SASS (sass.txt): wgmma kernels with HGMMA:" \
  "$(grep -c 'wgmma_kernel.*hgmma=[1-9]' "$OUT/sass.txt")/8;" \
  "kernels with local memory: $(grep -c 'ldl_stl=[1-9]' "$OUT/sass.txt")"

# 2. Correctness, all in parallel (16 cores; the GPU is shared, nothing here is timed).
# Every kernel of plan.cpp's kKernelTable.
KERNELS="v1 v2 v4 v2u2 s1 s2 s4 s8 l wg16 wg32 wg64 wg128 wg256 cublas"
run_conf() {  # name, environment...
  local name=$1
  shift
  (env "$@" NIBBLE_TEST_BACKEND=${BACKEND:-cuda_w4a16} NIBBLE_TEST_PLUGIN_DIRS=${DIRS:-$P} \
    timeout 300 "$CONF" > "$TMP/conf.$name" 2>&1
   echo "exit=$?" >> "$TMP/conf.$name") &
}
for k in $KERNELS; do run_conf "$k" NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k; done
run_conf auto NIBBLE_CUDA_KERNEL=auto
run_conf auto_nopdl NIBBLE_CUDA_KERNEL=auto NIBBLE_CUDA_OVERLAP=0
BACKEND=rocm_w4a16_on_cuda DIRS=$R run_conf rocm_on_cuda
# apply() captured into CUDA graphs and replayed (tests/test_cuda_graph.cpp)
(NIBBLE_TEST_PLUGIN_DIRS=$P timeout 300 "$here/build/tests/test_cuda_graph" > "$TMP/conf.cuda_graph" 2>&1
 echo "exit=$?" >> "$TMP/conf.cuda_graph") &
(NIBBLE_TEST_BACKEND=rocm_w4a16_on_cuda NIBBLE_TEST_PLUGIN_DIRS=$R timeout 300 "$here/build/tests/test_cuda_graph" \
   > "$TMP/conf.rocm_on_cuda_graph" 2>&1
 echo "exit=$?" >> "$TMP/conf.rocm_on_cuda_graph") &
for f in tests/data/fixtures/*/; do
  n=$(basename "$f")
  (NIBBLE_PLUGIN_PATH=$P timeout 200 "$NIBBLE" verify --backend cuda_w4a16 --model "$f" \
     --reference "$f/reference.safetensors" > "$TMP/fix.$n" 2>&1
   echo "exit=$?" >> "$TMP/fix.$n") &
done
# The ROCm kernels (built for CUDA) on the fixtures of the widths rocm_w4a16 declares (4 and 8 bits;
# a fixture with a 2- or 3-bit layer is left to the backends that run it).
for f in tests/data/fixtures/*/; do
  n=$(basename "$f")
  widths=$(grep -o '"bits": *[0-9]*' "$f/meta.json" | grep -o '[0-9]*$' | sort -u | tr '\n' ' ')
  [ -z "$(echo "$widths" | tr ' ' '\n' | grep -vE '^(4|8)?$')" ] || continue
  (NIBBLE_PLUGIN_PATH=$R timeout 200 "$NIBBLE" verify --backend rocm_w4a16_on_cuda --model "$f" \
     --reference "$f/reference.safetensors" > "$TMP/rfix.$n" 2>&1
   echo "exit=$?" >> "$TMP/rfix.$n") &
done
wait
{
  for f in "$TMP"/conf.*; do
    echo "== conformance ${f##*/conf.}"
    grep -E "seed|cases checked|SKIP|ERROR|FAIL|out of tolerance|declined|exit=|Status|assertions" "$f" | head -40
  done
  for f in "$TMP"/fix.*; do echo "== fixture ${f##*/fix.}"; tail -3 "$f"; done
  for f in "$TMP"/rfix.*; do echo "== fixture on rocm_w4a16_on_cuda ${f##*/rfix.}"; tail -3 "$f"; done
} > "$OUT/conformance.log"
say "-- conformance (conformance.log):"
for f in "$TMP"/conf.*; do
  say "   ${f##*/conf.}: $(grep -m1 -E 'cases checked|graph launches' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
done
nfix=$(ls "$TMP"/fix.* | wc -l)
okfix=$(grep -l "exit=0" "$TMP"/fix.* | wc -l)
say "-- fixtures through nibble verify --backend cuda_w4a16: $okfix of $nfix exit 0"
grep -L "exit=0" "$TMP"/fix.* 2>/dev/null | sed 's/.*fix\./   failed: /' | tee -a "$S"
nrfix=$(ls "$TMP"/rfix.* 2>/dev/null | wc -l)
okrfix=$(grep -l "exit=0" "$TMP"/rfix.* 2>/dev/null | wc -l)
say "-- 4- and 8-bit fixtures through nibble verify --backend rocm_w4a16_on_cuda: $okrfix of $nrfix exit 0"
grep -L "exit=0" "$TMP"/rfix.* 2>/dev/null | sed 's/.*rfix\./   failed: /' | tee -a "$S"
if [ "${GPU_CHECK_ONLY:-0}" = 1 ]; then say "== correctness only (GPU_CHECK_ONLY=1): done in $((SECONDS - T0)) s"; exit 0; fi

# 3. nibble bench, fp16 and bf16 (the GPU to itself from here on).
: > "$OUT/bench.txt"
for dt in f16 bf16; do
  if [ "$(left)" -lt 120 ]; then say "-- bench $dt skipped: $(left) s left"; continue; fi
  echo "== nibble bench --dtype $dt" >> "$OUT/bench.txt"
  NIBBLE_PLUGIN_PATH=$P timeout $(( $(left) - 60 )) "$NIBBLE" bench --backend cuda_w4a16 \
    --shapes llama3-8b,llama3-70b --m 1,2,4,8,16,32,64,128,256,1024,4096 --dtype $dt --budget 0.25 \
    --json "$OUT/bench_$dt.json" $([ $dt = f16 ] && echo --svg "$OUT/cuda.svg") >> "$OUT/bench.txt" 2>&1
  say "-- bench $dt: exit $? after $((SECONDS - T0)) s (bench.txt, bench_$dt.json)"
done
/usr/bin/env python3 - "$OUT" <<'PY' 2>&1 | tee -a "$S"
import json, sys, os
for dt in ("f16", "bf16"):
    p = os.path.join(sys.argv[1], f"bench_{dt}.json")
    if not os.path.exists(p):
        continue
    r = json.load(open(p))["results"]
    print(f"   {dt}: shape M kernel us (x dense):")
    for m in sorted({x["m"] for x in r}):
        row = [x for x in r if x["m"] == m]
        bad = sum(1 for x in row if not x["check_ok"])
        cells = " ".join(f"{x['shape']}:{x['kernel'].split()[0]}:{x['time_us']:.1f}"
                         f"({(x['speedup_vs_dense'] or 0):.2f}x)" for x in row)
        print(f"   M={m:<5} {cells}{'  CHECK FAILED: %d' % bad if bad else ''}")
PY

# 4. Every kernel forced: check against cuBLAS on odd M, then the sweep.
: > "$OUT/sweep.txt"
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 30 )) "$BK" --check --no-time --out "$TMP/check.txt" > /dev/null 2>&1
  say "-- bench_kernels --check: exit $? ($(grep -c WRONG "$TMP/check.txt" 2>/dev/null) lines WRONG; sweep.txt)"
  cat "$TMP/check.txt" >> "$OUT/sweep.txt" 2>/dev/null
fi
if [ "$(left)" -gt 90 ]; then
  timeout $(( $(left) - 10 )) "$BK" --sweep --m 16,32,64,128,256,1024,4096 --out "$TMP/sweep.txt" > /dev/null 2>&1
  say "-- bench_kernels --sweep: exit $? (sweep.txt)"
  cat "$TMP/sweep.txt" >> "$OUT/sweep.txt" 2>/dev/null
else
  say "-- sweep skipped: $(left) s left"
fi
say "== done in $((SECONDS - T0)) s"
