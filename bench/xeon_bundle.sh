#!/bin/bash
# bench/xeon_bundle.sh [BUILD_DIR] [DEST]: packs a CPU build for bench/xeon_run.sh on the GPU
# machine's Xeon host (docs/cuda.md, "The device run"): scripts/gpu-bundle of BUILD_DIR (default build,
# configured with the CPU plugin) into DEST (default .gpu, ignored by git), without what the run does
# not use, and libdnnl compressed with xz (xeon_run.sh unpacks it there), so that the working tree
# and the bundle stay well under the device tool's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dest=${2:-.gpu}
[[ -f "$build/plugins/cpu_w4a16/cpu_w4a16.so" ]] || { echo "no CPU plugin in $build: build it first" >&2; exit 1; }
bundler=scripts/gpu-bundle
"$bundler" "$build" "$dest"
# The GPU plugins' runtimes and the fuzzers are not part of a CPU run.
rm -f "$dest"/lib/libamdhip64* "$dest"/lib/libhsa* "$dest"/lib/libcudart*
rm -rf "$dest/$build/tests/fuzz" "$dest/$build/plugins/cuda_w4a16" "$dest/$build/plugins/rocm_w4a16"
bench/bundle_pack.sh "$dest"
