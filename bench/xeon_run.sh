#!/bin/bash
# bench/xeon_run.sh [BUNDLE] [THREADS] [M_LIST]: the CPU plugin's checks and timings on the GPU
# machine's Xeon host in one go (issue 15), from a bundle made by bench/xeon_bundle.sh (default
# .gpu), run from the repository root:
#   1. the machine: CPU, NUMA, `nibble plugins` (the kernel plan, AMX permission, calibration)
#   2. the thread team's, work split's and AMX emulation's unit tests, bench_amx (the AMX form's
#      time split on one core, after its check against the reference), the fork, host-OpenMP and
#      stress tests, and the conformance suite for every forced kernel form (AMX included: SKIP
#      where the CPU lacks it) at the default thread count, the default plan and AMX at 2 threads
#   3. every fixture through `nibble verify`, with the default plan and with the AMX form forced
#   4. `nibble bench --shapes llama3-8b` and `llama3-70b` (one run each, so that a run cut short
#      keeps the other) at every M of M_LIST and every thread count of THREADS (default 16,2)
#   5. if time is left, smaller comparisons: oneDNN's path against the AMX form at large M, the
#      f32 avx512 kernels and the avx512bf16 family without AMX, K splitting on small layers
# XEON_PRESETS (default "llama3-8b llama3-70b") and XEON_BENCH_S (a cap on each preset's seconds)
# trim step 4 so that step 5 gets time.
# Everything goes into at most 8 files under $OUT (or /tmp/xeon-out): summary.txt (read it first),
# env.txt, tests.log, bench.txt, bench-llama3-8b.json, bench-llama3-70b.json, extras.tar.gz. Each
# step runs under a time limit so that the whole stays inside XEON_BUDGET_S seconds (default 560).
# Runs on any Linux x86-64 machine (e.g. the development machine with THREADS=2).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
B=$(cd "${1:-.gpu}" && pwd) || { echo "no bundle ${1:-.gpu}" >&2; exit 1; }
THREADS=${2:-16,2}
MS=${3:-1,2,4,8,16,32,64,128,256,1024}
OUT=${OUT:-/tmp/xeon-out}
mkdir -p "$OUT"
budget=${XEON_BUDGET_S:-560}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
sum=$OUT/summary.txt tests=$OUT/tests.log benchtxt=$OUT/bench.txt envf=$OUT/env.txt
: >"$sum"; : >"$tests"; : >"$benchtxt"
note() { echo "$*" | tee -a "$sum"; }

# The bundle's libraries; libdnnl travels compressed.
for z in "$B"/lib/*.xz; do [[ -e "$z" ]] && xz -d -k -f "$z"; done
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NIB=$B/build/tools/nibble/nibble
P=$B/build/plugins/cpu_w4a16
T=$B/build/tests
for f in "$NIB" "$P/cpu_w4a16.so" "$T/test_conformance"; do
  [[ -x "$f" || -f "$f" ]] || { note "FAIL: $f is not in the bundle"; exit 1; }
done
export NIBBLE_PLUGIN_PATH=$P
# The default thread count of the plugin here (all CPUs this process may use); the forced-kernel
# conformance runs use it.
note "xeon_run: $(date -u +%FT%TZ), threads $THREADS, M $MS, budget ${budget} s"

# 1. The machine.
{
  echo "== uname"; uname -a
  echo "== lscpu"; lscpu 2>/dev/null || grep -m1 "model name" /proc/cpuinfo
  echo "== numa"; (numactl -H 2>/dev/null || ls /sys/devices/system/node/ 2>/dev/null)
  echo "== flags"; grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E 'avx512|amx|avx2|fma|f16c' | tr '\n' ' '; echo
  echo "== transparent huge pages"; cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
  echo "== nibble plugins --json"; timeout 60 "$NIB" plugins --json
} >"$envf" 2>&1
note "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) CPUs"
note "probe: $(timeout 60 "$NIB" plugins 2>&1 | grep -m1 'probe:' | sed 's/^ *//')"

