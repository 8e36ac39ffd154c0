#!/usr/bin/env python3
"""Reads bench_kernels --sweep output and prints, per shape and M, the automatic choice's time and
kernel, the fastest forced kernel, and the fastest of each family (wgmma with either weight path).
usage: best.py sweep.txt"""
import re
import sys

auto = {}
rows = []
for line in open(sys.argv[1]):
    m = re.match(r"\s*(\d+)x(\d+)\s+(\d+)\s+[\d.]+\s+([\d.]+)\s+\d+%\s+([\d.]+|nan)\s+\S+\s+\S+\s+(\S+)", line)
    if m and "sweep" not in line:
        auto[(m[1] + "x" + m[2], int(m[3]))] = (float(m[4]), m[6], float(m[5]) if m[5] != "nan" else None)
        continue
    m = re.match(r"\s*sweep\s+(\d+x\d+)\s+M=(\d+)\s+(.*)", line)
    if m:
        times = {k: float(v) for k, v in re.findall(r"(\S+?)=([\d.]+)", m[3])}
        rows.append((m[1], int(m[2]), times))
print(f"{'shape':>11} {'M':>5} {'auto us':>8} {'kernel':>7} {'dense':>7} {'best':>14} {'best wg':>16} {'wg bulk/lsu':>12}")
for shape, mm, t in rows:
    a = auto.get((shape, mm), (float("nan"), "?", None))
    best = min(t, key=t.get)
    wg = {k: v for k, v in t.items() if k.startswith("wg")}
    bwg = min(wg, key=wg.get) if wg else "-"
    ratio = ""
    if wg:
        base = bwg.split("+")[0]
        if base in t and base + "+lsu" in t:
            ratio = f"{t[base + '+lsu'] / t[base]:.2f}"
    dense = f"{a[2]:.1f}" if a[2] else "-"
    print(f"{shape:>11} {mm:>5} {a[0]:>8.1f} {a[1]:>7} {dense:>7} {best + '=' + str(t[best]):>14} "
          f"{(bwg + '=' + str(wg[bwg])) if wg else '-':>16} {ratio:>12}")
