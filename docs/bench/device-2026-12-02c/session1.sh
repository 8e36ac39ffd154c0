#!/bin/bash
# The first device call of the 2026-12-02 (third) session, Xeon host; .gpu/xeon from
# `bench/ab_bundle.sh - build .gpu/xeon` of 519ba54 plus its test_conformance and test_amx_emulated.
#   1. the plan the build makes here (default: the rows order on Intel with AMX; NIBBLE_CPU_ISA=amx)
#   2. tests: amx_emulated (VBMI byte picks, 2-bit codes), conformance with the default plan and
#      with fused-avx512, gemm-amx-rows, gemm-amx forced, 4 threads each, in parallel
#   3. bench/ab.sh: the new default against NIBBLE_CPU_ISA=amx (the old default plan), 16 and 2 threads
#   4. M = 1 at 2, 3, 4, 8 bits, 16 threads, the default plan
set -u
O=${OUT:?}
S=$O/summary.txt
T0=$SECONDS
B=$PWD/.gpu/xeon
for z in "$B"/lib/*.xz; do [ -e "$z" ] && xz -d -k -f "$z"; done
say() { echo "$*" | tee -a "$S"; }
export LD_LIBRARY_PATH=$B/new/core:$B/lib
P=$B/new/plugins/cpu_w4a16
say "== session1 $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo) vbmi=$(grep -c -m1 avx512vbmi /proc/cpuinfo)"
for isa in "" amx; do
  say "plan ${isa:-default}: $(NIBBLE_CPU_ISA=$isa NIBBLE_PLUGIN_PATH=$P $B/new/tools/nibble/nibble plugins 2>&1 | grep -m1 -o 'bf16 activations: [^;]*')"
done
NIBBLE_PLUGIN_PATH=$P $B/new/tools/nibble/nibble plugins > "$O/plugins.txt" 2>&1
# 2. tests
(timeout 200 $P/test_amx_emulated > "$O/amx_emulated.txt" 2>&1; echo "exit=$?" >> "$O/amx_emulated.txt") &
for v in default: fused_avx512:avx512 gemm_amx_rows:avx512-amx gemm_amx:amx; do
  name=${v%%:*} isa=${v#*:}
  (env NIBBLE_NUM_THREADS=4 NIBBLE_TEST_BACKEND=cpu_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P \
     $( [ -n "$isa" ] && echo NIBBLE_CPU_PATH=fused NIBBLE_CPU_ISA=$isa NIBBLE_TEST_REQUIRE_KERNEL=$name ) \
     $( [ "$name" = gemm_amx_rows ] || [ "$name" = gemm_amx ] && echo NIBBLE_CPU_GEMM_MIN_M=1 ) \
     timeout 200 $B/new/tests/test_conformance > "$O/conf_$name.txt" 2>&1; echo "exit=$?" >> "$O/conf_$name.txt") &
done
wait
say "amx_emulated: $(grep -m1 'amx emulated' "$O/amx_emulated.txt") $(grep -m1 'test cases' "$O/amx_emulated.txt") $(tail -1 "$O/amx_emulated.txt")"
for f in "$O"/conf_*.txt; do
  say "conformance ${f##*/conf_}: $(grep -m1 'cases checked' "$f") $(grep -m1 SKIP "$f") $(tail -1 "$f")"
  grep -m3 "out of tolerance" "$f" | tee -a "$S"
done
say "-- tests done at $((SECONDS - T0)) s"
# 3. the plans A/B
OUT=$O/ab AB_ROUNDS=2 AB_BUDGET_S=230 AB_M=1,8,32,256 AB_SHAPES=4096x4096,14336x4096,8192x57344 \
  AB_SIDES="default:new amx:new+NIBBLE_CPU_ISA=amx" bash bench/ab.sh .gpu/xeon > "$O/xeon_ab.txt" 2>&1
say "-- ab done at $((SECONDS - T0)) s"
# 4. widths at M = 1
for bits in 4 2 3 8; do
  left=$((560 - (SECONDS - T0)))
  [ "$left" -gt 20 ] || { say "bits $bits not run: out of time"; continue; }
  NIBBLE_PLUGIN_PATH=$P timeout $((left < 60 ? left : 60)) $B/new/tools/nibble/nibble bench --backend cpu_w4a16 \
    --shapes 4096x4096,14336x4096,8192x57344,28672x8192 --m 1 --bits $bits --threads 16 --no-dense --budget 0.2 \
    --rotate-mb 640 >> "$O/bits.txt" 2>&1
  say "bits $bits exit $? at $((SECONDS - T0)) s"
done
grep -E "^[0-9]+x[0-9]+ " "$O/bits.txt" | tee -a "$S"
tar czf "$O/raw.tar.gz" -C "$O" ab && rm -rf "$O/ab"
