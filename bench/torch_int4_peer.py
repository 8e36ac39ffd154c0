#!/usr/bin/env python3
"""Times PyTorch's int4 kernel (tinygemm, torch.ops.aten._weight_int4pack_mm) and torch's fp16
matmul (cuBLAS) on the shapes and M values of PERF.md, the way `nibble bench` times nibble: median
of CUDA-event timings of one rotation of weight copies totalling >= 256 MiB (so weights never sit in
the 60 MB L2), per call. Run on the GPU machine in the same call as `nibble bench`.

    python3 bench/torch_int4_peer.py --json out.json [--shapes 4096x28672,...] [--m 1,16,256]
"""
import argparse
import json
import statistics

import torch

PERF_SHAPES = "4096x6144,4096x4096,4096x28672,14336x4096,8192x10240,8192x8192,8192x57344,28672x8192"


def timed(fn, copies, reps=15):
    fn(0)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(copies):
            fn(i)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / copies)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=PERF_SHAPES)
    ap.add_argument("--m", default="1,2,4,8,16,32,64,128,256,1024,4096")
    ap.add_argument("--g", type=int, default=128)
    ap.add_argument("--rotate-mb", type=float, default=256)
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    results = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'shape':>12} {'M':>5} {'int4 us':>10} {'fp16 us':>10}")
    for shape in a.shapes.split(","):
        k, n = map(int, shape.split("x"))
        wbytes = k * n // 2
        copies = max(1, min(32, int(a.rotate_mb * 2**20 // wbytes) + 1))
        packed, sz = [], []
        for _ in range(copies):
            w = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=dev)
            packed.append(torch.ops.aten._convert_weight_to_int4pack(w, 8))
            s = torch.rand(k // a.g, n, 2, device=dev, dtype=torch.bfloat16) * 0.01
            sz.append(s)
        dcopies = max(1, min(16, int(a.rotate_mb * 2**20 // (2 * k * n)) + 1))
        dense = [torch.randn(k, n, device=dev, dtype=torch.float16) * 0.02 for _ in range(dcopies)]
        for m in map(int, a.m.split(",")):
            xb = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            xh = xb.to(torch.float16)
            t_int4 = timed(lambda i: torch.ops.aten._weight_int4pack_mm(xb, packed[i % copies], a.g, sz[i % copies]), copies)
            t_fp16 = timed(lambda i: torch.matmul(xh, dense[i % dcopies]), dcopies)
            print(f"{shape:>12} {m:>5} {t_int4:>10.1f} {t_fp16:>10.1f}", flush=True)
            results.append({"shape": shape, "k": k, "n": n, "m": m, "torch_int4_us": t_int4, "torch_fp16_us": t_fp16})
        del packed, sz, dense
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "group_size": a.g,
                       "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
