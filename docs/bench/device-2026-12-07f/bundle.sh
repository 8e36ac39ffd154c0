#!/bin/bash
# bundle.sh: makes .gpu for call1.sh after `ninja -C build` (the whole tree, CUDA plugin included).
# Builds the reference the GEMV A/B compares with where it is missing:
#   /work/build-oldcuda  the CUDA plugin of 1fbde70^ (the GEMV reading x through __ldg)
# About 5 minutes on 2 cores the first time. The result stays under the 64 MiB a call carries.
set -euo pipefail
cd "$(dirname "$0")/../../.."
if [[ ! -x /work/build-oldcuda/tools/nibble/nibble ]]; then
  rm -rf /tmp/src-oldcuda
  git worktree add -f /tmp/src-oldcuda 1fbde70^ >/dev/null
  (cd /tmp/src-oldcuda && meson setup /work/build-oldcuda -Dcpu_plugin=disabled -Drocm=disabled -Dtests=false \
     -Dpython=disabled -Dbuildtype=release >/dev/null &&
   ninja -C /work/build-oldcuda tools/nibble/nibble plugins/cuda_w4a16/cuda_w4a16.so >/dev/null)
fi
rm -rf .gpu
plugins/cuda_w4a16/gpu_check.sh bundle
rm -rf .gpu/tests/data  # the carried tree has tests/data
xz -T2 -6 .gpu/build/plugins/cuda_w4a16/cuda_w4a16.so .gpu/build/plugins/cuda_w4a16/bench_kernels
AB_PLUGIN=cuda_w4a16 bench/ab_bundle.sh /work/build-oldcuda build .gpu/abgpu
cp docs/bench/device-2026-12-07f/call*.sh docs/bench/h200-2026-12-02/peers.py .gpu/
du -sh .gpu
size=$(du -sm .gpu | cut -f1)
[ "$size" -le 42 ] || { echo ".gpu is $size MiB: with the tracked tree over the 64 MiB a call may carry" >&2; exit 1; }
