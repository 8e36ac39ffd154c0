#!/bin/bash
# Device call 2 of 2026-12-07 (seventh session): why clusters of 2 (x multicast) ran 1.7-1.95x
# slower than single blocks in call 1. Changes since: the remote arrivals on `empty` use the
# default (CTA-scope release) semantics instead of .release.cluster, a block's own arrival is a
# local one; the ablation nomc keeps the cluster's launch and schedule but copies x per block and
# crosses no barrier between blocks.
#   1. the conformance suite with clusters on, wg128 and wg256 forced (the protocol changed);
#   2. bench_kernels --wgmma-diag, wg128 with whole waves: single blocks, clusters, clusters
#      without multicast (nomc), half of x (xhalf), on 8192x8192 and 8192x57344 at M = 1024, 4096.
# Bundle: docs/bench/device-2026-12-07f/bundle.sh 2. Run: bash .gpu/call2.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
T0=$SECONDS
S=$OUT/summary.log
say() { echo "$*" | tee -a "$S"; }
find "$here" -name '*.xz' -exec xz -d -k -f {} \;
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$here/build/plugins/cuda_w4a16
CONF=$here/build/tests/test_conformance
STD=$(mktemp -d)
say "== 1. conformance, clusters on ($(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader))"
for k in wg128 wg256; do
  (NIBBLE_CUDA_WGMMA_CLUSTER=on NIBBLE_CUDA_KERNEL=$k NIBBLE_TEST_REQUIRE_KERNEL=$k NIBBLE_TEST_BACKEND=cuda_w4a16 \
     NIBBLE_TEST_PLUGIN_DIRS=$P timeout 150 "$CONF" > "$STD/conf.$k" 2>&1; echo "exit=$?" >> "$STD/conf.$k") &
done
wait
for f in "$STD"/conf.*; do
  say "   ${f##*/conf.}: $(grep -m1 'conformance seed' "$f") | $(grep -m1 'cases checked' "$f" | sed 's/^[a-z0-9_]*: //') $(tail -1 "$f")"
  grep "logged" "$f" | head -6 | cut -c1-260 | tee -a "$S"
done
say "== 2. wgmma diagnostics ($((SECONDS - T0)) s)"
NIBBLE_CUDA_WGMMA_ABLATE=ximg+lsu+waves,ximg+lsu+waves+cluster,ximg+lsu+waves+cluster+nomc,ximg+lsu+waves+cluster+lrel,ximg+lsu+waves+xhalf,ximg+lsu+waves+cluster+grid128,ximg+lsu+waves+cluster+grid66,ximg+lsu+waves+grid66 \
  timeout 200 "$P/bench_kernels" --wgmma-diag --shapes 8192x8192,8192x57344 --m 1024,4096 \
  --out "$OUT/diag.txt" > "$STD/diag.stdout" 2>&1
say "   exit $? after $((SECONDS - T0)) s"
awk '/^== wgmma diagnostics, time/ {p=1} p' "$OUT/diag.txt" | tee -a "$S"
grep -E "^--" "$OUT/diag.txt" | tee -a "$S"
tar -czf "$OUT/std.tar.gz" -C "$STD" .
say "== done in $((SECONDS - T0)) s"
