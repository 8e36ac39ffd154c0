#!/bin/bash
# A/B on this machine: old (59a7dab, the tree of docs/bench/cpu.json) and new (HEAD), alternating.
out=/tmp/zen5/ab; mkdir -p $out
for r in 1 2 3 4; do
  for side in old new; do
    if [ $side = old ]; then root=/work/wt-old/build; else root=/work/main/build-cpu; fi
    echo "== round $r $side $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    NIBBLE_PLUGIN_PATH=$root/plugins/cpu_w4a16 $root/tools/nibble/nibble bench --backend cpu_w4a16 \
      --shapes 4096x4096,8192x8192,8192x57344 --m 1,8,64,256 --no-dense --json $out/$side-$r.json 2>&1 | grep -v "^backend"
  done
done
