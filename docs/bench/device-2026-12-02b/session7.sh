#!/bin/bash
# The seventh device call of the 2026-12-02 (second) session, Xeon host: the AMX form on the f32
# order (gemm-amx-rows, opt-in: NIBBLE_CPU_ISA=avx512-amx) against the default plan. .gpu/xeon/new
# is this tree's build (with test_conformance), .gpu/xeon/old the build of 7d4ca98.
#   1. the plan each build makes here (nibble plugins)
#   2. conformance: gemm-amx-rows forced, at 16 threads
#   3. bench/ab.sh: the default plan against NIBBLE_CPU_ISA=avx512-amx, 16 and 2 threads
set -u
O=${OUT:?}
S=$O/summary.txt
B=$PWD/.gpu/xeon
for z in "$B"/lib/*.xz; do [ -e "$z" ] && xz -d -k -f "$z"; done
say() { echo "$*" | tee -a "$S"; }
for side in old new; do
  say "$side: $(LD_LIBRARY_PATH=$B/$side/core:$B/lib NIBBLE_PLUGIN_PATH=$B/$side/plugins/cpu_w4a16 $B/$side/tools/nibble/nibble plugins 2>&1 | grep -m1 -o 'bf16 activations: [^;]*')"
done
for v in gemm_amx_rows:avx512-amx; do
  name=${v%%:*} isa=${v#*:}
  env LD_LIBRARY_PATH=$B/new/core:$B/lib NIBBLE_TEST_BACKEND=cpu_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$B/new/plugins/cpu_w4a16 \
    $( [ -n "$isa" ] && echo NIBBLE_CPU_PATH=fused NIBBLE_CPU_ISA=$isa NIBBLE_CPU_GEMM_MIN_M=1 NIBBLE_TEST_REQUIRE_KERNEL=$name ) \
    timeout 45 $B/new/tests/test_conformance > "$O/conf_$name.txt" 2>&1
  say "conformance $name: exit $? $(grep -m1 'cases checked' "$O/conf_$name.txt") $(grep -m1 -E 'SKIP' "$O/conf_$name.txt")"
done
OUT=$O/ab AB_ROUNDS=2 AB_BUDGET_S=80 AB_M=1,8 AB_SHAPES=14336x4096,8192x57344 \
  AB_SIDES="default:new avx512-amx:new+NIBBLE_CPU_ISA=avx512-amx" bash bench/ab.sh .gpu/xeon > "$O/xeon_ab.txt" 2>&1
say "ab done"
tar czf "$O/raw.tar.gz" -C "$O" ab && rm -rf "$O/ab"
