#!/usr/bin/env python3
"""End-to-end tests of the nibble command line (run by `meson test`).

Environment: NIBBLE_CLI (the binary), NIBBLE_CPU_PLUGIN_DIR, NIBBLE_TEST_PLUGIN_DIR.
"""
import json
import os
import subprocess
import sys

CLI = os.environ["NIBBLE_CLI"]
CPU_DIR = os.environ["NIBBLE_CPU_PLUGIN_DIR"]
TEST_DIR = os.environ["NIBBLE_TEST_PLUGIN_DIR"]
failures = []


def run(args, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("NIBBLE_") or k in ("NIBBLE_NUM_THREADS",)}
    e.update(env)
    return subprocess.run([CLI] + args, capture_output=True, text=True, env=e, timeout=600)


def check(cond, what, proc=None):
    if cond:
        print(f"ok: {what}")
    else:
        failures.append(what)
        print(f"FAIL: {what}")
        if proc is not None:
            print(f"  exit {proc.returncode}\n  stdout: {proc.stdout[-2000:]}\n  stderr: {proc.stderr[-2000:]}")


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
    check(cpu["capabilities"]["weight_types"] == ["uint4", "uint4b8"], "cpu_w4a16 declares its weight types")
skipped = {os.path.basename(s["path"]): s for s in doc["skipped"]}
for f in ["not_a_plugin.so", "garbage.so", "test_wrong_abi.so", "test_small_struct.so", "test_null_entry.so"]:
    check(f in skipped and skipped[f]["reason"], f"plugins --json names skipped {f} with a reason")
check("ABI version 99" in skipped.get("test_wrong_abi.so", {}).get("reason", ""), "wrong ABI reason names the version")

# Human-readable listing too.
p = run(["plugins"], NIBBLE_PLUGIN_PATH=f"{CPU_DIR}:{TEST_DIR}")
check(p.returncode == 0 and "cpu_w4a16" in p.stdout and "not_a_plugin.so" in p.stdout, "plugins (text) lists plugins and skipped files", p)

# A pin of a backend that does not exist fails and lists the backends that do.
p = run(["selftest"], NIBBLE_PLUGIN_PATH=CPU_DIR, NIBBLE_BACKEND="nope")
check(p.returncode != 0 and "backend 'nope'" in p.stderr and "cpu_w4a16" in p.stderr,
      "NIBBLE_BACKEND=nope fails listing the backends that exist", p)
p = run(["selftest", "--backend", "nope"], NIBBLE_PLUGIN_PATH=CPU_DIR)
check(p.returncode != 0 and "cpu_w4a16" in p.stderr, "--backend nope fails listing the backends that exist", p)

# The CPU backend passes the self test in every activation dtype.
for dt in ["f16", "bf16", "f32"]:
    p = run(["selftest", "--backend", "cpu_w4a16", "--dtype", dt], NIBBLE_PLUGIN_PATH=CPU_DIR)
    check(p.returncode == 0 and "all cases match" in p.stdout, f"selftest --dtype {dt} on cpu_w4a16", p)

# Relative plugin directories are never searched.
p = run(["plugins", "--json"], NIBBLE_PLUGIN_PATH="relative/dir:" + CPU_DIR)
check(p.returncode == 0 and any("relative/dir" in w for w in json.loads(p.stdout)["warnings"]),
      "a relative NIBBLE_PLUGIN_PATH entry is ignored with a warning", p)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
