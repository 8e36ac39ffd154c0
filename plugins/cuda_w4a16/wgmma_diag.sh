#!/bin/bash
# wgmma_diag.sh: where the time of the sm_90a wgmma kernel goes, in one device call.
#
#   here (the development machine, after `ninja -C build`):
#     plugins/cuda_w4a16/wgmma_diag.sh bundle       # -> .gpu (gpu_check.sh's bundle plus this script)
#   there (the GPU machine, with .gpu carried; writes everything under $OUT):
#     bash .gpu/wgmma_diag.sh run
#
# The run, in order, within about 300 s:
#   1. device facts (nvidia-smi) and per wgmma kernel instance its SASS counts (cuobjdump): HGMMA,
#      local memory (LDL/STL), WARPGROUP.DEPBAR/ARRIVE (where ptxas waits for wgmma groups), the
#      mbarrier and cp.async instructions; the SASS of the fp16 BM 16 production kernel
#   2. in parallel: test_conformance with wg16, wg32, wg64, wg128 forced (NIBBLE_CUDA_KERNEL +
#      NIBBLE_TEST_REQUIRE_KERNEL), each with either x path (NIBBLE_CUDA_WGMMA_X=copy, the default,
#      and =image), and with the automatic choice
#   3. bench_kernels --wgmma-diag on 4096x4096, 8192x8192, 8192x57344 at M = 16, 64, 256, 4096:
#      the wgmma kernel and each variant of NIBBLE_CUDA_WGMMA_ABLATE (bench_kernels.cu lists
#      them; docs/cuda.md says what each should show), then v1, v2u2 (M <= 64), s8, l, cublas and
#      the wg kernel through the plugin on the same points; one table of all of it at the end
# Files under $OUT: summary.log (read it first: conformance verdicts and the table), diag.txt
# (every line of step 3), conformance.log, sass.txt.
set -u

mode=${1:-}

if [ "$mode" = bundle ]; then
  set -e
  here=$(cd "$(dirname "$0")" && pwd)
  root=$(cd "$here/../.." && pwd)
  "$here/gpu_check.sh" bundle
  cp "$here/wgmma_diag.sh" "$root/.gpu/wgmma_diag.sh"
  chmod +x "$root/.gpu/wgmma_diag.sh"
  test -x "$root/.gpu/build/plugins/cuda_w4a16/bench_kernels" || { echo "bench_kernels missing from .gpu" >&2; exit 1; }
  size=$(du -sm "$root/.gpu" | cut -f1)
  [ "$size" -le 63 ] || { echo "bundle is $size MiB: over the 64 MiB a call may carry" >&2; exit 1; }
  echo ".gpu: $size MiB"
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
CONF=$here/build/tests/test_conformance
BK=$P/bench_kernels
S=$OUT/summary.log
T0=$SECONDS
TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
left() { echo $((300 - (SECONDS - T0))); }

say "== wgmma_diag.sh run, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$S"

# 1. SASS facts of every wgmma instance (production: mode 0; diagnostics: modes 1-4).
{
  CUOBJ=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
  if [ -n "$CUOBJ" ]; then
    "$CUOBJ" --dump-sass "$P/bench_kernels" > "$TMP/sass.full" 2>&1
    echo "kernel: HGMMA, LDL/STL, WARPGROUP.DEPBAR, WARPGROUP.ARRIVE, USETMAXREG (setmaxnreg), SYNCS (mbarrier)," \
      "LDGSTS (cp.async), UBLKCP (bulk copy), instructions"
    awk 'function out() {if (f ~ /wgmma_kernel/) printf "%s hgmma=%d ldl_stl=%d depbar=%d arrive=%d setmaxreg=%d syncs=%d ldgsts=%d ublkcp=%d n=%d\n", f, g, l, d, a, r, y, c, b, n}
         /Function :/ {out(); f=$3; g=l=d=a=r=y=c=b=n=0}
         /\/\*[0-9a-f]+\*\// {n++}
         /HGMMA/ {g++} /LDL|STL/ {l++} /WARPGROUP.DEPBAR/ {d++} /WARPGROUP.ARRIVE/ {a++} /USETMAXREG/ {r++} /SYNCS/ {y++}
         /LDGSTS/ {c++} /UBLKCP/ {b++}
         END {out()}' \
      "$TMP/sass.full"
    echo "-- the production wgmma kernel, fp16 BM 16 (mode 0), its SASS:"
    awk '/Function :.*wgmma_kernel.*6__halfLi16ELi0E/ {p=1; next} p && /Function :/ {exit} p {print}' "$TMP/sass.full" | head -1500
  else
    echo "no cuobjdump on this machine"
  fi
} > "$OUT/sass.txt" 2>&1
say "-- SASS (sass.txt): $(grep -c 'wgmma_kernel.*hgmma=' "$OUT/sass.txt") wgmma instances;" \
  "with local memory: $(grep -c 'wgmma_kernel.*ldl_stl=[1-9]' "$OUT/sass.txt")"
