#!/usr/bin/env python3
"""Benchmark (not a test): `nibble explain` and `nibble run --iters 1` on checkpoints of many tiny
GPTQ layers (a mixture-of-experts model has tens of thousands of quantized linears), to show the
work is linear in the layer count. Usage: bench/many_layers.py NIBBLE_BINARY [COUNTS...]
(NIBBLE_PLUGIN_PATH must point at the plugins)."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import time


def write_model(d, n):
    q, s = b"\0" * 32, struct.pack("<8H", *([0x2000] * 8))
    hdr, off = {}, 0
    for i in range(n):
        p = f"model.layers.{i // 1000}.mlp.experts.{i % 1000}.up_proj."
        hdr[p + "qweight"] = {"dtype": "I32", "shape": [1, 8], "data_offsets": [off, off + 32]}
        hdr[p + "scales"] = {"dtype": "F16", "shape": [1, 8], "data_offsets": [off + 32, off + 48]}
        off += 48
    h = json.dumps(hdr).encode()
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + (q + s) * n)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1, "sym": True}}, f)


nibble = sys.argv[1]
counts = [int(c) for c in sys.argv[2:]] or [50000, 100000, 200000]
print(f"{'layers':>8} {'explain s':>10} {'run s':>8} {'us/layer':>9}")
for n in counts:
    with tempfile.TemporaryDirectory() as d:
        write_model(d, n)
        times = []
        for args in (["explain", "--model", d], ["run", "--model", d, "--iters", "1"]):
            t0 = time.time()
            subprocess.run([nibble] + args, stdout=subprocess.DEVNULL, check=True)
            times.append(time.time() - t0)
        print(f"{n:>8} {times[0]:>10.2f} {times[1]:>8.2f} {1e6 * max(times) / n:>9.1f}")
