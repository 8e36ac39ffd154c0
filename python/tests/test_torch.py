"""nibble.torch on PyTorch CPU: QuantLinear against the reference dequantization in plain PyTorch,
replace_linears over a model tree, the op path of this PyTorch, and the errors of bad inputs."""
import os

import numpy as np
import pytest
import torch

import nibble
import nibble.torch as nt

from conftest import FIXTURES, within_tolerance

Q = "model.layers.0.self_attn.q_proj"
DOWN = "model.layers.0.mlp.down_proj"


def _reference(ck, name, x):
    """x @ W in float64 with nibble's reference dequantization, and the magnitude for the tolerance."""
    w = torch.from_numpy(ck.dequantize(name)).double()
    xd = x.double().reshape(-1, w.shape[0])
    return (xd @ w).numpy(), (xd.abs() @ w.abs()).numpy()


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_quantlinear_matches_plain_pytorch(cpu_registry, gptq_dir, dtype):
    ck = nibble.Checkpoint(gptq_dir)
    q = nt.QuantLinear.from_checkpoint(ck, Q, registry=cpu_registry, dtype=dtype)
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    x = (torch.arange(2 * 3 * 512) % 11 - 5).reshape(2, 3, 512).to(tdt) / 8
    with torch.no_grad():
        y = q(x)
    assert y.shape == (2, 3, 256) and y.dtype == tdt and y.device.type == "cpu"
    ref, mag = _reference(ck, Q, x)
    ok, worst = within_tolerance(y.reshape(-1, 256).double().numpy(), ref, mag, dtype)
    assert ok, f"{dtype}: {worst:.2f}x the tolerance"
    assert "backend=cpu_w4a16" in repr(q)


def test_the_op_path_of_this_pytorch():
    assert nt.HAS_CUSTOM_OP == hasattr(torch.library, "custom_op")
    if nt.HAS_CUSTOM_OP:  # PyTorch >= 2.4: a real op with a fake kernel
        assert hasattr(torch.ops.nibble, "linear")


class Block(torch.nn.Module):
    def __init__(self, with_bias=False):
        super().__init__()
        self.self_attn = torch.nn.Module()
        self.self_attn.q_proj = torch.nn.Linear(512, 256, bias=with_bias)
        self.mlp = torch.nn.Module()
        self.mlp.down_proj = torch.nn.Linear(256, 128, bias=False)


class Tiny(torch.nn.Module):
    def __init__(self, with_bias=False):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList([Block(with_bias)])
        self.lm_head = torch.nn.Linear(64, 32, bias=False)


def test_replace_linears_swaps_every_quantized_layer_by_name(cpu_registry, gptq_dir):
    model = Tiny().half()
    swapped = nt.replace_linears(model, gptq_dir, registry=cpu_registry)
    assert sorted(swapped) == [DOWN, Q]
    assert isinstance(model.model.layers[0].self_attn.q_proj, nt.QuantLinear)
    assert isinstance(model.model.layers[0].mlp.down_proj, nt.QuantLinear)
    assert type(model.lm_head) is torch.nn.Linear  # unquantized in the checkpoint: the caller's weight
    x = torch.ones(4, 256, dtype=torch.float16)
    ref, mag = _reference(nibble.Checkpoint(gptq_dir), DOWN, x)
    with torch.no_grad():
        ok, _ = within_tolerance(model.model.layers[0].mlp.down_proj(x).double().numpy(), ref, mag, "f16")
    assert ok


def test_replace_linears_refuses_what_it_cannot_run_faithfully(cpu_registry, gptq_dir):
    with pytest.raises(nibble.InvalidArgumentError, match=f"layer '{Q}': the model's nn.Linear has bias, the checkpoint has none"):
        nt.replace_linears(Tiny(with_bias=True).half(), gptq_dir, registry=cpu_registry)
    wrong = Tiny().half()
    wrong.model.layers[0].mlp.down_proj = torch.nn.Linear(256, 64, bias=False)
    with pytest.raises(nibble.InvalidArgumentError, match=r"the model's nn.Linear is \[256 -> 64\], the checkpoint's \[256 -> 128\]"):
        nt.replace_linears(wrong, gptq_dir, registry=cpu_registry)
    # A layer stored in a way nibble does not run must not stay an nn.Linear with unloaded weights.
    d = os.path.join(FIXTURES, "autoround_mixed_4_8bit")
    ck = nibble.Checkpoint(d)
    mixed = Tiny().half()
    mixed.model.layers[0].self_attn.q_proj = torch.nn.Linear(256, 64, bias=False).half()
    mixed.model.layers[0].mlp.down_proj = torch.nn.Linear(384, 64, bias=False).half()
    if ck.layer(DOWN).status == "unsupported":
        with pytest.raises(nibble.UnsupportedError, match=f"layer '{DOWN}': 8-bit"):
            nt.replace_linears(mixed, ck, registry=cpu_registry)
    else:
        assert sorted(nt.replace_linears(mixed, ck, registry=cpu_registry)) == [DOWN, Q]


def test_quantlinear_bad_inputs(cpu_registry, gptq_dir):
    q = nt.QuantLinear.from_checkpoint(gptq_dir, Q, registry=cpu_registry)
    with pytest.raises(nibble.InvalidArgumentError, match=rf"layer '{Q}': tensor 'x': expected shape \[\.\.\., 512\], found \[3, 256\]"):
        q(torch.ones(3, 256, dtype=torch.float16))
    with pytest.raises(nibble.InvalidArgumentError, match=rf"layer '{Q}': tensor 'x': expected a contiguous tensor, found strides \[1, 3\] for shape \[3, 512\]"):
        q(torch.ones(512, 3, dtype=torch.float16).t())
    with pytest.raises(nibble.InvalidArgumentError, match=rf"layer '{Q}': tensor 'x': expected dtype float16 .*found float32"):
        q(torch.ones(3, 512))
    with pytest.raises(nibble.NoBackendError, match="device type cuda asked for"):
        cpu_registry.prepare(gptq_dir, Q, device="cuda:0")
    with pytest.raises(nibble.InvalidArgumentError, match="expected a nibble.PreparedLinear"):
        nt.QuantLinear("not a layer")
