#!/bin/bash
# gpu_check.sh: the tensor-parallel example on the GPU machine in one device call (< 120 s).
#
#   here (after `ninja -C build examples/tensor_parallel/tensor_parallel tools/nibble/nibble
#   plugins/cuda_w4a16/cuda_w4a16.so`):
#     examples/tensor_parallel/gpu_check.sh bundle    # -> .gpu (or add to plugins/cuda_w4a16's bundle, below)
#   there (with .gpu carried; everything is written under $OUT):
#     bash .gpu/tp_check.sh run [W]                   # W ranks (default: 1; 2 or 4 on a multi-GPU kind)
#
# Steps: NCCL found (where, which version); the example at W on every fixture of tests/data; a
# 70B-shaped block (`nibble quantize --preset llama3-70b --blocks 1`: q/k/v/o/gate/up/down of one
# Llama-3-70B block, random weights, GPTQ G128) at W, M = 1 and 16.
# Files under $OUT: tp_summary.log (read first), tp_fixtures.log, tp_70b.log.
#
# Into plugins/cuda_w4a16/gpu_check.sh's bundle (one carried .gpu for both scripts): that bundle
# keeps build/examples/ (it deletes only other tests and plugins), so after
#   plugins/cuda_w4a16/gpu_check.sh bundle
# run `examples/tensor_parallel/gpu_check.sh add` to copy this script in as .gpu/tp_check.sh.
set -u

mode=${1:-}
root=$(cd "$(dirname "$0")/../.." 2>/dev/null && pwd)

if [ "$mode" = bundle ] || [ "$mode" = add ]; then
  set -e
  cd "$root"
  for f in build/examples/tensor_parallel/tensor_parallel build/tools/nibble/nibble build/plugins/cuda_w4a16/cuda_w4a16.so; do
    [ -x "$f" ] || [ -f "$f" ] || { echo "$f is not built" >&2; exit 1; }
  done
  if [ "$mode" = bundle ]; then
    scripts/gpu-bundle build .gpu tests/data
    # Only the example, the CLI (to quantize the 70B block), libnibble and the CUDA plugin are used.
    find .gpu/build -type f ! -path '*/examples/tensor_parallel/tensor_parallel' ! -path '*/tools/nibble/nibble' \
      ! -path '*/plugins/cuda_w4a16/cuda_w4a16.so' ! -name 'libnibble.so*' -delete
    rm -f .gpu/lib/libdnnl* .gpu/lib/libamdhip64* .gpu/lib/libhsa* .gpu/lib/libOpenCL* .gpu/lib/libdrm* \
      .gpu/lib/libnuma* .gpu/lib/libelf* .gpu/lib/libgomp*
  fi
  [ -x .gpu/build/examples/tensor_parallel/tensor_parallel ] || { echo ".gpu lacks the example" >&2; exit 1; }
  cp "$0" .gpu/tp_check.sh
  chmod +x .gpu/tp_check.sh
  du -sh .gpu
  size=$(du -sm .gpu | cut -f1)
  [ "$size" -le 63 ] || { echo "bundle is $size MiB: over the 64 MiB a call may carry" >&2; exit 1; }
  exit 0
fi

if [ "$mode" != run ]; then
  echo "usage: $0 bundle | add | run [W]" >&2
  exit 2
fi

# ---- on the GPU machine ----
W=${2:-1}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
: "${OUT:?OUT must name the folder whose files come back}"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TP=$here/build/examples/tensor_parallel/tensor_parallel
NIBBLE=$here/build/tools/nibble/nibble
P=$here/build/plugins/cuda_w4a16
S=$OUT/tp_summary.log
T0=$SECONDS
say() { echo "$*" | tee -a "$S"; }
left() { echo $((110 - (SECONDS - T0))); }  # seconds left of the 120 s plan

say "== tp_check.sh run W=$W, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | tee -a "$S"
# NCCL: the example looks itself; PyTorch's copy is named first where the python3 here has one.
if [ -z "${NIBBLE_NCCL_LIBRARY:-}" ]; then
  torch_nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  [ -n "$torch_nccl" ] && [ -f "$torch_nccl" ] && export NIBBLE_NCCL_LIBRARY=$torch_nccl
fi
say "-- NCCL: $("$TP" --find-nccl 2>&1 | tr '\n' ' ')"

# 1. Every fixture (what cuda_w4a16 declines, e.g. 2/3/8-bit layers, is listed as NOT RUN).
: > "$OUT/tp_fixtures.log"
pass=0 fail=0 fixtures_failed=""
for f in tests/data/fixtures/*/; do
  n=$(basename "$f")
  echo "== $n" >> "$OUT/tp_fixtures.log"
  timeout 60 "$TP" --model "$f" --world "$W" --m 5 --iters 20 --plugin-dir "$P" >> "$OUT/tp_fixtures.log" 2>&1
  rc=$?
  echo "exit=$rc" >> "$OUT/tp_fixtures.log"
  [ $rc -eq 0 ] || fixtures_failed="$fixtures_failed $n(exit $rc)"
done
pass=$(grep -c '^PASS' "$OUT/tp_fixtures.log")
fail=$(grep -c '^FAIL' "$OUT/tp_fixtures.log")
notrun=$(grep -c '^NOT RUN' "$OUT/tp_fixtures.log")
say "-- fixtures at W=$W: $pass layer splits PASS, $fail FAIL, $notrun NOT RUN (tp_fixtures.log) after $((SECONDS - T0)) s"
[ -z "$fixtures_failed" ] || say "   runs that did not exit 0:$fixtures_failed"
grep '^FAIL' "$OUT/tp_fixtures.log" | head -10 | tee -a "$S"

# 2. A 70B-shaped block, quantized here (random weights; ~30 s of one core).
TMP=$(mktemp -d)
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 40 )) "$NIBBLE" quantize --preset llama3-70b --blocks 1 --out "$TMP/llama3-70b" > "$OUT/tp_70b.log" 2>&1
  say "-- quantize llama3-70b, 1 block: exit $? after $((SECONDS - T0)) s"
  for m in 1 16; do
    if [ "$(left)" -lt 10 ]; then say "-- 70B M=$m skipped: $(left) s left"; continue; fi
    echo "== llama3-70b block, W=$W, M=$m" >> "$OUT/tp_70b.log"
    timeout "$(left)" "$TP" --model "$TMP/llama3-70b" --world "$W" --m $m --iters 50 --plugin-dir "$P" >> "$OUT/tp_70b.log" 2>&1
    say "-- 70B block M=$m: exit $? after $((SECONDS - T0)) s"
  done
  grep -E '^(PASS|FAIL|NOT RUN|TIME)' "$OUT/tp_70b.log" | sed 's/^/   /' | tee -a "$S"
else
  say "-- 70B block skipped: $(left) s left"
fi
rm -rf "$TMP"
say "== done in $((SECONDS - T0)) s"
