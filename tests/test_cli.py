#!/usr/bin/env python3
"""End-to-end tests of the nibble command line (run by `meson test`).

Environment: NIBBLE_CLI (the binary), NIBBLE_CPU_PLUGIN_DIR, NIBBLE_TEST_PLUGIN_DIR.
"""
import json
import os
import subprocess
import sys

from cli_check import CLI, check, clean_env, failures

CPU_DIR = os.environ["NIBBLE_CPU_PLUGIN_DIR"]
TEST_DIR = os.environ["NIBBLE_TEST_PLUGIN_DIR"]


def run(args, **env):
    return subprocess.run([CLI] + args, capture_output=True, text=True, env=clean_env(**env), timeout=600)


# `nibble plugins --json` lists cpu_w4a16 and names every skipped file with its reason.
p = run(["plugins", "--json"], NIBBLE_PLUGIN_PATH=f"{CPU_DIR}:{TEST_DIR}")
check(p.returncode == 0, "plugins --json exits 0", p)
doc = json.loads(p.stdout) if p.returncode == 0 else {"plugins": [], "skipped": []}
names = {x["name"]: x for x in doc["plugins"]}
check("cpu_w4a16" in names, "plugins --json lists cpu_w4a16", p)
if "cpu_w4a16" in names:
    cpu = names["cpu_w4a16"]
    check(cpu["abi_version"] == 1 and cpu["platform"] == "cpu", "cpu_w4a16 reports ABI 1 and platform cpu")
    check(cpu["probe"]["available"], "cpu_w4a16 probe is available")
    check(set(cpu["capabilities"]["group_sizes"]) == {32, 64, 128, 256, -1}, "cpu_w4a16 declares its group sizes")
    check(sorted(cpu["capabilities"]["weight_types"]) == sorted(["uint4", "uint4b8", "uint8", "uint8b128", "uint2", "uint2b2", "uint3", "uint3b4"]),
          "cpu_w4a16 declares its weight types", None)
    check(cpu["capabilities"]["bits"] == [2, 3, 4, 8], "cpu_w4a16 declares 2, 3, 4 and 8 bits")
skipped = {os.path.basename(s["path"]): s for s in doc["skipped"]}
for f in ["not_a_plugin.so", "garbage.so", "test_wrong_abi.so", "test_small_struct.so", "test_null_entry.so"]:
    check(f in skipped and skipped[f]["reason"], f"plugins --json names skipped {f} with a reason")
check("ABI version 99" in skipped.get("test_wrong_abi.so", {}).get("reason", ""), "wrong ABI reason names the version")

# Human-readable listing too.
p = run(["plugins"], NIBBLE_PLUGIN_PATH=f"{CPU_DIR}:{TEST_DIR}")
check(p.returncode == 0 and "cpu_w4a16" in p.stdout and "not_a_plugin.so" in p.stdout, "plugins (text) lists plugins and skipped files", p)

