#!/usr/bin/env python3
"""Hostile inputs through the nibble command line, one section per class of fault
(docs/reliability.md): each must end in a clear error (exit 1 or 2, a message naming what is
wrong), never a crash, a hang, unbounded memory, or a silent pass.

Environment: NIBBLE_CLI, NIBBLE_CPU_PLUGIN_DIR, NIBBLE_FIXTURES.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

from cli_check import CLI, check, clean_env, failures

CPU_DIR = os.environ["NIBBLE_CPU_PLUGIN_DIR"]
FIX = os.environ["NIBBLE_FIXTURES"]
LAYER = "model.layers.0.self_attn.q_proj"


def run(args, timeout=60, **env):
    try:
        return subprocess.run([CLI] + args, capture_output=True, text=True, errors="replace",
                              env=clean_env(NIBBLE_PLUGIN_PATH=CPU_DIR, **env), timeout=timeout)
    except subprocess.TimeoutExpired as t:
        class Hung:
            returncode = "timeout"
            stdout = t.stdout or ""
            stderr = f"(killed after {timeout} s)"
        return Hung()


def refused(p, *needles):
    """Exit 1 or 2 (not a signal, not 0), with every needle in the output."""
    text = str(p.stdout) + str(p.stderr)
    return p.returncode in (1, 2) and all(n in text for n in needles)


# --- safetensors and fixtures as data -------------------------------------------------------------
def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    tensors = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}
    return tensors, meta


def write_st(path, tensors, raw_header=None):
    header, blobs, off = {}, [], 0
    for name, (dt, shape, blob) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = (raw_header if raw_header is not None else json.dumps(header)).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def fixture_copy(tmp, fx, name, change=None, config=None):
    """A copy of fixture `fx` in tmp/name, its tensors passed through change(dict), its config replaced."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    tensors, _ = read_st(os.path.join(FIX, fx, "model.safetensors"))
    if change:
        change(tensors)
    write_st(os.path.join(d, "model.safetensors"), tensors)
    if config is None:
        shutil.copy(os.path.join(FIX, fx, "config.json"), d)
    else:
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(config if isinstance(config, str) else json.dumps(config))
    return d


def fixture_config(fx):
    with open(os.path.join(FIX, fx, "config.json")) as f:
        return json.load(f)


def nested(depth, leaf="4"):
    return "[" * depth + leaf + "]" * depth


