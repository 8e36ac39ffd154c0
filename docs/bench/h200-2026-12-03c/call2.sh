#!/bin/bash
# Device call 2 of 2026-12-03c: where the GEMV's time goes. Nsight Compute (if the machine has it
# and lets us read the counters) on v1 and vb4 for 8192x8192 8 bits M = 1 and 8192x57344 8 bits
# M = 1 (`nibble bench` as the host, one profiled launch each after warm-up): speed of light,
# memory workload, warp states, occupancy. Bundle as call1.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log
say() { echo "$*" | tee -a "$S"; }
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
say "== call2 $(date -u +%FT%TZ) ncu=${NCU:-none}"
[ -n "$NCU" ] || { ls /usr/local/ /opt 2>&1 | tee -a "$S"; exit 0; }
"$NCU" --version 2>&1 | tee -a "$S"
for shape in 8192x8192 8192x57344; do
  for k in v1 vb4; do
    say "-- $shape $k ($((SECONDS - T0)) s)"
    NIBBLE_CUDA_KERNEL=$k NIBBLE_PLUGIN_PATH=$P timeout 150 "$NCU" --target-processes all \
      --kernel-name regex:gemv --launch-skip 20 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      --section LaunchStats --section SchedulerStats --section SourceCounters \
      "$NIBBLE" bench --backend cuda_w4a16 --shapes $shape --m 1 --bits 8 --no-dense --budget 0.05 \
      > "$OUT/ncu_${shape}_$k.txt" 2>&1
    say "   exit $? $(grep -m3 -E 'ERR_NVGPUCTRPERM|DRAM Throughput|Duration' "$OUT/ncu_${shape}_$k.txt" | tr -s ' ' | tr '\n' ';')"
  done
done
say "== done in $((SECONDS - T0)) s"
