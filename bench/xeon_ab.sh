#!/bin/bash
# bench/xeon_ab.sh [BUNDLE]: an A/B timing of two builds of the CPU plugin on the GPU machine's
# Xeon host in one device call (issue 15), from a bundle made by bench/xeon_ab_bundle.sh (default
# .gpu), run from the repository root. `nibble bench` runs the same sweep with the old build and
# the new one in turn, old/new/old/new (XEON_AB_ROUNDS rounds, default 2), so that a change of the
# machine's state over the run (another tenant, the host's clocks) falls on both alike:
#   shapes XEON_AB_SHAPES (default 4096x4096,14336x4096,8192x57344), M XEON_AB_M (default 1,8),
#   threads XEON_AB_THREADS (default 16,2); bf16, G = 128, weights rotated over 640 MiB, no dense
#   baseline.
# Writes under $OUT (or /tmp/xeon-ab-out): summary.txt (the table: each point's time per run, the
# median of each side and new/old), bench.txt (nibble's output) and one JSON per run. The whole
# stays inside XEON_AB_BUDGET_S seconds (default 280): each run gets an even share of what is left.
# Runs on any Linux x86-64 machine (e.g. the development machine with XEON_AB_THREADS=2).
set -uo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${1:-.gpu}" && pwd) || { echo "no bundle ${1:-.gpu}" >&2; exit 1; }
SHAPES=${XEON_AB_SHAPES:-4096x4096,14336x4096,8192x57344}
MS=${XEON_AB_M:-1,8}
THREADS=${XEON_AB_THREADS:-16,2}
ROUNDS=${XEON_AB_ROUNDS:-2}
OUT=${OUT:-/tmp/xeon-ab-out}
budget=${XEON_AB_BUDGET_S:-280}
start=$SECONDS
mkdir -p "$OUT"
sum=$OUT/summary.txt benchtxt=$OUT/bench.txt
: >"$sum"
: >"$benchtxt"
note() { echo "$*" | tee -a "$sum"; }

for z in "$B"/lib/*.xz; do [[ -e "$z" ]] && xz -d -k -f "$z"; done
nib() {  # nib SIDE ARGS...: that build's nibble with its own libnibble and plugin only
  local side=$1
  shift
  LD_LIBRARY_PATH="$B/$side/core:$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    NIBBLE_PLUGIN_PATH="$B/$side/plugins/cpu_w4a16" "$B/$side/tools/nibble/nibble" "$@"
}
note "xeon_ab: $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs"
note "shapes $SHAPES, M $MS, threads $THREADS, $ROUNDS rounds of old then new, budget $budget s"
for side in old new; do
  for f in tools/nibble/nibble core/libnibble.so.0 plugins/cpu_w4a16/cpu_w4a16.so; do
    [[ -e "$B/$side/$f" ]] || { note "FAIL: $B/$side/$f is not in the bundle"; exit 1; }
  done
  # Which plugin file each side loads (its own: a mix-up would compare a build with itself).
  loaded=$(nib "$side" plugins 2>&1 | grep -m1 -o "/[^ ]*cpu_w4a16\.so" || true)
  note "$side: $(cat "$B/$side/origin.txt" 2>/dev/null) loads ${loaded:-(no path printed)}"
  note "  $(nib "$side" plugins 2>&1 | grep -m1 'probe:' | sed 's/^ *//' | cut -c1-300)"
done

runs=$((2 * ROUNDS)) done_runs=0
for ((round = 1; round <= ROUNDS; ++round)); do
  for side in old new; do
    left=$((budget - (SECONDS - start) - 10))
    limit=$((left / (runs - done_runs)))
    done_runs=$((done_runs + 1))
    ((limit >= 20)) || { note "NOT RUN (out of time): $side round $round"; continue; }
    t0=$SECONDS
    echo "===== $side round $round (limit $limit s)" >>"$benchtxt"
    timeout "$limit" bash -c "$(declare -f nib); B='$B'; nib $side bench --backend cpu_w4a16 --shapes '$SHAPES' --m '$MS' \
      --threads '$THREADS' --g 128 --rotate-mb 640 --budget 0.2 --no-dense --json '$OUT/$side-$round.json'" >>"$benchtxt" 2>&1
    rc=$?
    note "$side round $round: exit $rc in $((SECONDS - t0)) s$( ((rc == 124)) && echo ' (cut short: its JSON has the points that finished)')"
  done
done

python3 - "$OUT" "$ROUNDS" >>"$sum" 2>&1 <<'PY'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
points = {}  # (shape, m, threads) -> side -> [(time_us, pct_roofline)]
kernels = {}
for side in ("old", "new"):
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
print("time us per call (nibble bench's median) per run; median of each side's runs; new/old < 1: the new build is faster")
print(f"{'shape':<12} {'M':>3} {'thr':>3} {'old runs':>18} {'new runs':>18} {'old':>9} {'new':>9} {'new/old':>8} {'%roof old':>9} {'%roof new':>9}  kernel")
ratios = {}
for key in sorted(points, key=lambda k: (k[2] or 0, k[0], k[1])):
    shape, m, thr = key
    s = points[key]
    row = f"{shape:<12} {m:>3} {thr if thr is not None else '-':>3}"
    runs = lambda side: " ".join(f"{t:.0f}" for t, _ in s.get(side, [])) or "-"
    med = lambda side: statistics.median(t for t, _ in s[side]) if s.get(side) else None
    roof = lambda side: statistics.median(p for _, p in s[side] if p is not None) if s.get(side) and any(p is not None for _, p in s[side]) else None
    o, n = med("old"), med("new")
    ratio = n / o if o and n else None
    if ratio:
        ratios.setdefault(thr, []).append(ratio)
    fmt = lambda v, f: f"{v:{f}}" if v is not None else "-"
    print(f"{row} {runs('old'):>18} {runs('new'):>18} {fmt(o, '9.0f')} {fmt(n, '9.0f')} {fmt(ratio, '8.3f')} "
          f"{fmt(roof('old'), '8.1f')}% {fmt(roof('new'), '8.1f')}%  {','.join(sorted(kernels[key]))}")
for thr, rs in sorted(ratios.items(), key=lambda kv: kv[0] or 0):
    print(f"{thr} threads: geometric mean of new/old over {len(rs)} points: {statistics.geometric_mean(rs):.3f}")
PY
note "total $((SECONDS - start)) s"
cat "$sum"
ls -la "$OUT"
