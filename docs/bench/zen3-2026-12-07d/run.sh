cd /work/main
export NIBBLE_PLUGIN_PATH=$PWD/build/plugins/cpu_w4a16
for r in 1 2; do for d in 0 auto; do
  if [ $d = 0 ]; then export NIBBLE_CPU_GEMM_DECODED=0; else unset NIBBLE_CPU_GEMM_DECODED; fi
  build/tools/nibble/nibble bench --backend cpu_w4a16 --shapes llama3-8b --m 16,64,255,512 --dtype f32 --budget 0.2 --json docs/bench/zen3-2026-12-07d/$d.$r.json > docs/bench/zen3-2026-12-07d/$d.$r.txt 2>&1
done; done
echo done > docs/bench/zen3-2026-12-07d/DONE
