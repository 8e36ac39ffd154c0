#!/bin/bash
# bench/ab.sh [BUNDLE]: an A/B timing of two builds of a plugin in one device call: the CPU plugin
# on the GPU machine's Xeon host (issue 15), or with AB_BACKEND=cuda_w4a16 the CUDA plugin on its
# GPU, from a bundle made by bench/ab_bundle.sh (default .gpu), run from the repository root. `nibble bench` runs the same sweep with the old build and
# the new one in turn, old/new/old/new (AB_ROUNDS rounds, default 2), so that a change of the
# machine's state over the run (another tenant, the host's clocks) falls on both alike. The sides
# may also be settings of one build: AB_SIDES (default "old new") lists them, each
# LABEL[:BUILD][+VAR=VALUE...] (BUILD old or new, default the label), e.g.
#   AB_SIDES="nta:new+NIBBLE_CPU_PREFETCH=nta t0:new+NIBBLE_CPU_PREFETCH=t0"
# and every side is compared with the first. The sweep:
#   shapes AB_SHAPES (default 4096x4096,14336x4096,8192x57344), M AB_M (default 1,8),
#   threads AB_THREADS (default 16,2; CPU only); dtype AB_DTYPE (default bf16 on the CPU, f16 on
#   the GPU), G = 128, weights rotated over 640 MiB, no dense baseline; AB_ARGS adds arguments
#   of `nibble bench` (e.g. "--bits 8").
# Writes under $OUT (or /tmp/ab-out): summary.txt (the table: each point's time per run, the
# median of each side and new/old), bench.txt (nibble's output) and one JSON per run. The whole
# stays inside AB_BUDGET_S seconds (default 280): each run gets an even share of what is left, at
# least 20 s while that much is left (so with many sides and a small budget the last runs are the
# ones left out, each printed NOT RUN).
# Runs on any Linux x86-64 machine (e.g. the development machine with AB_THREADS=2).
set -uo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${1:-.gpu}" && pwd) || { echo "no bundle ${1:-.gpu}" >&2; exit 1; }
SHAPES=${AB_SHAPES:-4096x4096,14336x4096,8192x57344}
MS=${AB_M:-1,8}
THREADS=${AB_THREADS:-16,2}
ROUNDS=${AB_ROUNDS:-2}
SIDES=${AB_SIDES:-old new}
BACKEND=${AB_BACKEND:-cpu_w4a16}
DTYPE=${AB_DTYPE:-$([[ $BACKEND == cpu_w4a16 ]] && echo bf16 || echo f16)}
THREAD_ARGS="--threads $THREADS"
[[ $BACKEND == cpu_w4a16 ]] || THREAD_ARGS=""
OUT=${OUT:-/tmp/ab-out}
budget=${AB_BUDGET_S:-280}
start=$SECONDS
mkdir -p "$OUT"
sum=$OUT/summary.txt benchtxt=$OUT/bench.txt
: >"$sum"
: >"$benchtxt"
note() { echo "$*" | tee -a "$sum"; }

for z in "$B"/lib/*.xz "$B"/*/plugins/*/*.so.xz; do [[ -e "$z" ]] && xz -d -k -f "$z"; done
nib() {  # nib BUILD ARGS...: that build's nibble with its own libnibble and plugin only
  local side=$1
  shift
  LD_LIBRARY_PATH="$B/$side/core:$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    NIBBLE_PLUGIN_PATH="$B/$side/plugins/$BACKEND" "$B/$side/tools/nibble/nibble" "$@"
}
# A side's label, build and settings: LABEL[:BUILD][+VAR=VALUE...].
side_label() { local x=${1%%+*}; echo "${x%%:*}"; }
side_build() { local x=${1%%+*}; [[ $x == *:* ]] && echo "${x#*:}" || echo "$x"; }
side_env() { [[ $1 == *+* ]] && echo "${1#*+}" | tr '+' ' ' || true; }
labels=()
for s in $SIDES; do labels+=("$(side_label "$s")"); done
note "ab ($BACKEND): $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs"
note "shapes $SHAPES, M $MS,$([[ -n $THREAD_ARGS ]] && echo " threads $THREADS,") $ROUNDS rounds of the sides ($SIDES) in turn, budget $budget s"
for s in $SIDES; do
  build=$(side_build "$s")
  for f in tools/nibble/nibble core/libnibble.so.0 plugins/$BACKEND/$BACKEND.so; do
    [[ -e "$B/$build/$f" ]] || { note "FAIL: $B/$build/$f is not in the bundle"; exit 1; }
  done
  # Which plugin file each side loads (its own: a mix-up would compare a build with itself).
  loaded=$(env $(side_env "$s") bash -c "$(declare -f nib); B='$B'; BACKEND='$BACKEND'; nib $build plugins" 2>&1 | grep -m1 -o "/[^ ]*$BACKEND\.so" || true)
  note "$(side_label "$s"): $(cat "$B/$build/origin.txt" 2>/dev/null) $(side_env "$s") loads ${loaded:-(no path printed)}"
  note "  $(env $(side_env "$s") bash -c "$(declare -f nib); B='$B'; BACKEND='$BACKEND'; nib $build plugins" 2>&1 | grep -m1 'probe:' | sed 's/^ *//' | cut -c1-400)"