# 2. Tests. run_test NAME TIMEOUT ENV... -- COMMAND...: exit 0 PASS, 77 SKIP (its reason), else FAIL.
pass=0 fail=0 skip=0
run_test() {
  local name=$1 limit=$2; shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  (($(left) > 30)) || { note "NOT RUN (out of time): $name"; fail=$((fail + 1)); return; }
  ((limit > $(left) - 20)) && limit=$(($(left) - 20))
  echo "===== $name (${envs[*]:-}) $*" >>"$tests"
  local t0=$SECONDS rc
  env "${envs[@]}" timeout "$limit" "$@" >>"$tests" 2>&1
  rc=$?
  case $rc in
    0) pass=$((pass + 1)); note "PASS $name ($((SECONDS - t0)) s)" ;;
    77) skip=$((skip + 1)); note "SKIP $name: $(grep -a '^SKIP' "$tests" | tail -1 | cut -c1-300)" ;;
    *) fail=$((fail + 1)); note "FAIL $name (exit $rc, $((SECONDS - t0)) s; see tests.log)" ;;
  esac
}
run_test thread_team 60 X=1 -- "$P/test_thread_team"
run_test work_split 60 X=1 -- "$P/test_work_split"
run_test kernel_choice 60 X=1 -- "$P/test_kernel_choice"
run_test amx_emulated 120 X=1 -- "$P/test_amx_emulated"
# Where the AMX form's time goes on one core (its table goes to tests.log), after its own check.
run_test bench_amx_bf16 150 X=1 -- "$P/bench_amx" --check --dtype bf16 --shapes 4096x4096,8192x10240,8192x57344 \
  --m 16,32,64,256
run_test bench_amx_f16 90 X=1 -- "$P/bench_amx" --dtype f16 --shapes 8192x10240 --m 16,64,256
run_test fork 60 NIBBLE_TEST_PLUGIN_DIRS="$P" -- "$T/test_fork"
run_test host_openmp 60 NIBBLE_TEST_PLUGIN_DIRS="$P" -- "$T/test_host_openmp"
run_test stress 60 NIBBLE_TEST_PLUGIN_DIRS="$P" NIBBLE_STRESS_SECONDS=3 -- "$T/test_stress"
# The conformance variants of tests/meson.build (keep the two lists alike).
conf=(NIBBLE_TEST_BACKEND=cpu_w4a16 NIBBLE_TEST_PLUGIN_DIRS="$P")
run_test conformance 180 "${conf[@]}" -- "$T/test_conformance"
run_test conformance_2threads 180 "${conf[@]}" NIBBLE_NUM_THREADS=2 -- "$T/test_conformance"
run_test conformance_gemm_amx 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=gemm_amx NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=amx NIBBLE_CPU_GEMM_MIN_M=1 -- "$T/test_conformance"
run_test conformance_gemm_amx_2threads 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=gemm_amx NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=amx NIBBLE_CPU_GEMM_MIN_M=1 NIBBLE_NUM_THREADS=2 -- "$T/test_conformance"
run_test conformance_fused_avx512bf16 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=fused_avx512bf16 NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=avx512bf16 NIBBLE_CPU_GEMM_MIN_M=1000000 -- "$T/test_conformance"
run_test conformance_gemm_avx512bf16 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=gemm_avx512bf16 NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=avx512bf16 NIBBLE_CPU_GEMM_MIN_M=1 -- "$T/test_conformance"
run_test conformance_gemm_avx2 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=gemm_avx2 NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=avx2 NIBBLE_CPU_GEMM_MIN_M=1 -- "$T/test_conformance"
run_test conformance_gemm_avx2_direct 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=gemm_avx2 NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=avx2 NIBBLE_CPU_GEMM_MIN_M=1 NIBBLE_CPU_GEMM_DECODED=0 -- "$T/test_conformance"
run_test conformance_dot_avx512vnni 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=dot_avx512vnni NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=avx512vnni -- "$T/test_conformance"
run_test conformance_dot_avx512vnni_2threads 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=dot_avx512vnni NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=avx512vnni NIBBLE_NUM_THREADS=2 -- "$T/test_conformance"
run_test conformance_dot_avx2 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=dot_avx2 NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=avx2-dot NIBBLE_CPU_GEMM_MIN_M=1000000 -- "$T/test_conformance"
run_test conformance_fused_avx512 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=fused_avx512 NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=avx512 -- "$T/test_conformance"
run_test conformance_fused_avx2 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=fused_avx2 NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=avx2 NIBBLE_CPU_GEMM_MIN_M=1000000 -- "$T/test_conformance"
run_test conformance_fused_portable 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=fused_portable NIBBLE_CPU_PATH=fused \
  NIBBLE_CPU_ISA=portable -- "$T/test_conformance"
