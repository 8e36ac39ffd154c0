#!/usr/bin/env python3
"""Markdown tables from `nibble bench --json` output (and, optionally, bench/torch_int4_peer.py's
JSON from the same call): a summary by M (ranges over the shapes) and every point. The docs'
tables (docs/benchmarks.md, docs/cuda.md) are made with it, so that they are the JSON, unedited.

    python3 bench/report.py docs/bench/cpu.json
    python3 bench/report.py docs/bench/cuda.json --torch docs/bench/torch.json
    python3 bench/report.py bench_f16.json --peers bench/peers_h200.json

--peers adds the peers' times of a JSON of {"columns": {key: title}, "points": [{shape, m, key:
µs}]} (bench/peers_h200.json: PERF.md's H200 Marlin and cuBLAS) as columns beside each point, and
nibble against the fastest of them; a peer measured on another device than the run's is marked so.
"""
import argparse
import json


def span(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def short_kernel(name):
    return name.split(" (")[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_json")
    ap.add_argument("--torch", help="bench/torch_int4_peer.py JSON of the same call")
    ap.add_argument("--peers", help="peers' times per shape and M (bench/peers_h200.json)")
    args = ap.parse_args()
    bench = json.load(open(args.bench_json))
    peers = json.load(open(args.peers)) if args.peers else None
    torch = {}
    if args.torch:
        for r in json.load(open(args.torch))["results"]:
            torch[(r["shape"], r["m"])] = r
    rows = bench["results"]
    for r in rows:
        t = torch.get((r["shape"], r["m"]))
        r["torch_us"] = t["torch_int4_us"] if t else None
        r["vs_torch"] = r["torch_us"] / r["time_us"] if t else None

    print(f"Command: `{bench['command']}`\n")
    if "host" in bench:
        h = bench["host"]
        print(f"Host: {h.get('cpu_model')}, {h.get('cpus_allowed')} CPUs, {h.get('numa_nodes')} NUMA node(s), "
              f"last-level cache {h.get('last_level_cache')}, {' '.join(h.get('isa', []))}.\n")
    for b in bench["backends"]:
        threads = f", {b['threads']} threads" if b.get("threads") else ""
        print(f"Ceilings of the run ({b['name']}{threads}, {b['device']}): bandwidth {b['bandwidth_gbps']:.1f} GB/s, "
              f"peak {b['peak_gflops']:.1f} GFLOP/s ({b['peak_from']}), {b['dtype']} activations, "
              f"G = {bench['group_size']}.\n")
    shape_bw = {r["shape"] + (f" ({r['threads']} threads)" if r.get("threads") else ""): r["bandwidth_gbps"]
                for r in rows if "bandwidth_gbps" in r}
    if shape_bw:
        print("Bandwidth ceiling per shape (the larger of two readings, just before and just after its points): "
              + ", ".join(f"{k} {v:.1f}" for k, v in shape_bw.items()) + " GB/s.\n")

    sweep = len({r.get("threads") for r in rows}) > 1
    head = ("| threads " if sweep else "") + "| M | % of roofline | GB/s | GFLOP/s | vs dense |" + (" vs torch int4 |" if torch else "")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for t, m in sorted({(r.get("threads") or 0, r["m"]) for r in rows}, key=lambda k: (-k[0], k[1])):
        at = [r for r in rows if r["m"] == m and (r.get("threads") or 0) == t]
        gb = '{:.0f}' if max(r['gbps'] for r in at) >= 100 else '{:.1f}'
        line = (f"| {t} " if sweep else "") + (f"| {m} | {span([r['pct_roofline'] for r in at], '{:.0f}')}% | {span([r['gbps'] for r in at], gb)} "
                f"| {span([r['gflops'] for r in at], '{:.0f}')} | {span([r['speedup_vs_dense'] for r in at], '{:.2f}')}x |")
        if torch:
            line += f" {span([r['vs_torch'] for r in at], '{:.1f}')}x |"
        print(line)
    print()

    head = "| K x N | M |" + (" threads |" if sweep else "") + " kernel | time µs | GB/s | % of roofline | dense µs | vs dense |"
    if torch:
        head += " torch int4 µs | vs torch int4 |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        dense = f"{r['dense_us']:.1f}" if r.get("dense_us") is not None else "-"
        vs = f"{r['speedup_vs_dense']:.2f}x" if r.get("speedup_vs_dense") is not None else "-"
        line = (f"| {r['shape']} | {r['m']} |" + (f" {r.get('threads')} |" if sweep else "") + f" {short_kernel(r['kernel'])} | {r['time_us']:.1f} | {r['gbps']:.1f} "
                f"| {r['pct_roofline']:.0f}% | {dense} | {vs} |")
        if torch:
            line += (f" {r['torch_us']:.1f} | {r['vs_torch']:.1f}x |" if r["torch_us"] is not None else " - | - |")
        print(line)


    if peers:
        peer_table(bench, peers)


def peer_table(bench, peers):
    """Each point beside the peers' times, and nibble's speed against the fastest of them."""
    cols = peers["columns"]
    at = {(p["shape"], p["m"]): p for p in peers["points"]}
    device = bench["backends"][0].get("device", "") if bench.get("backends") else ""
    other = peers.get("device") and peers["device"] not in device
    print(f"\nAgainst the peers ({peers['source']})"
          + (f". The peers ran on an {peers['device']}, this run on {device.split(',')[0]}: read their columns as"
             " the peers' H200 figures, not this card's." if other else ".") + "\n")
    head = ("| K x N | M | nibble µs | kernel | this run's dense µs | " + " | ".join(f"{t} µs" for t in cols.values())
            + " | fastest peer / nibble |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in bench["results"]:
        p = at.get((r["shape"], r["m"]))
        if not p:
            continue
        times = [p[k] for k in cols]
        dense = f"{r['dense_us']:.1f}" if r.get("dense_us") is not None else "-"
        print(f"| {r['shape']} | {r['m']} | {r['time_us']:.1f} | {short_kernel(r['kernel'])} | {dense} | "
              + " | ".join(f"{t:.0f}" for t in times) + f" | {min(times) / r['time_us']:.2f}x |")


if __name__ == "__main__":
    main()
