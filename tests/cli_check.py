"""Shared by the command-line tests (test_cli.py, test_hostile.py): running the nibble binary with
a clean environment, and recording checks."""
import os
import subprocess

CLI = os.environ["NIBBLE_CLI"]
failures = []


def clean_env(**env):
    """The environment without NIBBLE_* settings of the caller (NIBBLE_NUM_THREADS kept), plus env."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("NIBBLE_") or k == "NIBBLE_NUM_THREADS"}
    e.update(env)
    return e


def check(cond, what, proc=None):
    if cond:
        print(f"ok: {what}")
    else:
        failures.append(what)
        print(f"FAIL: {what}")
        if proc is not None:
            print(f"  exit {proc.returncode}\n  stdout: {str(proc.stdout)[-2000:]}\n  stderr: {str(proc.stderr)[-2000:]}")