grep 'wgmma_kernel.*hgmma=' "$OUT/sass.txt" | sed 's/^_ZN6nibble4cuda[^w]*w4a16_wgmma_kernelI/   /' | tee -a "$S"

# 2. Correctness of the wgmma kernels through the plugin, all at once (nothing here is timed).
run_conf() {  # name, environment...
  local name=$1
  shift
  (env "$@" NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 150 "$CONF" > "$TMP/conf.$name" 2>&1
   echo "exit=$?" >> "$TMP/conf.$name") &
}
for k in wg16 wg32 wg64 wg128; do
  run_conf "$k" NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k
  run_conf "$k.ximg" NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_CUDA_WGMMA_X=image
done
run_conf auto NIBBLE_CUDA_KERNEL=auto
wait
{
  for f in "$TMP"/conf.*; do
    echo "== conformance ${f##*/conf.}"
    grep -E "cases checked|SKIP|ERROR|FAIL|out of tolerance|declined|exit=|Status|assertions" "$f" | head -40
  done
} > "$OUT/conformance.log"
say "-- conformance (conformance.log), after $((SECONDS - T0)) s:"
for f in "$TMP"/conf.*; do
  say "   ${f##*/conf.}: $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
done

# 3. The diagnostics (the GPU to itself from here on). A first short run of the kernel as it is
# (its x arrivals are new: an error there ends the process, and with it every later variant); if
# that fails, every variant of the long run gets the first version's x protocol (oldx) added.
smoke=$(NIBBLE_CUDA_WGMMA_ABLATE=full timeout 60 "$BK" --wgmma-diag --shapes 4096x4096 --m 16,4096 2>&1)
if [ $? -eq 0 ] && ! grep -q WRONG <<< "$smoke"; then
  say "-- smoke run of the kernel as it is: ok"
else
  say "-- smoke run of the kernel as it is FAILED; every variant below runs with oldx added:"
  tail -4 <<< "$smoke" | tee -a "$S"
  list=$("$BK" --wgmma-variants | sed -n 's/^variants: //p')
  export NIBBLE_CUDA_WGMMA_ABLATE=$(tr ',' '\n' <<< "$list" | sed 's/$/+oldx/' | paste -sd, -)
fi
if [ "$(left)" -gt 30 ]; then
  timeout $(( $(left) - 10 )) "$BK" --wgmma-diag --shapes 4096x4096,8192x8192,8192x57344 --m 16,64,256,4096 \
    --out "$OUT/diag.txt" > "$TMP/diag.stdout" 2>&1
  rc=$?
  say "-- bench_kernels --wgmma-diag: exit $rc after $((SECONDS - T0)) s (diag.txt);" \
    "$(grep -c 'check ok' "$OUT/diag.txt" 2>/dev/null) checks ok, $(grep -c WRONG "$OUT/diag.txt" 2>/dev/null) WRONG," \
    "$(grep -c 'not run' "$OUT/diag.txt" 2>/dev/null) not run"
  [ "$rc" -eq 0 ] || tail -5 "$TMP/diag.stdout" | tee -a "$S"
  awk '/^== wgmma diagnostics, us/ {p=1} p' "$OUT/diag.txt" | tee -a "$S"
else
  say "-- diagnostics skipped: $(left) s left"
fi
say "== done in $((SECONDS - T0)) s"
