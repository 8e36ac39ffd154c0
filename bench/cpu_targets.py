#!/usr/bin/env python3
"""The CPU targets of issue 15, checked against `nibble bench --json` output (one or more files,
e.g. one per preset), per thread count:

  M = 1       at least 85% of the shape's bandwidth reading on layers of 32 MB or more, 70% below
  M = 2-32    at least 1.5x the dense baseline
  M >= 64     at least 0.9x the dense baseline (oneDNN bf16)
  every M     not slower than the dense baseline

    python3 bench/cpu_targets.py bench-8b.json bench-70b.json

Prints one table per thread count: per target, met or not, the worst point and how many points
missed. A point without a dense baseline is not counted for the dense targets (and said so).
"""
import json
import sys


def layer_mb(r):
    return r["k"] * r["n"] / 2 / 1e6


def main():
    rows = []
    for path in sys.argv[1:]:
        with open(path) as f:
            doc = json.load(f)
        host = doc.get("host", {})
        print(f"{path}: {host.get('cpu_model', '?')}, {host.get('cpus_allowed', '?')} CPUs, isa {','.join(host.get('isa', []))}")
        rows += doc["results"]
    if not rows:
        print("no results")
        return 1
    by_threads = {}
    for r in rows:
        by_threads.setdefault(r.get("threads"), []).append(r)
    for threads, rs in by_threads.items():
        print(f"\n{threads if threads else 'default'} threads")
        print("| target | met? | worst point | missed |")
        print("|---|---|---|---|")
        checks = []
        m1 = [r for r in rs if r["m"] == 1]
        bw = [(r, r["gbps"] / r["bandwidth_gbps"], 0.85 if layer_mb(r) >= 32 else 0.70) for r in m1]
        checks.append(("M = 1: >= 85% of bandwidth (>= 32 MB), 70% below", [(r, v / need, f"{100 * v:.0f}% of {r['bandwidth_gbps']:.0f} GB/s") for r, v, need in bw]))
        dense = [r for r in rs if r.get("speedup_vs_dense")]
        checks.append(("M = 2-32: >= 1.5x dense", [(r, r["speedup_vs_dense"] / 1.5, f"{r['speedup_vs_dense']:.2f}x") for r in dense if 2 <= r["m"] <= 32]))
        checks.append(("M >= 64: >= 0.9x dense", [(r, r["speedup_vs_dense"] / 0.9, f"{r['speedup_vs_dense']:.2f}x") for r in dense if r["m"] >= 64]))
        checks.append(("every M: >= 1.0x dense", [(r, r["speedup_vs_dense"], f"{r['speedup_vs_dense']:.2f}x") for r in dense]))
        for name, pts in checks:
            if not pts:
                print(f"| {name} | not measured | - | - |")
                continue
            worst = min(pts, key=lambda p: p[1])
            missed = sum(1 for p in pts if p[1] < 1.0)
            r = worst[0]
            print(f"| {name} | {'yes' if missed == 0 else 'no'} | {r['shape']} M={r['m']} {r['kernel']}: {worst[2]} | {missed} of {len(pts)} |")
        no_dense = sum(1 for r in rs if not r.get("speedup_vs_dense"))
        if no_dense:
            print(f"({no_dense} point(s) without a dense baseline)")
        kernels = {}
        for r in rs:
            kernels.setdefault(r["kernel"], set()).add(r["m"])
        print("kernels: " + "; ".join(f"{k} at M={','.join(map(str, sorted(v)))}" for k, v in kernels.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
