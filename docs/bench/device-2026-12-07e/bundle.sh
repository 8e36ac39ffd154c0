#!/bin/bash
# bundle.sh 1|2: makes .gpu for call1.sh (the GPU) or call2.sh (the host's CPU), after `ninja -C
# build` (the whole tree, CUDA plugin included). Builds the reference build the call compares
# with where it is missing:
#   /work/build-old      the CPU plugin of 6761b59 (before the 8-bit byte forms)
#   /work/build-oldcuda  the CUDA plugin of 1fbde70^ (the GEMV reading x through __ldg)
# About 5 (call 1) or 2 (call 2) minutes on 2 cores the first time. The result stays under the 64 MiB a call carries.
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
which=${1:?usage: bundle.sh 1|2 (the call it bundles for)}
rm -rf .gpu
if [[ $which == 1 ]]; then
  ref 1fbde70^ /work/build-oldcuda "-Dcpu_plugin=disabled" tools/nibble/nibble plugins/cuda_w4a16/cuda_w4a16.so
  plugins/cuda_w4a16/gpu_check.sh bundle
  rm -rf .gpu/tests/data .gpu/build/plugins/cuda_w4a16/bench_kernels  # the carried tree has tests/data
  xz -T2 -6 .gpu/build/plugins/cuda_w4a16/cuda_w4a16.so
  AB_PLUGIN=cuda_w4a16 bench/ab_bundle.sh /work/build-oldcuda build .gpu/abgpu
  cp docs/bench/device-2026-12-07e/call1.sh docs/bench/h200-2026-12-02/peers.py .gpu/
else
  ref 6761b59 /work/build-old "-Dcuda=disabled" tools/nibble/nibble plugins/cpu_w4a16/cpu_w4a16.so
  mkdir -p .gpu
  bench/ab_bundle.sh /work/build-old build .gpu/ab
  cp docs/bench/device-2026-12-07e/call2.sh .gpu/
fi
du -sh .gpu
size=$(du -sm .gpu | cut -f1)
[ "$size" -le 42 ] || { echo ".gpu is $size MiB: with the tracked tree over the 64 MiB a call may carry" >&2; exit 1; }
