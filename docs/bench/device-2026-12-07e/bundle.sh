#!/bin/bash
# Makes .gpu for call1.sh, from the repository root, after `ninja -C build` (the whole tree,
# CUDA plugin included). Builds the two reference builds it compares with where they are missing:
#   /work/build-old      the CPU plugin of 6761b59 (before the 8-bit byte forms)
#   /work/build-oldcuda  the CUDA plugin of 1fbde70^ (the GEMV reading x through __ldg)
# About 2 + 5 minutes on 2 cores the first time. The result stays under the 64 MiB a call carries.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ref() {  # ref COMMIT DIR MESON_ARGS TARGETS...
  local commit=$1 dir=$2 args=$3
  shift 3
  [[ -x $dir/tools/nibble/nibble ]] && return 0
  rm -rf "/tmp/src-$commit"
  git worktree add -f "/tmp/src-$commit" "$commit" >/dev/null
  (cd "/tmp/src-$commit" && meson setup "$dir" $args -Drocm=disabled -Dtests=false -Dpython=disabled \
     -Dbuildtype=release >/dev/null && ninja -C "$dir" "$@" >/dev/null)
}
ref 6761b59 /work/build-old "-Dcuda=disabled" tools/nibble/nibble plugins/cpu_w4a16/cpu_w4a16.so
ref 1fbde70^ /work/build-oldcuda "-Dcpu_plugin=disabled" tools/nibble/nibble plugins/cuda_w4a16/cuda_w4a16.so
rm -rf .gpu
plugins/cuda_w4a16/gpu_check.sh bundle
rm -rf .gpu/tests/data  # the carried tree has tests/data; call1.sh needs no fixtures
xz -T2 -6 .gpu/build/plugins/cuda_w4a16/cuda_w4a16.so .gpu/build/plugins/cuda_w4a16/bench_kernels
cp docs/bench/device-2026-12-07e/call1.sh docs/bench/h200-2026-12-02/peers.py .gpu/
bench/ab_bundle.sh /work/build-old build .gpu/ab
AB_PLUGIN=cuda_w4a16 bench/ab_bundle.sh /work/build-oldcuda build .gpu/abgpu
xz -T2 -6 .gpu/abgpu/old/plugins/cuda_w4a16/cuda_w4a16.so .gpu/abgpu/new/plugins/cuda_w4a16/cuda_w4a16.so
du -sh .gpu
size=$(du -sm .gpu | cut -f1)
[ "$size" -le 42 ] || { echo ".gpu is $size MiB: with the tracked tree over the 64 MiB a call may carry" >&2; exit 1; }
