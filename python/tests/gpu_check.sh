#!/bin/bash
# Runs gpu_check.py against a build tree: the package from BUILD/python, the plugins from BUILD's
# plugin directories, the CLI from BUILD. From a bundle made by scripts/gpu-bundle
# (see docs/python.md), on the GPU machine:
#   .gpu/run bash python/tests/gpu_check.sh build-cuda
# Prints SKIP and exits 77 without a CUDA device. NIBBLE_PYTHON picks the interpreter (default:
# python3, the GPU machine's with PyTorch; on Debian /usr/bin/python3). Results go to $OUT if set,
# else BUILD/gpu_check.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:?usage: gpu_check.sh BUILD_DIR [gpu_check.py options]}
[[ $dir = /* ]] || dir="$root/$dir"
build=$(cd "$dir" 2>/dev/null && pwd) || { echo "gpu_check.sh: no build directory $dir" >&2; exit 1; }
shift
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
plugins=()
for p in cuda_w4a16 cpu_w4a16; do [[ -d "$build/plugins/$p" ]] && plugins+=("$build/plugins/$p"); done
export NIBBLE_PLUGIN_PATH=$(IFS=:; echo "${plugins[*]}")
export NIBBLE_CLI="$build/tools/nibble/nibble"
unset NIBBLE_BACKEND NIBBLE_CONFIG
exec "${NIBBLE_PYTHON:-python3}" "$root/python/tests/gpu_check.py" --out "${OUT:-$build/gpu_check}" "$@"