# A CPU knob that is set but not understood makes cpu_w4a16 unavailable, with the knob, the value
# and what it takes, rather than running another kernel than the one asked for.
for knob, value, expected in [("NIBBLE_CPU_ISA", "avx513", "amx, avx512bf16, avx512-amx, avx512, avx512vnni, avx512vnni-amx, avx2, avx2-dot or portable"),
                              ("NIBBLE_CPU_PATH", "dnnl", "fused or onednn"),
                              ("NIBBLE_CPU_GEMM_MIN_M", "32x", "an integer >= 1"),
                              ("NIBBLE_CPU_PREFETCH", "t1", "nta, t0 or none"),
                              ("NIBBLE_CPU_SPLIT_K", "yes", "0 (never split K) or 1"),
                              ("NIBBLE_CPU_GEMM_DECODED", "2", "0 (gemm-avx2 without decoded operands) or 1"),
                              ("NIBBLE_CPU_GEMM_PIECES", "0", "an integer >= 1 (pieces per member"),
                              ("NIBBLE_NUM_THREADS", "two", "an integer >= 0")]:
    p = run(["plugins", "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR, **{knob: value})
    probe = {x["name"]: x for x in json.loads(p.stdout)["plugins"]}.get("cpu_w4a16", {}).get("probe", {}) if p.returncode == 0 else {}
    check(probe.get("available") is False and f"{knob}='{value}': expected {expected}" in probe.get("message", ""),
          f"{knob}={value} makes cpu_w4a16 unavailable and says why", p)
p = run(["plugins", "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR, NIBBLE_CPU_ISA="portable", NIBBLE_CPU_GEMM_MIN_M="64",
        NIBBLE_CPU_PREFETCH="none")
probe = {x["name"]: x for x in json.loads(p.stdout)["plugins"]}.get("cpu_w4a16", {}).get("probe", {}) if p.returncode == 0 else {}
check(probe.get("available") is True and "portable kernels" in probe.get("message", "")
      and "prefetch: none (NIBBLE_CPU_PREFETCH)" in probe.get("message", ""), "valid CPU knobs are taken", p)

# A pin of a backend that does not exist fails and lists the backends that do.
p = run(["selftest"], NIBBLE_PLUGIN_PATH=CPU_DIR, NIBBLE_BACKEND="nope")
check(p.returncode != 0 and "backend 'nope'" in p.stderr and "cpu_w4a16" in p.stderr,
      "NIBBLE_BACKEND=nope fails listing the backends that exist", p)
p = run(["selftest", "--backend", "nope"], NIBBLE_PLUGIN_PATH=CPU_DIR)
check(p.returncode != 0 and "cpu_w4a16" in p.stderr, "--backend nope fails listing the backends that exist", p)
# A backend asked for by name that is missing because its directory was given relative says so,
# wherever it is asked for (a pin in selection, bench's --backend).
rel = os.path.relpath(CPU_DIR)
for args, what in [(["selftest"], "NIBBLE_BACKEND"), (["bench", "--backend", "cpu_w4a16", "--shapes", "256x256", "--m", "1"], "bench --backend")]:
    p = run(args, NIBBLE_PLUGIN_PATH=rel, **({"NIBBLE_BACKEND": "cpu_w4a16"} if what == "NIBBLE_BACKEND" else {}))
    check(p.returncode != 0 and f"NIBBLE_PLUGIN_PATH entry '{rel}' ignored" in p.stderr,
          f"{what}: a missing backend names the relative NIBBLE_PLUGIN_PATH entry that was ignored", p)

# The CPU backend passes the self test in every activation dtype.
for dt in ["f16", "bf16", "f32"]:
    p = run(["selftest", "--backend", "cpu_w4a16", "--dtype", dt], NIBBLE_PLUGIN_PATH=CPU_DIR)
    check(p.returncode == 0 and "all cases match" in p.stdout, f"selftest --dtype {dt} on cpu_w4a16", p)

# Relative plugin directories are never searched.
p = run(["plugins", "--json"], NIBBLE_PLUGIN_PATH="relative/dir:" + CPU_DIR)
check(p.returncode == 0 and any("relative/dir" in w for w in json.loads(p.stdout)["warnings"]),
      "a relative NIBBLE_PLUGIN_PATH entry is ignored with a warning", p)

# The build tree's executables and static libraries are not plugins: only shared objects are
# listed as skipped.
p = run(["plugins", "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR)
listed = [os.path.basename(s["path"]) for s in json.loads(p.stdout)["skipped"]] if p.returncode == 0 else ["?"]
check(p.returncode == 0 and not any(n == "test_cpu_layout" or n.endswith(".a") for n in listed),
      f"plugins lists no test executable or static library as skipped (listed: {listed})", p)

# Why no backend was found reaches explain and run, not only `nibble plugins`.
import shutil
import tempfile
MODEL = os.path.join(os.environ["NIBBLE_FIXTURES"], "gptq_v1_sym_g128")
for cmd in (["explain", "--model", MODEL], ["run", "--model", MODEL]):
    p = run(cmd, NIBBLE_PLUGIN_PATH="relative/plugins")
    check(p.returncode != 0 and "NIBBLE_PLUGIN_PATH entry 'relative/plugins' ignored" in p.stdout
          and "must be absolute" in p.stdout, f"{cmd[0]} with only a relative plugin dir says why nothing was found", p)
with tempfile.TemporaryDirectory() as tmp:
    open_dir = os.path.join(tmp, "open")
    os.mkdir(open_dir)
    shutil.copy(os.path.join(CPU_DIR, "cpu_w4a16.so"), open_dir)
    os.chmod(open_dir, 0o777)
    p = run(["explain", "--model", MODEL], NIBBLE_PLUGIN_PATH=open_dir)
    check(p.returncode != 0 and f"plugin directory {open_dir}: directory is world-writable" in p.stdout,
          "explain names a world-writable plugin directory it did not search", p)

# Every shipped fixture verifies through the CPU backend; a wrong reference is caught.
FIX = os.environ["NIBBLE_FIXTURES"]
for fx in sorted(os.listdir(FIX)):
    d = os.path.join(FIX, fx)
    if not os.path.isdir(d):
        continue
    p = run(["verify", "--model", d, "--reference", os.path.join(d, "reference.safetensors"), "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR)
    ok = p.returncode == 0 and all(l["ok"] and l["codes_mismatched"] == 0 for l in json.loads(p.stdout)["layers"])
    check(ok, f"verify {fx}", p)
    # What explain decides is what run does, layer by layer (one spec per layer).
    e = run(["explain", "--model", d, "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR)
    r = run(["run", "--model", d, "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR)
    said = {l["name"]: (l["status"], l.get("selection", {}).get("winner")) for l in json.loads(e.stdout)["layers"]} if e.returncode == 0 else {}
    did = {l["name"]: (l["status"], l.get("backend")) for l in json.loads(r.stdout)["layers"]} if r.returncode == 0 else None
    check(said and said == did and any(w for _, w in said.values()), f"explain and run agree on every layer of {fx}", r)
# Every fixture through every kernel form of cpu_w4a16 that this CPU runs, forced: each family's
# one-tile form (NIBBLE_CPU_GEMM_MIN_M=64: the fixtures' x has 5 rows) and its GEMM form
# (NIBBLE_CPU_GEMM_MIN_M=1). A family this CPU lacks is said so by the probe's plan for 16-bit
# activations ("not taken", before the f32 plan's part) and skipped with the reason.
FAMILIES = {"avx512bf16": ("fused-avx512bf16", "gemm-avx512bf16"), "avx512": ("fused-avx512", None),
            "avx512vnni": ("dot-avx512vnni", None), "amx": ("fused-avx512bf16", "gemm-amx"),
            "avx2": ("fused-avx2", "gemm-avx2"), "avx2-dot": ("dot-avx2", "gemm-avx2"), "portable": ("fused-portable", None)}
for isa, (one_tile, gemm) in FAMILIES.items():
    p = run(["plugins", "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR, NIBBLE_CPU_ISA=isa)
    probe = {x["name"]: x for x in json.loads(p.stdout)["plugins"]}.get("cpu_w4a16", {}).get("probe", {}) if p.returncode == 0 else {}
    plan16 = probe.get("message", "").split("; f32 activations")[0]
    if not probe or f"NIBBLE_CPU_ISA={isa} not taken" in plan16:
        print(f"skip: fixtures with NIBBLE_CPU_ISA={isa}: {plan16.split('not taken: ')[-1].split(';')[0] if probe else p.stderr}")
        continue
    for form, knobs in [(one_tile, {"NIBBLE_CPU_GEMM_MIN_M": "64"}), (gemm, {"NIBBLE_CPU_GEMM_MIN_M": "1"})]:
        if form is None:
            continue
        bad = []
        for fx in sorted(d for d in os.listdir(FIX) if os.path.isdir(os.path.join(FIX, d))):
            d = os.path.join(FIX, fx)
            p = run(["verify", "--model", d, "--reference", os.path.join(d, "reference.safetensors"), "--json"],
                    NIBBLE_PLUGIN_PATH=CPU_DIR, NIBBLE_CPU_ISA=isa, **knobs)
            layers = json.loads(p.stdout)["layers"] if p.stdout.startswith("{") else []
            if p.returncode != 0 or not layers or not all(l["ok"] and l.get("kernel", "").startswith(form) for l in layers):
                bad.append(f"{fx}: {[(l.get('kernel'), l['ok'], l.get('error', '')) for l in layers] or p.stderr.strip()}")
        check(not bad, f"every fixture verifies with {form} forced (NIBBLE_CPU_ISA={isa})" + ("".join("\n  " + b for b in bad)))
p = run(["verify", "--model", os.path.join(FIX, "gptq_v1_sym_g128"), "--reference",
         os.path.join(FIX, "ct_pack_sym_g128", "reference.safetensors")], NIBBLE_PLUGIN_PATH=CPU_DIR)
check(p.returncode != 0 and "MISMATCH" in p.stdout, "verify against another model's reference fails", p)

# quantize -> explain -> run --check on a generated model, in two formats.
import tempfile
with tempfile.TemporaryDirectory() as tmp:
    for fmt, extra in [("gptq", ["--act-order"]), ("compressed-tensors", ["--asym", "--group", "32"])]:
        out = os.path.join(tmp, fmt)
        p = run(["quantize", "--preset", "tiny", "--blocks", "1", "--format", fmt, "--out", out] + extra)
        check(p.returncode == 0 and os.path.exists(os.path.join(out, "config.json")), f"quantize tiny {fmt}", p)
        p = run(["explain", "--model", out, "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR)
        doc = json.loads(p.stdout) if p.returncode == 0 else {"layers": []}
        q = [l for l in doc["layers"] if l["status"] == "quantized"]
        check(len(q) == 7 and all(l["selection"]["winner"] == "cpu_w4a16" for l in q), f"explain {fmt} selects cpu_w4a16 for 7 layers", p)
        check(any(l["name"] == "lm_head" and l["status"] == "unquantized" for l in doc["layers"]), f"explain {fmt} reports lm_head unquantized")
        p = run(["run", "--model", out, "--batch", "4", "--check", "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR)
        doc = json.loads(p.stdout) if p.returncode == 0 else {"layers": []}
        ran = [l for l in doc["layers"] if l.get("check")]
        check(p.returncode == 0 and len(ran) == 7, f"run --check {fmt}: 7 layers match the reference", p)
    # Every width in every format that writes it: quantize, then explain reads that width per
    # layer and run --check matches the reference; AWQ refuses other widths than 4, naming them.
    widths = {"gptq": [2, 3, 8], "gptq_v2": [2, 3, 8], "autoround": [2, 3, 8], "autoround-gptqmodel": [2, 3, 8],
              "compressed-tensors": [8], "autoround-awq": [], "awq": []}
    for fmt, bits_list in widths.items():
        for bits in bits_list:
            out = os.path.join(tmp, f"{fmt}_{bits}")
            p = run(["quantize", "--preset", "tiny", "--blocks", "1", "--format", fmt, "--bits", str(bits), "--asym",
                     "--group", "64", "--out", out])
            check(p.returncode == 0, f"quantize tiny {fmt} --bits {bits}", p)
            p = run(["explain", "--model", out, "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR)
            doc = json.loads(p.stdout) if p.returncode == 0 else {"layers": []}
            q = [l for l in doc["layers"] if l["status"] == "quantized"]
            check(len(q) == 7 and all(l["bits"] == bits and l["spec_fields"]["bits"] == bits for l in q),
                  f"explain {fmt} --bits {bits}: 7 layers of {bits} bits", p)
            p = run(["run", "--model", out, "--batch", "3", "--check", "--json"], NIBBLE_PLUGIN_PATH=CPU_DIR)
            doc = json.loads(p.stdout) if p.returncode == 0 else {"layers": []}
            check(p.returncode == 0 and len([l for l in doc["layers"] if l.get("check")]) == 7,
                  f"run --check {fmt} --bits {bits}: 7 layers match the reference", p)
            p = run(["lint", "--model", out, "--json"])
            doc = json.loads(p.stdout) if p.returncode == 0 else {}
            check(p.returncode == 0 and doc.get("count") == 0 and doc.get("layers_checked") == 7,
                  f"lint {fmt} --bits {bits}: 7 layers, no finding", p)
    for fmt in ["awq", "autoround-awq"]:
        p = run(["quantize", "--preset", "tiny", "--blocks", "1", "--format", fmt, "--bits", "8", "--out",
                 os.path.join(tmp, f"{fmt}_8")])
        check(p.returncode != 0 and f"--bits 8: format {fmt} is written at 4 bits" in p.stderr,
              f"quantize {fmt} --bits 8 is refused, naming the widths", p)

    # lint (and verify without a reference) on a damaged checkpoint: the gptq v1 model's symmetric
    # zero points rewritten in the v2 convention (GPTQModel v5's mislabelled files).
    import shutil
    bad = os.path.join(tmp, "v2_zeros_labelled_v1")
    shutil.copytree(os.path.join(tmp, "gptq"), bad)
    st = os.path.join(bad, "model.safetensors")
    raw = bytearray(open(st, "rb").read())
    hlen = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + hlen])
    name = "model.layers.0.mlp.down_proj.qzeros"
    b0, b1 = header[name]["data_offsets"]
    raw[8 + hlen + b0:8 + hlen + b1] = b"\x88" * (b1 - b0)
    open(st, "wb").write(raw)
    for cmd in (["lint"], ["verify"]):
        p = run(cmd + ["--model", bad, "--json"])
        doc = json.loads(p.stdout) if p.stdout.startswith("{") else {"findings": []}
        hits = [f for f in doc["findings"] if f["tensor"] == name and "labelled v1" in f["what"]]
        check(p.returncode == 1 and len(hits) == 1 and hits[0]["layer"] == "model.layers.0.mlp.down_proj",
              f"{cmd[0]} --model alone finds v2 zero points labelled v1, naming the layer and tensor", p)
    p = run(["lint", "--model", bad])
    check(p.returncode == 1 and f"[{name}]" in p.stdout and "finding(s)" in p.stdout, "lint (text) names the tensor", p)
    p = run(["lint", "--model", os.path.join(tmp, "gptq")])
    check(p.returncode == 0 and "0 finding(s)" in p.stdout, "lint of the undamaged model: no finding", p)

    # A pin that cannot run the model fails with the trace, layer by layer.
    p = run(["run", "--model", os.path.join(tmp, "gptq")], NIBBLE_PLUGIN_PATH=f"{CPU_DIR}:{TEST_DIR}", NIBBLE_BACKEND="test_no_device")
    check(p.returncode != 0 and "no test device present" in p.stdout, "run with a pinned backend without device explains why", p)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
