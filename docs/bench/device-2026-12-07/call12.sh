#!/bin/bash
# Device call 12 (2026-12-07), on the GPU machine's Xeon host: where M = 1 at few threads loses
# (issue 15: M = 1 at 2 threads reads 40-75% of the bandwidth on Intel). The default plan
# (fused-avx512 at M = 1 on Intel), M = 1, 1, 2 and 16 threads, weights resident in cache
# (--rotate-mb 1: one copy; 1024x2048 is 1 MiB of codes, within a core's 2 MiB L2; 4096x4096 and
# 8192x8192 are 8 and 32 MiB, within the L3) against weights streamed from memory (--rotate-mb
# 1200), two rounds. If the cached rate per core is far above the streamed one, the streamed M = 1
# is bound by memory parallelism per core, not by the kernel's arithmetic.
# Bundle: bench/xeon_bundle.sh build .gpu; this script copied to .gpu/. Run: bash .gpu/call12.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
for z in "$here"/lib/*.xz; do [ -e "$z" ] && xz -d -k -f "$z"; done
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NIBBLE_PLUGIN_PATH=$here/build/plugins/cpu_w4a16
NIB=$here/build/tools/nibble/nibble; S=$OUT/summary.log; B=$OUT/bench.txt
{ grep -m1 'model name' /proc/cpuinfo; nproc; lscpu | grep -E 'cache|NUMA node'; } | tee "$S"
timeout 60 "$NIB" plugins 2>&1 | grep -m1 'probe:' | tee -a "$S"
T0=$SECONDS
for r in 1 2; do
  [ $r = 2 ] && [ $((SECONDS - T0)) -gt 100 ] && { echo "round 2 skipped: $((SECONDS - T0)) s" | tee -a "$S"; break; }
  for rot in 1 1200; do
    for sh in 1024x2048 4096x4096 8192x8192; do
      [ "$rot" = 1200 ] && [ "$sh" = 1024x2048 ] && continue
      echo "== round $r rotate $rot $sh" >> "$B"
      timeout 60 "$NIB" bench --backend cpu_w4a16 --shapes $sh --m 1 --threads 1,2,16 --rotate-mb $rot \
        --no-dense --budget 0.3 >> "$B" 2>&1
    done
  done
done
grep -E "^== |^ *[0-9]+x[0-9]+ |bandwidth|threads" "$B" | head -150 >> "$S"