with tempfile.TemporaryDirectory() as tmp:
    # 1. Deep nesting: bounded at parse, never printed whole.
    d = fixture_copy(tmp, "gptq_v1_sym_g128", "deep_shape")
    tensors, _ = read_st(os.path.join(d, "model.safetensors"))
    hdr = {}
    off = 0
    for k, (dt, shape, blob) in tensors.items():
        hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(blob)]}
        off += len(blob)
    first = next(iter(hdr))
    raw = json.dumps(hdr).replace(json.dumps(hdr[first]["shape"]), nested(70000), 1)
    check(nested(70000) in raw, "(the deep shape was written)")
    write_st(os.path.join(d, "model.safetensors"), tensors, raw_header=raw)
    p = run(["explain", "--model", d])
    check(refused(p, "nested deeper than"), "a safetensors shape nested 70000 deep is refused", p)
    cfg = json.dumps(fixture_config("gptq_v1_sym_g128")).replace('"bits": 4', '"bits": ' + nested(70000))
    d = fixture_copy(tmp, "gptq_v1_sym_g128", "deep_bits", config=cfg)
    p = run(["explain", "--model", d])
    check(refused(p, "config.json", "nested deeper than"), "quantization_config.bits nested 70000 deep is refused", p)
    cfg = fixture_config("autoround_mixed_4_8bit")
    raw = json.dumps(cfg).replace('{"bits": 8}', '{"bits": ' + nested(50000) + "}")
    d = fixture_copy(tmp, "autoround_mixed_4_8bit", "deep_extra", config=raw)
    p = run(["explain", "--model", d])
    check(refused(p, "nested deeper than"), "an extra_config value nested 50000 deep is refused", p)
    d = fixture_copy(tmp, "gptq_v1_sym_g128", "deep_index")
    os.rename(os.path.join(d, "model.safetensors"), os.path.join(d, "model-00001-of-00001.safetensors"))
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        f.write('{"weight_map": {"a": ' + nested(70000, '"x"') + "}}")
    p = run(["explain", "--model", d])
    check(refused(p, "nested deeper than"), "an index.json nested 70000 deep is refused", p)
    pol = os.path.join(tmp, "deep.toml")
    with open(pol, "w") as f:
        f.write("prefer = " + nested(70000, '"cpu_w4a16"') + "\n")
    p = run(["explain", "--model", os.path.join(FIX, "gptq_v1_sym_g128"), "--config", pol])
    check(refused(p, "policy"), "a policy nested 70000 deep is refused", p)

    # 2. Special files: refused by kind, without blocking or reading them whole.
    for role in ["model.safetensors", "config.json"]:
        d = fixture_copy(tmp, "gptq_v1_sym_g128", "fifo_" + role.replace(".", "_"))
        os.remove(os.path.join(d, role))
        os.mkfifo(os.path.join(d, role))
        p = run(["explain", "--model", d], timeout=20)
        check(refused(p, "FIFO"), f"{role} as a FIFO is refused without waiting", p)
    fifo = os.path.join(tmp, "policy.fifo")
    os.mkfifo(fifo)
    for cfg, what in [(fifo, "FIFO"), ("/dev/zero", "character device"), (tmp, "directory")]:
        p = run(["explain", "--model", os.path.join(FIX, "gptq_v1_sym_g128"), "--config", cfg], timeout=20)
        check(refused(p, what), f"--config {what} is refused", p)
        p = run(["explain", "--model", os.path.join(FIX, "gptq_v1_sym_g128")], timeout=20, NIBBLE_CONFIG=cfg)
        check(refused(p, what), f"NIBBLE_CONFIG naming a {what} is refused", p)
    p = run(["verify", "--model", os.path.join(FIX, "gptq_v1_sym_g128"), "--reference", fifo], timeout=20)
    check(refused(p, "FIFO"), "a FIFO as --reference is refused", p)
    d = fixture_copy(tmp, "gptq_v1_sym_g128", "huge_config")
    with open(os.path.join(d, "config.json"), "r+b") as f:
        f.truncate(1 << 30)  # sparse: costs no disk
    t0 = time.time()
    p = run(["explain", "--model", d], timeout=30)
    check(refused(p, "more than the limit") and time.time() - t0 < 10, "a 1 GiB config.json is refused before it is read", p)

    # 4. verify checks what it says it checked.
    g = os.path.join(FIX, "gptq_v1_sym_g128")
    p = run(["verify", "--model", g, "--reference", os.path.join(g, "reference.safetensors"), "--layer", "*down_proj", "--json"])
    doc = json.loads(p.stdout) if p.returncode == 0 else {"layers": []}
    check(p.returncode == 0 and [l["name"] for l in doc["layers"]] == ["model.layers.0.mlp.down_proj"], "verify --layer checks only that layer", p)
    p = run(["verify", "--model", g, "--reference", os.path.join(g, "reference.safetensors"), "--layer", "re:(["])
    check(refused(p, "--layer", "re:(["), "verify --layer with a broken pattern names the option", p)
    p = run(["verify", "--model", g, "--reference", os.path.join(g, "reference.safetensors"), "--layer", "*nothing*"])
    check(refused(p, "matches no layer"), "verify --layer matching nothing fails", p)
    ref, meta = read_st(os.path.join(g, "reference.safetensors"))
    partial = {k: v for k, v in ref.items() if not k.startswith("model.layers.0.mlp.down_proj")}
    write_st(os.path.join(tmp, "partial.safetensors"), partial)
    p = run(["verify", "--model", g, "--reference", os.path.join(tmp, "partial.safetensors")])
    check(refused(p, "no reference tensors", "1 of 2 layer(s) FAILED"), "verify fails a quantized layer the reference leaves out", p)
    for bad in [b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f"]:  # NaN, +Inf (f32)
        dt, shape, blob = ref[LAYER + ".weight"]
        poisoned = dict(ref)
        poisoned[LAYER + ".weight"] = (dt, shape, bad + blob[4:])
        write_st(os.path.join(tmp, "poisoned.safetensors"), poisoned)
        p = run(["verify", "--model", g, "--reference", os.path.join(tmp, "poisoned.safetensors")])
        check(refused(p, "the reference holds"), f"verify refuses a non-finite reference weight ({bad.hex()})", p)

    # 5. Outputs that cannot be written, inputs that mean nothing.
    p = run(["bench", "--backend", "cpu_w4a16", "--shapes", "256x256", "--m", "1", "--json", os.path.join(tmp, "missing", "x.json")])
    check(refused(p, "--json", "does not exist"), "bench --json into a missing directory fails before timing", p)
    p = run(["bench", "--backend", "cpu_w4a16", "--shapes", "256x256", "--m", "1", "--svg", tmp])
    check(refused(p, "--svg", "is a directory"), "bench --svg onto a directory fails", p)
    # --from-json: a saved run redrawn without measuring; anything else is refused by name.
    saved = os.path.join(tmp, "saved.json")
    p = run(["bench", "--backend", "cpu_w4a16", "--shapes", "256x256,512x128", "--m", "1,4", "--no-dense", "--json", saved])
    check(p.returncode == 0 and os.path.exists(saved), "bench --json writes a run", p)
    p = run(["bench", "--from-json", saved, "--svg", os.path.join(tmp, "replot.svg")])
    svg = open(os.path.join(tmp, "replot.svg")).read() if p.returncode == 0 else ""
    check(p.returncode == 0 and svg.count("<polyline") == 2 and "256x256" in svg and "512x128" in svg and "(bf16" in svg,
          "bench --from-json redraws a saved run: one panel per shape, its dtype in the title", p)
    p = run(["bench", "--from-json", saved])
    check(refused(p, "--from-json: give --svg"), "bench --from-json without --svg is refused", p)
    for content, needle in [("{", "not valid JSON"), ('{"results": 3}', "no 'results' list"), ('{"results": []}', "no results"),
                            ('{"results": [{"backend": "b", "shape": "s", "m": 1, "time_us": -1, "roofline_us": 1}]}', "not positive"),
                            ('{"results": [{"backend": "b", "shape": "s", "m": "1", "time_us": 1, "roofline_us": 1}]}', "'m' is not a number"),
                            ('{"bits": "4", "results": [{"backend": "b", "shape": "s", "m": 1, "time_us": 1, "roofline_us": 1}]}', "not an integer")]:
        with open(os.path.join(tmp, "bad.json"), "w") as f:
            f.write(content)
        p = run(["bench", "--from-json", os.path.join(tmp, "bad.json"), "--svg", os.path.join(tmp, "bad.svg")])
        check(refused(p, needle) and not os.path.exists(os.path.join(tmp, "bad.svg")), f"bench --from-json refuses {content[:30]!r}", p)
    p = run(["bench", "--from-json", os.path.join(tmp, "none.json"), "--svg", os.path.join(tmp, "bad.svg")])
    check(refused(p, "none.json"), "bench --from-json names a missing file", p)
    for special in ["/dev/zero", tmp]:
        p = run(["bench", "--from-json", special, "--svg", os.path.join(tmp, "bad.svg")])
        check(refused(p, special, "expected a regular file"), f"bench --from-json refuses {special} (not a regular file)", p)
    p = run(["bench", "--backend", "cpu_w4a16", "--shapes", "llama9"])
    check(refused(p, "unknown preset 'llama9'") and "llama9-fused" not in p.stderr, "an unknown preset is named as typed", p)
    for args in [["bench", "--iters", "0"], ["bench", "--budget", "-1"], ["bench", "--rotate-mb", "0"], ["bench", "--g", "0"],
                 ["bench", "--bits", "5"], ["run", "--model", g, "--batch", "0"], ["run", "--model", g, "--iters", "-3"],
                 ["quantize", "--preset", "tiny", "--out", os.path.join(tmp, "q0"), "--group", "0"],
                 ["quantize", "--preset", "tiny", "--out", os.path.join(tmp, "q1"), "--blocks", "0"],
                 ["quantize", "--preset", "tiny", "--out", os.path.join(tmp, "q2"), "--shard-mb", "-1"],
                 ["quantize", "--preset", "tiny", "--out", os.path.join(tmp, "q3"), "--bits", "16"]]:
        p = run(args)
        check(p.returncode not in (0, "timeout") and isinstance(p.returncode, int) and p.returncode > 0, f"{' '.join(args[:1] + args[-2:])} is refused", p)
    for key, value, needle in [("group_size", 0, "expected -1 (per channel) or a positive group size, found 0"),
                               ("group_size", -2, "found -2")]:
        cfg = fixture_config("gptq_v1_sym_g128")
        cfg["quantization_config"][key] = value
        d = fixture_copy(tmp, "gptq_v1_sym_g128", f"cfg_{key}_{value}", config=cfg)
        p = run(["explain", "--model", d])
        check(refused(p, needle), f"quantization_config.{key} = {value} is refused", p)
    cfg = fixture_config("autoround_mixed_4_8bit")
    cfg["quantization_config"]["extra_config"] = {"model.layers.(": {"bits": 8}}
    d = fixture_copy(tmp, "autoround_mixed_4_8bit", "bad_extra_regex", config=cfg)
    p = run(["explain", "--model", d])
    check(refused(p, 'extra_config["model.layers.("]', "invalid regular expression"), "a bad extra_config regex is an error naming the key", p)
    cfg = fixture_config("gptq_v1_sym_g128")
    cfg["quantization_config"]["dynamic"] = {"-:.*mlp[": {}}
    d = fixture_copy(tmp, "gptq_v1_sym_g128", "bad_dynamic_regex", config=cfg)
    p = run(["explain", "--model", d])
    check(refused(p, 'dynamic["-:.*mlp["]', "invalid regular expression"), "a bad dynamic regex is an error naming the key", p)

    # 6. Tensors that vanish: named, never dropped in silence.
    d = fixture_copy(tmp, "gptq_v1_asym_g64", "no_qweight", change=lambda t: t.pop(LAYER + ".qweight"))
    p = run(["explain", "--model", d, "--json"])
    doc = json.loads(p.stdout) if p.stdout.startswith("{") else {"layers": []}
    lay = [l for l in doc["layers"] if l["name"] == LAYER]
    check(lay and lay[0]["status"] == "unsupported" and "qzeros" in lay[0]["reason"] and "scales" in lay[0]["reason"]
          and "missing" in lay[0]["reason"], "a layer without qweight is reported with its scales and qzeros", p)
    p = run(["run", "--model", d])
    check(refused(p, LAYER), "run fails on a layer without qweight", p)
    d = fixture_copy(tmp, "gptq_v1_sym_g128", "no_prefix", change=lambda t: t.update({"qweight": t[LAYER + ".qweight"]}))
    p = run(["explain", "--model", d, "--json"])
    doc = json.loads(p.stdout) if p.stdout.startswith("{") else {}
    check(any("'qweight' has no layer prefix" in w for w in doc.get("warnings", [])), "a tensor without a layer prefix is warned about", p)
    cfg = fixture_config("awq_gemm_g128")
    cfg["quantization_config"]["zero_point"] = False
    d = fixture_copy(tmp, "awq_gemm_g128", "awq_false_zero", config=cfg)
    p = run(["run", "--model", d])
    check(refused(p, "zero_point: false", "real zero points"), "AWQ zero_point: false over real zero points is an error", p)
    cfg = fixture_config("gptq_v1_asym_g64")
    cfg["quantization_config"]["sym"] = True
    d = fixture_copy(tmp, "gptq_v1_asym_g64", "gptq_sym_real_zero", config=cfg)
    p = run(["run", "--model", d])
    check(refused(p, "the config says sym", "real zero points"), "GPTQ sym over real zero points is an error", p)

    # 7. explain and run agree: what explain cannot load it does not select.
    def retype(name, dtype, bytes_per):
        def f(t):
            dt, shape, blob = t[name]
            n = 1
            for d_ in shape:
                n *= d_
            t[name] = (dtype, shape, (blob * 2)[: n * bytes_per])
        return f
    for what, fx, change in [("F8 scales", "gptq_v1_sym_g128", retype(LAYER + ".scales", "F8_E4M3", 1)),
                             ("I64 qweight", "gptq_v1_sym_g128", retype(LAYER + ".qweight", "I64", 8)),
                             ("scales of another shape", "gptq_v1_sym_g128",
                              lambda t: t.update({LAYER + ".scales": ("F16", [2, t[LAYER + ".scales"][1][1]],
                                                                      t[LAYER + ".scales"][2][: 2 * 2 * t[LAYER + ".scales"][1][1]])}))]:
        d = fixture_copy(tmp, fx, "agree_" + what.replace(" ", "_"), change=change)
        p = run(["explain", "--model", d, "--json"])
        doc = json.loads(p.stdout) if p.stdout.startswith("{") else {"layers": []}
        lay = [l for l in doc["layers"] if l["name"] == LAYER]
        selected = lay and lay[0].get("selection", {}).get("winner")
        check(lay and lay[0]["status"] == "unsupported" and not selected, f"explain does not select a backend for {what}", p)
        q = run(["run", "--model", d, "--json"])
        rdoc = json.loads(q.stdout) if q.stdout.startswith("{") else {"layers": []}
        rl = [l for l in rdoc["layers"] if l["name"] == LAYER]
        check(q.returncode == 1 and rl and rl[0]["status"] == "unsupported" and rl[0]["reason"] == lay[0]["reason"],
              f"run reports {what} with explain's reason", q)

    # 9. Names: a control character in a tensor name cannot forge output.
    d = fixture_copy(tmp, "gptq_v1_sym_g128", "ctrl_name",
                     change=lambda t: t.update({"model.layers.0.evil\x1b[2J\nFAKE.weight": t["lm_head.weight"]}))
    p = run(["explain", "--model", d])
    check(refused(p, "control character") and "\x1b" not in p.stdout + p.stderr, "a control character in a tensor name is refused, escaped", p)
    p = run(["explain", "--model", os.path.join(FIX, "gptq_v1_sym_g128"), "--layer", "re:(("])
    check(refused(p, "--layer 're:(('"), "a broken --layer pattern names the option", p)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
