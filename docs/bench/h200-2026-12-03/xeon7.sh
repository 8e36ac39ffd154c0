#!/bin/bash
# The Xeon host's checks for issues 15 and 17 (prepared 2026-12-03, not yet run: that session's
# device time ran out): every CPU form forced through the conformance suite on this Intel CPU
# (the bf16 forms read native 2-bit codes since 2026-12-03; checked so far only on AMD), then
# `nibble bench` of 2-bit layers at M = 1 and 64 with the default plan and with the bf16 family
# forced, 2 and 16 threads.
#   here:   docs/bench/h200-2026-12-03/xeon7.sh bundle    # -> .gpu (CPU build only, ~15 MiB)
#   there:  bash .gpu/xeon7.sh                             # with .gpu carried, OUT set
set -u
if [ "${1:-}" = bundle ]; then
  set -e
  root=$(cd "$(dirname "$0")/../../.." && pwd); cd "$root"
  bench/ab_bundle.sh - build .gpu
  mkdir -p .gpu/new/tests && cp build/tests/test_conformance .gpu/new/tests/
  cp "$0" .gpu/xeon7.sh
  du -sm .gpu
  exit 0
fi
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
X=$here; S=$OUT/xeon_summary.log; T0=$SECONDS; TMP=$(mktemp -d)
for z in "$X"/lib/*.xz; do [ -e "$z" ] && xz -d -k -f "$z"; done
export LD_LIBRARY_PATH="$X/new/core:$X/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
CPUP=$X/new/plugins/cpu_w4a16; CONF=$X/new/tests/test_conformance; NB=$X/new/tools/nibble/nibble
say() { echo "$*" | tee -a "$S"; }
say "== xeon7 $(date -u +%FT%TZ): $(grep -m1 'model name' /proc/cpuinfo), $(nproc) CPUs"
grep -o -w -E 'amx_bf16|amx_tile|avx512_bf16|avx512vbmi' /proc/cpuinfo | sort -u | tr '\n' ' ' | tee -a "$S"; echo | tee -a "$S"
v=0
for spec in "fused_avx512bf16 NIBBLE_CPU_ISA=avx512bf16 NIBBLE_CPU_GEMM_MIN_M=1000000" \
            "gemm_avx512bf16 NIBBLE_CPU_ISA=avx512bf16 NIBBLE_CPU_GEMM_MIN_M=1" \
            "fused_avx512 NIBBLE_CPU_ISA=avx512" "gemm_amx NIBBLE_CPU_ISA=amx NIBBLE_CPU_GEMM_MIN_M=1" \
            "fused_avx2 NIBBLE_CPU_ISA=avx2" "auto"; do
  set -- $spec; name=$1; shift
  req=$name; [ "$name" = auto ] && req=
  (env "$@" NIBBLE_CPU_PATH=fused NIBBLE_NUM_THREADS=2 NIBBLE_TEST_BACKEND=cpu_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$CPUP \
     ${req:+NIBBLE_TEST_REQUIRE_KERNEL=$req} timeout 240 "$CONF" > "$TMP/conf.$name" 2>&1; echo "exit=$?" >> "$TMP/conf.$name") &
done
wait
for f in "$TMP"/conf.*; do
  echo "== conformance ${f##*/conf.}" >> "$OUT/xeon_conformance.log"
  grep -E "cases checked|SKIP|ERROR|FAIL|out of tolerance|exit=|Status|assertions" "$f" | head -30 >> "$OUT/xeon_conformance.log"
  say "   ${f##*/conf.}: $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
done
say "-- conformance done after $((SECONDS - T0)) s"
for isa in default avx512bf16; do
  [ $((SECONDS - T0)) -lt 200 ] || { say "-- bench $isa skipped (time)"; continue; }
  echo "== NIBBLE_CPU_ISA=$isa" >> "$OUT/xeon_bench.txt"
  isa_env=(); [ $isa != default ] && isa_env=(NIBBLE_CPU_ISA=$isa)
  env "${isa_env[@]}" NIBBLE_PLUGIN_PATH=$CPUP \
    timeout 150 "$NB" bench --backend cpu_w4a16 --shapes 4096x4096,14336x4096,4096x28672 --m 1,64 --bits 2 \
    --threads 2,16 --budget 0.15 >> "$OUT/xeon_bench.txt" 2>&1
  say "-- bench bits 2, ISA $isa: exit $? after $((SECONDS - T0)) s"
done
grep -E "^[0-9]+x[0-9]+ " "$OUT/xeon_bench.txt" | tee -a "$S"
say "== xeon7 done in $((SECONDS - T0)) s"
