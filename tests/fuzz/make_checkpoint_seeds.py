#!/usr/bin/env python3
"""Writes the seeds of fuzz_checkpoint (tests/fuzz/seeds/checkpoint/): tiny model directories of
every format and width, and one seed per class of hostile input the readers must refuse by name
(docs/reliability.md): deep nesting, special files, tensors that vanish or contradict the config.
Run it again after changing the seed format; the seeds are committed."""
import json
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "checkpoint")
SEP = b"\xff\xfe"
L = "model.layers.0.self_attn.q_proj"
rnd = random.Random(7)


def st(tensors, raw_header=None):
    hdr, blobs, off = {}, [], 0
    for name, (dt, shape, blob) in tensors.items():
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = (raw_header or json.dumps(hdr)).encode()
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def words(n):
    return bytes(rnd.getrandbits(8) for _ in range(4 * n))


def f16(n, v=0x2000):
    return struct.pack(f"<{n}H", *([v] * n))


def gptq(bits, k=64, n=32, g=32, sym=True, g_idx=True):
    groups = k // g
    t = {f"{L}.qweight": ("I32", [k * bits // 32, n], words(k * bits // 32 * n)),
         f"{L}.scales": ("F16", [groups, n], f16(groups * n))}
    zw = (n * bits + 31) // 32
    t[f"{L}.qzeros"] = ("I32", [groups, zw], words(groups * zw) if not sym else struct.pack("<I", 0x77777777) * (groups * zw))
    if g_idx:
        t[f"{L}.g_idx"] = ("I32", [k], struct.pack(f"<{k}i", *[i // g for i in range(k)]))
    t["lm_head.weight"] = ("F16", [8, 16], f16(128))
    return t


def cfg(q):
    return json.dumps({"torch_dtype": "float16", "quantization_config": q}).encode()


def gptq_cfg(bits, sym=True, **kw):
    return cfg(dict({"quant_method": "gptq", "bits": bits, "group_size": 32, "sym": sym, "desc_act": False,
                     "checkpoint_format": "gptq"}, **kw))


def seed(name, config, model, kinds=0):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([kinds]) + config + SEP + model)


os.makedirs(OUT, exist_ok=True)
for bits in (2, 3, 4, 8):
    seed(f"gptq_{bits}bit", gptq_cfg(bits), st(gptq(bits)))
    seed(f"gptq_{bits}bit_asym", gptq_cfg(bits, sym=False), st(gptq(bits, sym=False)))
seed("autoround_mixed", cfg({"quant_method": "auto-round", "packing_format": "auto_round:auto_gptq", "bits": 4,
                             "group_size": 32, "sym": True, "extra_config": {L: {"bits": 8}}}), st(gptq(8)))
awq = {f"{L}.qweight": ("I32", [64, 4], words(256)), f"{L}.qzeros": ("I32", [2, 4], words(8)),
       f"{L}.scales": ("F16", [2, 32], f16(64))}
seed("awq", cfg({"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"}), st(awq))
seed("awq_zero_point_false_over_zeros", cfg({"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": False}), st(awq))
ct = {f"{L}.weight_packed": ("I32", [32, 16], words(512)), f"{L}.weight_shape": ("I64", [2], struct.pack("<2q", 32, 64)),
      f"{L}.weight_scale": ("F16", [32, 2], f16(64))}
seed("ct_8bit", cfg({"quant_method": "compressed-tensors", "format": "pack-quantized",
                     "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "symmetric": True,
                                                                                "strategy": "group", "group_size": 32}}}}),
     st(ct))
# Class 1: deep nesting in a tensor's shape, in a config value, in a dynamic override.
t = gptq(4)
raw = json.dumps({k: {"dtype": v[0], "shape": v[1], "data_offsets": [0, 0]} for k, v in t.items()})
seed("deep_shape", gptq_cfg(4), st({}, raw_header=raw.replace("[64]", "[" * 3000 + "64" + "]" * 3000, 1)))
seed("deep_config", gptq_cfg(4).replace(b'"bits": 4', b'"bits": ' + b"[" * 3000 + b"4" + b"]" * 3000), st(gptq(4)))
seed("deep_dynamic", gptq_cfg(4, dynamic={"+:.*": {"bits": 4}}).replace(b'{"bits": 4}}', b'{"bits": ' + b"{\"a\":" * 2000 + b"1" + b"}" * 2000 + b"}}"), st(gptq(4)))
# Class 2: config.json / model.safetensors as a FIFO, a directory, /dev/zero.
for kinds, name in [(1, "config_fifo"), (2, "config_dir"), (3, "config_devzero"), (4, "model_fifo"), (8, "model_dir"), (12, "model_devzero")]:
    seed(name, gptq_cfg(4), st(gptq(4)), kinds)
# Class 6: a layer without qweight, tensors without a layer prefix, a stray tensor of another packing.
t = gptq(4, sym=False)
del t[f"{L}.qweight"]
seed("missing_qweight", gptq_cfg(4, sym=False), st(t))
t = gptq(4)
t["qweight"] = t[f"{L}.qweight"]
t[f"{L}.weight_scale"] = ("F16", [32, 2], f16(64))
seed("stray_tensors", gptq_cfg(4), st(t))
seed("sym_over_real_zeros", gptq_cfg(4), st(gptq(4, sym=False)))
# Class 7: headers explain must refuse as run does.
t = gptq(4)
t[f"{L}.scales"] = ("F8_E4M3", [2, 32], b"\0" * 64)
seed("f8_scales", gptq_cfg(4), st(t))
t = gptq(4)
t[f"{L}.qweight"] = ("I64", [8, 32], words(512))
seed("i64_qweight", gptq_cfg(4), st(t))
print(f"{len(os.listdir(OUT))} seeds in {OUT}")
