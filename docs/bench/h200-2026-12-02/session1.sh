#!/bin/bash
# One device call: Python package check (issue 18), CUDA bench at 8 and 4 bits (issue 17), wgmma diagnostics (issue 20).
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B=$OUT/bits.txt
echo "== python gpu_check $(date -u +%T)" > $B
timeout 150 bash python/tests/gpu_check.sh build >> $B 2>&1; echo "python gpu_check rc=$?" >> $B
export NIBBLE_PLUGIN_PATH=$here/build/plugins/cuda_w4a16
for bits in 8 4; do
  echo "== bench --bits $bits $(date -u +%T)" >> $B
  timeout 90 build/tools/nibble/nibble bench --backend cuda_w4a16 --shapes llama3-70b,4096x4096 --m 1,16,64 --bits $bits --budget 0.3 >> $B 2>&1; echo "rc=$?" >> $B
done
unset NIBBLE_PLUGIN_PATH
echo "== wgmma_diag $(date -u +%T)" >> $B
timeout 330 bash ./wgmma_diag.sh run >> $B 2>&1; echo "wgmma_diag rc=$?" >> $B
echo "== end $(date -u +%T)" >> $B
