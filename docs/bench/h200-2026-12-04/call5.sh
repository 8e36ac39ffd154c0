#!/bin/bash
# Device call 5 of 2026-12-04: the M = 9-16 rule by width (v1 for 4 bits, v2u2 for 8-bit layers of
# 64 Mi packed weights or more) and the GEMV grid of call 4, with the automatic choice and cuBLAS
# fp16 / bf16 dense in the same run, and v1 / v2u2 forced where call 4 did not look (bf16).
# 1. Conformance (automatic choice); test_cuda_graph.
# 2. `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 9,16 --bits 4|8
#    --dtype f16|bf16 --budget 0.15` (auto, dense), and with v1 and v2u2 forced (--no-dense):
#    8 bits fp16 and bf16, 4 bits bf16.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble; CONF=$here/build/tests/test_conformance
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
T0=$SECONDS; S=$OUT/summary.log; TMP=$(mktemp -d)
say() { echo "$*" | tee -a "$S"; }
say "== call5 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)"
(NIBBLE_TEST_BACKEND=cuda_w4a16 NIBBLE_TEST_PLUGIN_DIRS=$P timeout 240 "$CONF" > "$TMP/conf.auto" 2>&1; echo "exit=$?" >> "$TMP/conf.auto") &
(NIBBLE_TEST_PLUGIN_DIRS=$P timeout 200 build/tests/test_cuda_graph > "$TMP/conf.graph" 2>&1; echo "exit=$?" >> "$TMP/conf.graph") &
wait
for f in "$TMP"/conf.*; do
  say "   ${f##*/conf.}: $(grep -m1 -E 'cases checked|graph launches' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
done
run() {  # label kernel bits dtype dense
  [ $((SECONDS - T0)) -lt 520 ] || { say "-- $1 skipped (time)"; return; }
  local nd=--no-dense; [ "$5" = dense ] && nd=
  NIBBLE_CUDA_KERNEL=$2 NIBBLE_PLUGIN_PATH=$P timeout 80 "$NIBBLE" bench --backend cuda_w4a16 \
    --shapes llama3-8b,llama3-70b --m 9,16 --bits $3 --dtype $4 $nd --budget 0.15 > "$TMP/b.txt" 2>&1
  say "-- $1: exit $? after $((SECONDS - T0)) s"
  { echo "== $1"; cat "$TMP/b.txt"; } >> "$OUT/bench.txt"
  grep -E "^[0-9]+x[0-9]+ " "$TMP/b.txt" | sed -E "s/ \(GEMV[^)]*\)//; s/^/   r1 b$3 $1 /" >> "$S"
}
for dt in f16 bf16; do
  run $dt:auto auto 4 $dt dense
  run $dt:auto8 auto 8 $dt dense
  run $dt:v1 v1 8 $dt -
  run $dt:v2u2 v2u2 8 $dt -
done
run bf16:v1_4 v1 4 bf16 -
run bf16:v2u2_4 v2u2 4 bf16 -
say "== done in $((SECONDS - T0)) s"
