#!/bin/bash
# The fourth device call of the 2026-12-02 (second) session, Xeon host only (session3.sh's second
# part, which found libdnnl still compressed): the one-tile form at M = 1 with the weights kept in
# cache (--rotate-mb 1: 8 and 29 MB layers in a 300 MB L3) against streamed from memory, the bf16
# and the f32-order kernels, 16 down to 1 threads: is M = 1 bound by the kernel's arithmetic here?
set -u
O=${OUT:?}
B=$PWD/.gpu/xeon
for z in "$B"/lib/*.xz; do [ -e "$z" ] && xz -d -k -f "$z"; done
: > "$O/xeon_cache.txt"
for isa in avx512bf16 avx512; do
  for rot in 1 640; do
    echo "===== NIBBLE_CPU_ISA=$isa rotate-mb $rot" >> "$O/xeon_cache.txt"
    NIBBLE_CPU_ISA=$isa LD_LIBRARY_PATH="$B/new/core:$B/lib" NIBBLE_PLUGIN_PATH="$B/new/plugins/cpu_w4a16" timeout 100 \
      "$B/new/tools/nibble/nibble" bench --backend cpu_w4a16 --shapes 4096x4096,14336x4096 --m 1 --threads 16,8,4,2,1 \
      --rotate-mb $rot --budget 0.15 --no-dense >> "$O/xeon_cache.txt" 2>&1
    echo "exit $?" >> "$O/xeon_cache.txt"
  done
done
