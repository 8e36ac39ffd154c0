#!/bin/bash
# Device call 3 of 2026-12-03 (issues 17 and 20): the GEMV's K split at M = 1 for 8 and 4 bits.
# 8-bit layers run as two nibble planes through the 4-bit GEMV (v1); on the 70B shapes they read
# at 62-84% of the roofline (2026-12-02), the smaller two at 62%. This times `nibble bench` on the
# 70B shapes at M = 1 with the plan's K split (min_stages 0) and with 1, 2, 4, 8, 16, 32 batches
# per warp forced (NIBBLE_CUDA_MIN_STAGES), to tell the split's choice from the kernel's rate.
# Run from .gpu (gpu_check.sh bundle + this script), OUT set. Writes split.txt, summary.log.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble
S=$OUT/summary.log; T0=$SECONDS
say() { echo "$*" | tee -a "$S"; }
say "== session3 $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$S"
for bits in 8 4; do
  for ms in 0 1 2 4 8 16 32; do
    [ $((SECONDS - T0)) -lt 480 ] || { say "-- bits $bits min_stages $ms skipped (time)"; continue; }
    echo "== bits $bits min_stages $ms" >> "$OUT/split.txt"
    NIBBLE_CUDA_MIN_STAGES=$ms NIBBLE_PLUGIN_PATH=$P timeout 120 "$NIBBLE" bench --backend cuda_w4a16 \
      --shapes llama3-70b,4096x4096 --m 1 --bits $bits --no-dense --budget 0.2 >> "$OUT/split.txt" 2>&1
    say "-- bits $bits min_stages $ms: exit $? after $((SECONDS - T0)) s"
    grep -E "^[0-9]+x[0-9]+ +1 " "$OUT/split.txt" | tail -5 | sed "s/^/   b$bits ms$ms /" | tee -a "$S"
  done
done
say "== done in $((SECONDS - T0)) s"
