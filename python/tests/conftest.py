"""Shared fixtures of the Python tests, run by `meson test --suite python` (which sets the paths
below and PYTHONPATH=<build>/python). Plugins come from the build tree only."""
import json
import os

import numpy as np
import pytest

import nibble
from nibble import safetensors


def _env(name):
    v = os.environ.get(name)
    if not v:
        raise RuntimeError(f"{name} is not set: run these tests through `meson test -C build --suite python`")
    return v


CPU_DIR = _env("NIBBLE_CPU_PLUGIN_DIR")
TEST_DIR = _env("NIBBLE_TEST_PLUGIN_DIR")
FIXTURES = _env("NIBBLE_FIXTURES")


def fixture_dirs():
    return sorted(d for d in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, d)))


def fixture(name):
    """(checkpoint dir, meta.json, reference tensors) of a fixture."""
    d = os.path.join(FIXTURES, name)
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    return d, meta, safetensors.load(os.path.join(d, "reference.safetensors"))


def within_tolerance(y, ref, mag, dtype):
    """nibble's tolerance rule (reference.h): |y - ref| <= eps_out |ref| + eps_acc mag + tiny.
    Returns (ok, worst error / tolerance)."""
    eps_out, eps_acc = {"f16": (2.0**-11, 2.0**-10), "bf16": (2.0**-8, 2.0**-8), "f32": (2.0**-24, 2.0**-20)}[dtype]
    tol = eps_out * np.abs(ref) + eps_acc * mag + 1e-30
    ratio = np.abs(np.asarray(y, dtype=np.float64) - ref) / tol
    return bool(np.all(ratio <= 1.0)), float(ratio.max())


@pytest.fixture(scope="session")
def cpu_registry():
    return nibble.Registry([CPU_DIR], use_default_dirs=False, use_env=False)


@pytest.fixture(scope="session")
def registry():
    """cpu_w4a16 and every in-tree test plugin (good ones, faulty ones)."""
    return nibble.Registry([CPU_DIR, TEST_DIR], use_default_dirs=False, use_env=False)


@pytest.fixture(scope="session")
def gptq_dir():
    return os.path.join(FIXTURES, "gptq_v1_sym_g128")
