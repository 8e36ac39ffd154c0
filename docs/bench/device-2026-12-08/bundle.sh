#!/bin/bash
# bundle.sh: makes .gpu for call1.sh after `ninja -C build`: gpu_check.sh's bundle (the CUDA plugin,
# nibble, the conformance tests) plus the CPU plugin and oneDNN for the host's part (under .gpu/cpu,
# compressed), the call script and peers.py. Stays under the 64 MiB a call carries.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rm -rf .gpu
plugins/cuda_w4a16/gpu_check.sh bundle
rm -rf .gpu/tests/data  # the carried tree has tests/data
mkdir -p .gpu/cpu/plugin .gpu/cpu/lib
cp build/plugins/cpu_w4a16/cpu_w4a16.so .gpu/cpu/plugin/
for l in libdnnl.so.2 libgomp.so.1 libOpenCL.so.1; do
  cp -L "$(ldd build/plugins/cpu_w4a16/cpu_w4a16.so | awk -v l=$l '$1 == l {print $3}')" .gpu/cpu/lib/$l
done
xz -T2 -6 .gpu/build/plugins/cuda_w4a16/cuda_w4a16.so .gpu/build/plugins/cuda_w4a16/bench_kernels \
  .gpu/cpu/plugin/cpu_w4a16.so .gpu/cpu/lib/libdnnl.so.2
cp docs/bench/device-2026-12-08/call*.sh docs/bench/h200-2026-12-02/peers.py .gpu/
du -sh .gpu
size=$(du -sm .gpu | cut -f1)
[ "$size" -le 42 ] || { echo ".gpu is $size MiB: with the tracked tree over the 64 MiB a call may carry" >&2; exit 1; }
