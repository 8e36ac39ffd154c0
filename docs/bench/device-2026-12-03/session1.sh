#!/bin/bash
# The device call of the 2026-12-03 session, Xeon host. .gpu/xeon from `bench/ab_bundle.sh - build
# .gpu/xeon` (HEAD: gemm-amx the prior from M = 8, the dense baseline's bf16 check) plus the build's
# test_conformance and test_amx_emulated.
#   1. the plans (default, NIBBLE_CPU_ISA=amx)
#   2. tests: amx_emulated; conformance with the default plan and every bf16 / AMX / f32 form forced
#      (2 threads each, in parallel); every fixture through `nibble verify`
#   3. the issue's targets: nibble bench with the dense baseline, llama3-8b and llama3-70b, 16 and 2 threads
#   4. bench/ab.sh at 2 threads, M >= 64 (the points missed there): default vs NIBBLE_CPU_PATH=onednn
set -u
O=${OUT:?}
S=$O/summary.txt
T0=$SECONDS
B=$PWD/.gpu/xeon
for z in "$B"/lib/*.xz; do [ -e "$z" ] && xz -d -k -f "$z"; done
say() { echo "$*" | tee -a "$S"; }
P=$B/new/plugins/cpu_w4a16
say "== session 2026-12-03 $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo)"
export LD_LIBRARY_PATH=$B/new/core:$B/lib
for isa in "" amx; do
  say "plan ${isa:-default}: $(NIBBLE_CPU_ISA=$isa NIBBLE_PLUGIN_PATH=$P $B/new/tools/nibble/nibble plugins 2>&1 | grep -m1 -o 'bf16 activations: [^;]*;[^;]*')"
done
(timeout 200 $P/test_amx_emulated > "$O/t_amx_emulated.txt" 2>&1; echo "exit=$?" >> "$O/t_amx_emulated.txt") &
for v in default: fused_avx512bf16:avx512bf16:1000000 gemm_avx512bf16:avx512bf16:1 gemm_amx:amx:1 fused_avx512:avx512: mixed_avx512_amx:avx512-amx:8 onednn_avx2:: ; do
  IFS=: read -r name isa gmin <<<"$v"
  req=$name; [ "$name" = mixed_avx512_amx ] && req=fused_avx512
  extra=""; [ "$name" = onednn_avx2 ] && extra="NIBBLE_CPU_PATH=onednn ONEDNN_MAX_CPU_ISA=AVX2 NIBBLE_TEST_REQUIRE_KERNEL=onednn"
  (env NIBBLE_NUM_THREADS=2 NIBBLE_TEST_BACKEND=cpu_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P $extra \
     $( [ -n "$isa" ] && echo NIBBLE_CPU_PATH=fused NIBBLE_CPU_ISA=$isa NIBBLE_TEST_REQUIRE_KERNEL=$req ) \
     $( [ -n "$gmin" ] && echo NIBBLE_CPU_GEMM_MIN_M=$gmin ) \
     timeout 200 $B/new/tests/test_conformance > "$O/t_conf_$name.txt" 2>&1; echo "exit=$?" >> "$O/t_conf_$name.txt") &
done
for f in tests/data/fixtures/*/; do
  n=$(basename "$f")
  (NIBBLE_NUM_THREADS=1 NIBBLE_PLUGIN_PATH=$P timeout 200 $B/new/tools/nibble/nibble verify --backend cpu_w4a16 --model "$f" \
     --reference "$f/reference.safetensors" > "$O/t_fix_$n.txt" 2>&1; echo "exit=$?" >> "$O/t_fix_$n.txt") &
done
wait
say "amx_emulated: $(grep -m1 'amx emulated' "$O/t_amx_emulated.txt") $(grep -m1 'test cases' "$O/t_amx_emulated.txt") $(tail -1 "$O/t_amx_emulated.txt")"
for f in "$O"/t_conf_*.txt; do
  say "conformance ${f##*/t_conf_}: $(grep -m1 'cases checked' "$f") $(grep -m1 SKIP "$f") $(tail -1 "$f")"
  grep -m3 "out of tolerance" "$f" | tee -a "$S"
done
say "fixtures: $(cat "$O"/t_fix_*.txt | grep -c 'exit=0') of $(ls "$O"/t_fix_*.txt | wc -l) exit 0"
for f in "$O"/t_fix_*.txt; do grep -q 'exit=0' "$f" || { say "fixture ${f##*/t_fix_} failed:"; tail -5 "$f" | tee -a "$S"; }; done
tar czf "$O/tests.tar.gz" -C "$O" $(cd "$O" && ls t_*.txt) && rm -f "$O"/t_*.txt
say "-- tests done at $((SECONDS - T0)) s"
# 3. targets
for preset in llama3-8b llama3-70b; do
  NIBBLE_PLUGIN_PATH=$P timeout 200 $B/new/tools/nibble/nibble bench --backend cpu_w4a16 --shapes $preset \
    --m 1,2,8,16,32,64,256 --threads 16,2 --rotate-mb 640 --budget 0.12 --json "$O/xeon_$preset.json" >> "$O/targets_bench.txt" 2>&1
  say "-- bench $preset exit $? at $((SECONDS - T0)) s"
done
# 4. A/B at 2 threads, M >= 64
OUT=$O/ab AB_ROUNDS=2 AB_BUDGET_S=150 AB_M=64,256,1024 AB_THREADS=2 AB_SHAPES=4096x4096,14336x4096,8192x57344 \
  AB_SIDES="fused:new onednn:new+NIBBLE_CPU_PATH=onednn" bash bench/ab.sh .gpu/xeon > "$O/ab_out.txt" 2>&1
say "-- ab done at $((SECONDS - T0)) s"
tar czf "$O/raw.tar.gz" -C "$O" ab ab_out.txt targets_bench.txt && rm -rf "$O/ab" "$O/ab_out.txt"
