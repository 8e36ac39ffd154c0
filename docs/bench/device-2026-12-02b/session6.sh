#!/bin/bash
# The sixth device call of the 2026-12-02 (second) session: Nsight Compute profiles of the kernels
# that lose to the peers at M = 32-128 (issue 20), on the fixed build (.gpu/build, 7d4ca98), for the
# next round's work: what bounds each (throughput of memory / SM, stall reasons, occupancy).
set -u
O=${OUT:?}
export LD_LIBRARY_PATH=$PWD/.gpu/build/core:$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
P=$PWD/.gpu/build/plugins/cuda_w4a16
: > "$O/ncu.txt"
prof() {  # label kernel shape m
  echo "===== $1" >> "$O/ncu.txt"
  NIBBLE_PLUGIN_PATH=$P NIBBLE_CUDA_KERNEL=$2 timeout 100 "$NCU" --kernel-name regex:w4a16 --launch-skip 20 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis "$PWD/.gpu/build/tools/nibble/nibble" bench \
    --backend cuda_w4a16 --shapes "$3" --m "$4" --no-dense --iters 40 --rotate-mb 256 >> "$O/ncu.txt" 2>&1
  echo "exit $?" >> "$O/ncu.txt"
}
prof "v4 8192x57344 M=32" v4 8192x57344 32
prof "v2u2 8192x8192 M=16" v2u2 8192x8192 16
prof "s4 4096x6144 M=64" s4 4096x6144 64
prof "wg64 8192x57344 M=64" wg64 8192x57344 64
prof "wg128 28672x8192 M=128" wg128 28672x8192 128
prof "wg64 8192x8192 M=64" wg64 8192x8192 64
