"""Every layer of every fixture (packed by the real tools, at 2, 3, 4 and 8 bits and mixed) through
Python on cpu_w4a16, with numpy arrays and PyTorch CPU tensors, against the tool's reference
outputs; and nibble's reference dequantization against the tool's own.

nibble reads every width the fixtures have and cpu_w4a16 runs all of them, so a layer that is not
quantized at its meta.json `bits`, or that the CPU backend refuses, fails: nothing is excused."""
import numpy as np
import pytest
import torch

import nibble
from conftest import fixture, fixture_dirs, within_tolerance


def _cases():
    out = []
    for fx in fixture_dirs():
        _, meta, _ = fixture(fx)
        for layer in meta["layers"]:
            out.append(pytest.param(fx, layer["name"], layer.get("bits", meta.get("bits", 4)),
                                    id=f"{fx}/{layer['name']}"))
    return out


CASES = _cases()


def _checked_layer(ck, fx, layer, bits):
    """The layer's entry, which must be quantized at the width meta.json gives."""
    entry = ck.layer(layer)
    assert entry.status == "quantized", f"{fx}: the {bits}-bit layer {layer} is {entry.status}: {entry.reason}"
    assert entry.bits == bits, f"{fx}: {layer}: nibble reads {entry.bits} bits, meta.json says {bits}"
    return entry


def test_every_fixture_is_covered():
    assert len(fixture_dirs()) >= 19 and len(CASES) >= 2 * len(fixture_dirs())


@pytest.mark.parametrize("fx,layer,bits", CASES)
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_layer_matches_the_tools_reference(cpu_registry, fx, layer, bits, kind):
    d, meta, ref = fixture(fx)
    ck = nibble.Checkpoint(d)
    _checked_layer(ck, fx, layer, bits)
    x, y_ref, w_nk = ref[layer + ".x"], ref[layer + ".y"].astype(np.float64), ref[layer + ".weight"].astype(np.float64)
    mag = np.abs(x.astype(np.float64)) @ np.abs(w_nk).T
    x16 = x.astype(np.float16)
    assert np.array_equal(x16.astype(np.float32), x), "the reference x is exactly representable in f16"
    p = cpu_registry.prepare(ck, layer, device="cpu")
    assert p.backend == "cpu_w4a16" and p.dtype == "f16"
    y = p.apply(x16) if kind == "numpy" else p.apply(torch.from_numpy(x16)).numpy()
    assert y.shape == y_ref.shape and y.dtype == np.float16
    ok, worst = within_tolerance(y, y_ref, mag, "f16")
    assert ok, f"{fx}: {layer}: y off the reference by {worst:.2f}x the tolerance"


@pytest.mark.parametrize("fx,layer,bits", CASES)
def test_reference_dequantization_matches_the_tools(cpu_registry, fx, layer, bits):
    d, meta, ref = fixture(fx)
    ck = nibble.Checkpoint(d)
    _checked_layer(ck, fx, layer, bits)
    w = ck.dequantize(layer)  # [K, N]
    want = ref[layer + ".weight"].T
    assert w.shape == want.shape
    bad = np.abs(w - want) > 2.0**-10 * np.abs(want) + 1e-9
    assert not bad.any(), f"{fx}: {layer}: {int(bad.sum())} dequantized weights off the tool's"
