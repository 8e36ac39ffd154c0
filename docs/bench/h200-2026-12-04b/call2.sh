#!/bin/bash
# Device call 2 of 2026-12-04b: the M = 9-16 rule by activation dtype. Call 1 (gpu_check.sh through
# the automatic choice) gave bf16 v2u2 at 4 bits 1.06-1.50x the fp16 time at M = 16 (4096x28672
# 47.2 vs 31.5 µs). Forced here: v1, v2u2 and wg16 (4 bits only), fp16 and bf16, 4 and 8 bits,
# `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 9,12,16 --no-dense
# --budget 0.15`, 2 rounds alternating.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NIBBLE=$here/build/tools/nibble/nibble
P=$here/build/plugins/cuda_w4a16
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call2 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
for round in 1 2; do
  for cfg in v1:4 v2u2:4 wg16:4 v1:8 v2u2:8; do
    k=${cfg%%:*}; bits=${cfg#*:}
    for dt in f16 bf16; do
      [ $((SECONDS - T0)) -lt 420 ] || { say "-- r$round $cfg $dt skipped (time)"; continue; }
      NIBBLE_CUDA_KERNEL=$k NIBBLE_PLUGIN_PATH=$P timeout 60 "$NIBBLE" bench --backend cuda_w4a16 \
        --shapes llama3-8b,llama3-70b --m 9,12,16 --bits $bits --dtype $dt --no-dense --budget 0.15 > "$TMP/b.txt" 2>&1
      say "-- r$round $cfg $dt: exit $? after $((SECONDS - T0)) s"
      { echo "== round $round $cfg $dt"; cat "$TMP/b.txt"; } >> "$OUT/bench.txt"
      grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r$round b$bits $dt:$k /" >> "$S"
    done
  done
done
say "== done in $((SECONDS - T0)) s"
