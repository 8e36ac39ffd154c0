#!/bin/bash
# Device call 3 of 2026-12-03b (issue 17, the 8-bit M = 1 target): what a plain read of each
# layer's weight bytes takes (`bench_kernels --read`: 4 and 8 bits, 1-8 blocks per SM, 128-512
# threads, 4 or 8 loads in flight per lane), beside the GEMV's own M = 1 time from the same timer
# (`bench_kernels --m 1`, the plugin's path). Bundle as for call1.sh; writes read.txt, summary.log.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; BK=$P/bench_kernels; NIBBLE=$here/build/tools/nibble/nibble
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log
say() { echo "$*" | tee -a "$S"; }
say "== call3 $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$S"
timeout 200 "$BK" --read --out "$OUT/read.txt" > /dev/null 2>&1
say "-- bench_kernels --read: exit $? after $((SECONDS - T0)) s"
cat "$OUT/read.txt" >> "$S"
timeout 200 "$BK" --m 1 --out "$OUT/gemv_m1.txt" > /dev/null 2>&1
say "-- bench_kernels --m 1: exit $? after $((SECONDS - T0)) s"
for b in 8 4; do
  NIBBLE_PLUGIN_PATH=$P timeout 100 "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 1 \
    --bits $b --no-dense --budget 0.2 >> "$OUT/nibble_m1.txt" 2>&1
  say "-- nibble bench --bits $b --m 1: exit $? after $((SECONDS - T0)) s"
done
grep -E "^[0-9]+x[0-9]+ " "$OUT/nibble_m1.txt" | tee -a "$S"
say "== done in $((SECONDS - T0)) s"
