#!/bin/bash
# Device call 1 of 2026-12-03b (issues 17 and 20): the GEMV's L2 prefetch (gemv_prefetch, new),
# then the whole of gpu_check.sh on the same build (every kernel forced, fixtures, bench tables,
# sweep). The sweep: `nibble bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b --m 1,4,8,16
# --bits 4|8 --no-dense` with NIBBLE_CUDA_GEMV_PREFETCH = 0 (none: the kernel as before), 1, 2, 3,
# 4, 6, 8, 16, two rounds in rotated order. Run from .gpu (gpu_check.sh bundle + this script), OUT
# set (the bundle: gpu_check.sh bundle, then xz on build/plugins/cuda_w4a16/{bench_kernels,
# cuda_w4a16.so}, then this script copied in). Writes prefetch.txt (all of the sweep's output, its summary first) and gpu_check's files.
set -u
here=$(cd "$(dirname "$0")" && pwd); cd "$here"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16; NIBBLE=$here/build/tools/nibble/nibble
T0=$SECONDS; TMP=$(mktemp -d); L=$TMP/sweep.txt
# The bundle carries the two largest files xz-compressed (to stay under the 64 MiB a call carries).
for z in "$P"/*.xz; do [ -e "$z" ] && xz -d -f "$z"; done
echo "== call1 prefetch sweep $(date -u +%FT%TZ)" > $TMP/sum.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> $TMP/sum.txt 2>&1
DS="0 1 2 3 4 6 8 16"
for round in 1 2; do
  for bits in 4 8; do
    [ $round = 2 ] && DS="16 8 6 4 3 2 1 0"
    for d in $DS; do
      [ $((SECONDS - T0)) -lt 300 ] || { echo "-- r$round b$bits D$d skipped (time)" >> $TMP/sum.txt; continue; }
      echo "== round $round bits $bits prefetch $d" >> $L
      NIBBLE_CUDA_GEMV_PREFETCH=$d NIBBLE_PLUGIN_PATH=$P timeout 60 "$NIBBLE" bench --backend cuda_w4a16 \
        --shapes llama3-8b,llama3-70b --m 1,4,8,16 --bits $bits --no-dense --budget 0.1 >> $L 2>&1
      echo "-- r$round b$bits D$d: exit $? after $((SECONDS - T0)) s" >> $TMP/sum.txt
      awk -v t="r$round b$bits D$d" '/^== /{next} /^[0-9]+x[0-9]+ +[0-9]+ /{
          for (i = 1; i <= NF; ++i) if ($i ~ /%$/) pct = $i;
          match($0, /\) +[0-9.]+/); tm = substr($0, RSTART + 1, RLENGTH - 1); gsub(/ /, "", tm);
          last = $0 } END {}
        /^[0-9]+x[0-9]+ +[0-9]+ /{ print t, $1, "M=" $2, tm, pct }' <(sed -n "/== round $round bits $bits prefetch $d\$/,\$p" $L) >> $TMP/sum.txt
    done
  done
done
{ cat $TMP/sum.txt; echo; echo "==== raw"; cat $L; } > "$OUT/prefetch.txt"
bash "$here/gpu_check.sh" run > $TMP/gc.out 2>&1
echo "-- gpu_check exit $? after $((SECONDS - T0)) s" >> "$OUT/summary.log"
