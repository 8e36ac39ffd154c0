#!/bin/bash
# Device call 1 of 2026-12-06: gpu_check.sh on the tree at 1f14c94 (the bounded v2u2 build and the
# rules of 5c4329a have not been through the conformance suite on a GPU yet), on whichever card
# the call gets (H100 or H200: the card is printed first; every ratio is to cuBLAS in the same run).
# Bundle: plugins/cuda_w4a16/gpu_check.sh bundle; xz the plugin and bench_kernels; copy this script
# into .gpu. Run: bash .gpu/call1.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
P=$here/build/plugins/cuda_w4a16
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
{ nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)|L3"; } > "$OUT/machine.txt" 2>&1
bash "$here/gpu_check.sh" run