run_test conformance_onednn 180 "${conf[@]}" NIBBLE_TEST_REQUIRE_KERNEL=onednn NIBBLE_CPU_PATH=onednn -- "$T/test_conformance"

# 3. Fixtures through nibble verify, default plan and the AMX form at every M.
for mode in default amx; do
  ok=0 bad=0 unsupported=0
  for d in "$root"/tests/data/fixtures/*/; do
    d=${d%/}
    [[ -f "$d/reference.safetensors" ]] || continue
    (($(left) > 30)) || { note "NOT RUN (out of time): verify ($mode) from $(basename "$d") on"; bad=$((bad + 1)); break; }
    envs=(X=1)
    [[ $mode == amx ]] && envs=(NIBBLE_CPU_ISA=amx NIBBLE_CPU_GEMM_MIN_M=1)
    echo "===== verify $mode $(basename "$d")" >>"$tests"
    if env "${envs[@]}" timeout 60 "$NIB" verify --model "$d" --reference "$d/reference.safetensors" >>"$tests" 2>&1; then
      ok=$((ok + 1))
    elif tail -n 30 "$tests" | grep -q "unsupported"; then
      unsupported=$((unsupported + 1))
      echo "UNSUPPORTED (not a 4-bit layer this build runs): $(basename "$d")" >>"$tests"
    else
      bad=$((bad + 1))
      note "FAIL verify ($mode) $(basename "$d")"
    fi
  done
  note "verify ($mode): $ok fixtures match, $bad fail, $unsupported with layers this build does not support (tests.log names them)"
  [[ $mode == amx ]] && note "  (with AMX forced: where the CPU lacks it the default plan runs; the probe above says which)"
done
note "tests: $pass passed, $fail failed, $skip skipped ($((SECONDS - start)) s so far)"

# 4. The bench: one run per preset, each shape at every thread count. Weights rotate over 640 MiB,
# beyond the host's 300 MB L3; each point is timed for 0.25 s (at least 3 calls).
for preset in ${XEON_PRESETS:-llama3-8b llama3-70b}; do
  limit=$(($(left) - 60))
  [[ $preset == llama3-8b ]] && limit=$((limit / 3))
  [[ -n ${XEON_BENCH_S:-} ]] && ((limit > XEON_BENCH_S)) && limit=$XEON_BENCH_S
  ((limit > 30)) || { note "NOT RUN (out of time): bench $preset"; continue; }
  t0=$SECONDS
  echo "===== bench $preset (limit $limit s)" >>"$benchtxt"
  timeout "$limit" "$NIB" bench --backend cpu_w4a16 --shapes "$preset" --m "$MS" --threads "$THREADS" --rotate-mb 640 \
    --budget 0.25 --json "$OUT/bench-$preset.json" --svg "$OUT/bench-$preset.svg" >>"$benchtxt" 2>&1
  rc=$?
  note "bench $preset: exit $rc in $((SECONDS - t0)) s$( ((rc == 124)) && echo ' (cut short by the time limit: the JSON has the shapes that finished)')"
done

# 5. Comparisons, while time is left (no dense baseline: the main runs have it).
extras=$OUT/extras
mkdir -p "$extras"
first_threads=${THREADS%%,*}
extra() {  # extra NAME ENV... -- BENCH ARGS...
  local name=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  (($(left) > 45)) || { note "NOT RUN (out of time): extra $name"; return; }
  echo "===== extra $name (${envs[*]}) $*" >>"$benchtxt"
  local t0=$SECONDS
  env "${envs[@]}" timeout $(($(left) - 30)) "$NIB" bench --backend cpu_w4a16 --no-dense --budget 0.2 --rotate-mb 640 "$@" \
    --json "$extras/$name.json" >>"$benchtxt" 2>&1
  note "extra $name: exit $? in $((SECONDS - t0)) s"
}
# The integer dot-product form against fused-avx512 at small M (both forced), streamed.
extra dot_avx512vnni NIBBLE_CPU_ISA=avx512vnni -- --shapes llama3-8b,8192x8192 --m 1,2,4 --threads "$THREADS"
extra fused_avx512_small_m NIBBLE_CPU_ISA=avx512 -- --shapes llama3-8b,8192x8192 --m 1,2,4 --threads "$THREADS"
extra dot_avx512vnni_bits2 NIBBLE_CPU_ISA=avx512vnni -- --shapes 4096x4096,14336x4096,8192x8192 --m 1 --bits 2 --threads "$THREADS"
extra fused_avx512_bits2 NIBBLE_CPU_ISA=avx512 -- --shapes 4096x4096,14336x4096,8192x8192 --m 1 --bits 2 --threads "$THREADS"
extra dot_avx512vnni_bits8 NIBBLE_CPU_ISA=avx512vnni -- --shapes 14336x4096,8192x8192 --m 1 --bits 8 --threads "$THREADS"
extra fused_avx512_bits8 NIBBLE_CPU_ISA=avx512 -- --shapes 14336x4096,8192x8192 --m 1 --bits 8 --threads "$THREADS"
extra onednn NIBBLE_CPU_PATH=onednn -- --shapes 4096x28672,8192x8192 --m 256,1024 --threads "$first_threads"
extra avx512bf16_no_amx NIBBLE_CPU_ISA=avx512bf16 -- --shapes 14336x4096 --m 8,32,64,256 --threads "$THREADS"
extra avx512_f32_kernels NIBBLE_CPU_ISA=avx512 -- --shapes 14336x4096 --m 1,8,64 --threads "$THREADS"
extra small_layers X=1 -- --shapes 4096x1024,14336x512 --m 1,4 --threads "$first_threads"
extra small_layers_no_split NIBBLE_CPU_SPLIT_K=0 -- --shapes 4096x1024,14336x512 --m 1,4 --threads "$first_threads"
mv "$OUT"/bench-*.svg "$extras"/ 2>/dev/null
tar -czf "$OUT/extras.tar.gz" -C "$OUT" extras && rm -rf "$extras"

# Summary: the issue's targets per thread count, then the extras' points.
{
  echo
  echo "== targets (bench/cpu_targets.py)"
  jsons=("$OUT"/bench-llama3-*.json)
  [[ -e "${jsons[0]}" ]] && python3 "$root/bench/cpu_targets.py" "${jsons[@]}" || echo "no bench JSON"
  echo
  echo "== extras (time us per point; compare with the main runs)"
  tar -xzf "$OUT/extras.tar.gz" -C /tmp 2>/dev/null
  for j in /tmp/extras/*.json; do
    [[ -e "$j" ]] || continue
    python3 - "$j" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
name = sys.argv[1].rsplit("/", 1)[-1][:-5]
print(name + ": " + "; ".join(f"{r['shape']} M={r['m']} t={r.get('threads')} {r['kernel']} {r['time_us']:.0f} us" for r in d["results"]))
PY
  done
  rm -rf /tmp/extras
  echo
  echo "total $((SECONDS - start)) s; tests: $pass passed, $fail failed, $skip skipped"
} >>"$sum" 2>&1
cat "$sum"
ls -la "$OUT"
