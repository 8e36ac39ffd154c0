#!/bin/bash
# Device call 1 of 2026-12-08 (eighth session), the only one its device time allows (344 s with
# the machine's start). Bundle: docs/bench/device-2026-12-08/bundle.sh. Run: bash .gpu/call1.sh
#   1. the host CPU (issue 15): the GEMM forms' pieces per member, 2 (the old split) against 8 (the
#      new default), gemm-amx at 16 threads, M = 8, 64, 256, two rounds in turn; then the new
#      default with the oneDNN bf16 dense baseline in the same run;
#   2. the GPU (issue 20): the peers tables through the automatic choice, fp16 and bf16, the 8
#      shapes, M = 1-4096, with the dense cuBLAS baseline; peers.py puts PERF.md's H200 Marlin and
#      cuBLAS figures beside them (meaningful on an H200 only);
#   3. correctness on the GPU while time is left: gpu_check.sh with GPU_CHECK_ONLY=1 (every kernel
#      of the menu forced through the conformance suite, the automatic choice with and without PDL,
#      CUDA graphs, the ROCm kernels on CUDA, the 19 fixtures through nibble verify).
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
T0=$SECONDS
S=$OUT/summary.log
W=$(mktemp -d)  # every output but the summary, packed into $OUT/results.tar.gz after each step
say() { echo "$*" | tee -a "$S"; }
pack() { tar czf "$OUT/results.tar.gz" -C "$W" . ; }
find "$here" -name '*.xz' -exec xz -d -k -f {} \;
[ -e "$here/tests/data" ] || ln -s "$here/../tests/data" "$here/tests/data"
NIBBLE=$here/build/tools/nibble/nibble
say "== host: $(lscpu | grep -m1 'Model name' | tr -s ' '), $(nproc) CPUs; GPU: $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)"
say "== 1. CPU: pieces per member of gemm-amx, 2 / 8, 16 threads ($((SECONDS - T0)) s)"
cpu_bench() {  # pieces, output name, extra args...
  local pieces=$1 name=$2
  shift 2
  LD_LIBRARY_PATH="$here/lib:$here/cpu/lib" NIBBLE_PLUGIN_PATH=$here/cpu/plugin NIBBLE_CPU_GEMM_PIECES=$pieces \
    timeout $([ "$name" = dense ] && echo 35 || echo 25) "$NIBBLE" bench --backend cpu_w4a16 --shapes 4096x4096,14336x4096,4096x14336,8192x28672 \
    --m 8,64,256 --threads 16 --budget 0.1 --json "$W/cpu_$name.json" "$@" > "$W/cpu_$name.txt" 2>&1
  say "   pieces $pieces ($name): exit $? after $((SECONDS - T0)) s"
}
cpu_bench 2 p2a --no-dense
cpu_bench 8 p8a --no-dense
cpu_bench 2 p2b --no-dense
cpu_bench 8 p8b --no-dense
cpu_bench 8 dense
/usr/bin/env python3 - "$W" <<'PY' 2>&1 | tee -a "$S"
import json, sys, os
w = sys.argv[1]
def load(n):
    p = os.path.join(w, f"cpu_{n}.json")
    return {(r["shape"], r["m"]): r for r in json.load(open(p))["results"]} if os.path.exists(p) else {}
runs = {n: load(n) for n in ("p2a", "p8a", "p2b", "p8b", "dense")}
print("shape M kernel | us: p2a p8a p2b p8b | p8/p2 (best of 2) | dense: us x dense")
for key in sorted(runs["p8a"]):
    t = {n: runs[n][key]["time_us"] for n in runs if key in runs[n]}
    p2 = min(t.get("p2a", 1e30), t.get("p2b", 1e30)); p8 = min(t.get("p8a", 1e30), t.get("p8b", 1e30))
    d = runs["dense"].get(key, {})
    print(key[0], key[1], runs["p8a"][key]["kernel"], "|", " ".join(f"{t.get(n, 0):.0f}" for n in ("p2a", "p8a", "p2b", "p8b")),
          f"| {p8 / p2:.3f} |", f"{d.get('time_us', 0):.0f} {d.get('dense_us', 0):.0f} {d.get('speedup_vs_dense', 0):.2f}x")
PY
pack
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16
for dt in f16 bf16; do
  say "== 2. GPU bench $dt through the automatic choice ($((SECONDS - T0)) s)"
  NIBBLE_PLUGIN_PATH=$P timeout 50 "$NIBBLE" bench --backend cuda_w4a16 --shapes llama3-8b,llama3-70b \
    --m 1,4,8,16,32,64,128,256,1024,4096 --dtype $dt --budget 0.04 --json "$W/bench_$dt.json" > "$W/bench_$dt.txt" 2>&1
  say "   exit $? after $((SECONDS - T0)) s"
  /usr/bin/env python3 "$here/peers.py" "$W/bench_$dt.json" 2>&1 | tee -a "$S"
  pack
done
say "== 3. GPU correctness ($((SECONDS - T0)) s)"
mkdir -p "$W/check"
(OUT=$W/check GPU_CHECK_ONLY=1 timeout 90 bash "$here/gpu_check.sh" run > "$W/check.stdout" 2>&1
 echo "gpu_check exit $?" >> "$W/check.stdout")
say "   $(tail -1 "$W/check.stdout") after $((SECONDS - T0)) s"
grep -E "^   |^--|logged" "$W/check/summary.log" | head -40 | cut -c1-260 | tee -a "$S"
pack
say "== call1 done in $((SECONDS - T0)) s"