done

nsides=${#labels[@]}
runs=$((nsides * ROUNDS)) done_runs=0
for ((round = 1; round <= ROUNDS; ++round)); do
  for s in $SIDES; do
    side=$(side_label "$s") build=$(side_build "$s")
    left=$((budget - (SECONDS - start) - 10))
    limit=$((left / (runs - done_runs)))
    ((limit < 20)) && limit=20
    done_runs=$((done_runs + 1))
    ((left >= 20)) || { note "NOT RUN (out of time): $side round $round"; continue; }
    t0=$SECONDS
    echo "===== $side round $round (limit $limit s)" >>"$benchtxt"
    timeout "$limit" env $(side_env "$s") bash -c "$(declare -f nib); B='$B'; BACKEND='$BACKEND'; nib $build bench --backend $BACKEND --shapes '$SHAPES' --m '$MS' \
      $THREAD_ARGS --dtype $DTYPE ${AB_ARGS:-} --g 128 --rotate-mb 640 --budget 0.2 --no-dense --json '$OUT/$side-$round.json'" >>"$benchtxt" 2>&1
    rc=$?
    note "$side round $round: exit $rc in $((SECONDS - t0)) s$( ((rc == 124)) && echo ' (cut short: its JSON has the points that finished)')"
  done
done

python3 - "$OUT" "$ROUNDS" "${labels[@]}" >>"$sum" 2>&1 <<'PY'
import json, os, statistics, sys
out, rounds, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
base = sides[0]
points = {}  # (shape, m, threads) -> side -> [(time_us, pct_roofline)]
kernels = {}
for side in sides:
    for r in range(1, rounds + 1):
        path = os.path.join(out, f"{side}-{r}.json")
        if not os.path.exists(path):
            continue
        try:
            results = json.load(open(path))["results"]
        except (ValueError, KeyError) as e:
            print(f"{path}: unreadable ({e})")
            continue
        for x in results:
            key = (x["shape"], x["m"], x.get("threads"))
            points.setdefault(key, {}).setdefault(side, []).append((x["time_us"], x.get("pct_roofline")))
            kernels.setdefault(key, set()).add(x["kernel"])
            if not x.get("check_ok", True):
                print(f"CHECK FAILED: {side} round {r} {key}")
print()
print(f"time us per call (nibble bench's median) per run; median of each side's runs; X/{base} < 1: side X is faster than {base}")
fmt = lambda v, f: f"{v:{f}}" if v is not None else "-"
ratios = {}
for key in sorted(points, key=lambda k: (k[2] or 0, k[0], k[1])):
    shape, m, thr = key
    s = points[key]
    runs = lambda side: " ".join(f"{t:.0f}" for t, _ in s.get(side, [])) or "-"
    med = lambda side: statistics.median(t for t, _ in s[side]) if s.get(side) else None
    roof = lambda side: statistics.median(p for _, p in s[side] if p is not None) if s.get(side) and any(p is not None for _, p in s[side]) else None
    print(f"{shape:<12} M={m:<4} threads={thr if thr is not None else '-'}  kernel {','.join(sorted(kernels[key]))}")
    for side in sides:
        r = med(side) / med(base) if med(side) and med(base) else None
        if r and side != base:
            ratios.setdefault((side, thr), []).append(r)
        print(f"  {side:<10} runs {runs(side):>24}  median {fmt(med(side), '9.0f')} us  {fmt(roof(side), '6.1f')}% roof  "
              f"{side}/{base} {fmt(r, '.3f')}")
for (side, thr), rs in sorted(ratios.items(), key=lambda kv: (kv[0][1] or 0, kv[0][0])):
    print(f"{thr} threads: geometric mean of {side}/{base} over {len(rs)} points: {statistics.geometric_mean(rs):.3f}")
PY
note "total $((SECONDS - start)) s"
cat "$sum"
ls -la "$OUT"
