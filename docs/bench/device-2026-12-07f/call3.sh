#!/bin/bash
# Device call 3 of 2026-12-07 (seventh session): call2.sh (clusters: what makes them slow), then
# the peers tables through the automatic choice (clusters off, the default), fp16 and bf16,
# M = 1-4096, the 8 shapes, with the dense cuBLAS baseline of the same run; peers.py compares fp16
# with PERF.md's H200 Marlin and cuBLAS figures (void on an H100: read the dense column there).
# Bundle: docs/bench/device-2026-12-07f/bundle.sh. Run: bash .gpu/call3.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
T0=$SECONDS
S=$OUT/summary.log
bash "$here/call2.sh"
say() { echo "$*" | tee -a "$S"; }
P=$here/build/plugins/cuda_w4a16
NIBBLE=$here/build/tools/nibble/nibble
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for dt in f16 bf16; do
  left=$((580 - (SECONDS - T0)))
  [ "$dt" = f16 ] && left=$((left / 2 + 20))
  if [ "$left" -lt 60 ]; then say "== bench $dt skipped: $left s left"; continue; fi
  say "== bench $dt through the automatic choice ($((SECONDS - T0)) s)"
  NIBBLE_PLUGIN_PATH=$P timeout "$left" "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b \
    --m 1,4,8,16,32,64,128,256,1024,4096 --dtype $dt --budget 0.04 --json "$OUT/bench_$dt.json" > "$OUT/bench_$dt.txt" 2>&1
  say "   exit $? after $((SECONDS - T0)) s"
  /usr/bin/env python3 "$here/peers.py" "$OUT/bench_$dt.json" 2>&1 | tee -a "$S"
done
say "== call3 done in $((SECONDS - T0)) s"
