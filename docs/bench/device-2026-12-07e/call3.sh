#!/bin/bash
# Device calls 3 and 4 of 2026-12-07 (sixth session), run by hand on the warm H100 machine's host
# (Intel Xeon with AMX, 16 cores) with the call-2 bundle (.gpu/ab: bundle.sh 2), from the
# repository root: issue 15's table with the new build (4-bit, oneDNN bf16 dense in the same run),
# then issue 17's 2- and 3-bit M = 1 points. Outputs in call3/.
set -u
: "${OUT:?}"
xz -d -k -f .gpu/ab/lib/libdnnl.so.2.xz
export LD_LIBRARY_PATH=$PWD/.gpu/ab/new/core:$PWD/.gpu/ab/lib
N=.gpu/ab/new/tools/nibble/nibble
export NIBBLE_PLUGIN_PATH=$PWD/.gpu/ab/new/plugins/cpu_w4a16
timeout 280 $N bench --backend cpu_w4a16 --shapes 4096x4096,14336x4096,8192x28672,8192x57344 --m 1,8,64,256 \
  --threads 16,2 --budget 0.15 --json $OUT/xeon_issue15.json > $OUT/xeon_issue15.txt 2>&1
for b in 2 3; do
  timeout 100 $N bench --backend cpu_w4a16 --shapes 4096x4096,14336x4096,8192x28672,8192x57344 --m 1 --threads 2,16 \
    --bits $b --no-dense --budget 0.15 > $OUT/xeon_bits$b.txt 2>&1
done
