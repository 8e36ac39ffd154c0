#!/bin/bash
# Device call 4 of 2026-12-03 (issue 20): where the wgmma kernel's time goes at M = 64-1024 with the
# production paths (x image, weights by cp.async): each part left out in turn, on the four 70B
# shapes and 4096x28672. Run from .gpu (wgmma_diag.sh bundle + this script), OUT set.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; BK=$P/bench_kernels
S=$OUT/summary.log; T0=$SECONDS
say() { echo "$*" | tee -a "$S"; }
say "== session4 $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$S"
B=ximg+lsu
NIBBLE_CUDA_WGMMA_ABLATE=$B,$B+noepi,$B+nodeq,$B+nomma,$B+nodeq+nomma,$B+onewg,$B+nosk,$B+st4,$B+ring,ximg+xring,nowait,nowait+nodeq,nowait+nomma,nowait+noepi,$B+noepi+nodeq \
  timeout 400 "$BK" --wgmma-diag --shapes 8192x8192,8192x10240,28672x8192,8192x57344,4096x28672 --m 64,128,256,1024 \
  --out "$OUT/diag.txt" > "$OUT/diag.stdout" 2>&1
say "-- diag: exit $? after $((SECONDS - T0)) s; $(grep -c 'check ok' "$OUT/diag.txt") ok, $(grep -c WRONG "$OUT/diag.txt") WRONG"
awk '/^== wgmma diagnostics, us/ {p=1} p' "$OUT/diag.txt" >> "$S"
say "== done in $((SECONDS - T0)) s"
