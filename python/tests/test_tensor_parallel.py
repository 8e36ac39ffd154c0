"""Tensor parallelism through the C API from Python: every layer of every fixture split over 2 and 4
ranks (column- and row-parallel, act order included), each rank's partition prepared on cpu_w4a16
with `shard=`, the parts combined on the host as an engine does (column: concatenated along N; row:
summed, the bias on rank 0 only), against the tool's reference output and the unsplit layer on the
same backend, within nibble's tolerance. A split that cannot be made is refused with a message that
names the layer, the split and the rule it breaks, never a wrong answer."""
import numpy as np
import pytest

import nibble
from conftest import fixture, fixture_dirs, within_tolerance

WORLDS = (2, 4)
SPLITS = ("column", "row")


def _quantized_cases():
    out = []
    for fx in fixture_dirs():
        d, meta, _ = fixture(fx)
        ck = nibble.Checkpoint(d)
        for layer in meta["layers"]:
            if ck.layer(layer["name"]).status == "quantized":
                out.append(pytest.param(fx, layer["name"], id=f"{fx}/{layer['name']}"))
    return out


CASES = _quantized_cases()


def _refusal_rule(spec, split, world):
    """What the sharding must refuse (None where the split can be made), from the unsplit spec."""
    if split == "column":
        return "not divisible" if spec.n % world else None
    if spec.k % world:
        return "not divisible"
    part = spec.k // world
    unit = 32 // np.gcd(32, spec.bits)
    if part % unit:
        return f"multiple of {unit}"
    if not spec.act_order and spec.group_size > 0 and part % spec.group_size:
        return f"group size {spec.group_size}"
    return None


def _combined(registry, ck, layer, x16, split, world):
    """The ranks' y combined on the host in float64, or the refusal raised by the first rank."""
    n = ck.layer(layer).out_features
    out = np.zeros((x16.shape[0], n), dtype=np.float64)
    for rank in range(world):
        shard = nibble.Shard(split, rank, world)
        p = registry.prepare(ck, layer, device="cpu", shard=shard)
        s = ck.spec(layer, shard=shard)
        assert (p.spec.k, p.spec.n, p.spec.parallel) == (s.k, s.n, split)
        assert (s.full_k, s.full_n) == (x16.shape[1], n)
        y = p.apply(np.ascontiguousarray(x16[:, shard.x_columns(x16.shape[1])])).astype(np.float64)
        if split == "column":
            out[:, rank * s.n:(rank + 1) * s.n] = y
        else:
            out += y
    return out


def test_the_fixtures_hold_act_order_and_refusals():
    assert len(CASES) >= 2 * len(fixture_dirs()) - 8  # the 2/3/8-bit layers nibble does not run are left out
    specs = [nibble.Checkpoint(fixture(fx)[0]).spec(layer) for fx, layer in (c.values for c in CASES)]
    assert sum(1 for s in specs if s.act_order) >= 2, "row-parallel act order must be covered"
    assert any(_refusal_rule(s, split, w) for s in specs for split in SPLITS for w in WORLDS)


@pytest.mark.parametrize("fx,layer", CASES)
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("world", WORLDS)
def test_split_combined_equals_unsplit(cpu_registry, fx, layer, split, world):
    d, _, ref = fixture(fx)
    ck = nibble.Checkpoint(d)
    spec = ck.spec(layer)
    x, y_ref, w_nk = ref[layer + ".x"], ref[layer + ".y"].astype(np.float64), ref[layer + ".weight"].astype(np.float64)
    x16 = x.astype(np.float16)
    mag = np.abs(x.astype(np.float64)) @ np.abs(w_nk).T
    rule = _refusal_rule(spec, split, world)
    if rule is not None:
        with pytest.raises(nibble.UnsupportedError) as e:
            ck.spec(layer, shard=(split, 0, world))
        for needle in (f"layer '{layer}'", f"{split}-parallel split", f"over {world} ranks", rule):
            assert needle in str(e.value), f"the refusal does not say '{needle}': {e.value}"
        with pytest.raises(nibble.UnsupportedError, match=f"{split}-parallel split"):
            cpu_registry.prepare(ck, layer, device="cpu", shard=(split, world - 1, world))
        return
    got = _combined(cpu_registry, ck, layer, x16, split, world)
    ok, worst = within_tolerance(got, y_ref, mag, "f16")
    assert ok, f"{layer} {split}-parallel over {world} ranks against the tool's reference: worst {worst:.2f}x tolerance"
    whole = cpu_registry.prepare(ck, layer, device="cpu").apply(x16).astype(np.float64)
    ok, worst = within_tolerance(got, whole, mag, "f16")
    assert ok, f"{layer} {split}-parallel over {world} ranks against the unsplit layer: worst {worst:.2f}x tolerance"


def test_refusals_name_the_layer_the_split_and_the_group_size(cpu_registry):
    d, _, _ = fixture("gptq_v1_sym_g128")
    ck = nibble.Checkpoint(d)
    layer = "model.layers.0.self_attn.q_proj"  # K 512, N 256, G 128
    with pytest.raises(nibble.UnsupportedError) as e:
        cpu_registry.prepare(ck, layer, device="cpu", shard=nibble.Shard("row", 0, 8))
    assert f"layer '{layer}'" in str(e.value) and "row-parallel split of K 512 over 8 ranks" in str(e.value)
    assert "K_part 64 is not a multiple of the group size 128" in str(e.value)
    with pytest.raises(nibble.UnsupportedError, match="column-parallel split of N 256 over 3 ranks: not divisible"):
        ck.spec(layer, shard=("column", 1, 3))
    with pytest.raises(nibble.InvalidArgumentError, match="rank 2 of world 2"):
        ck.spec(layer, shard=("row", 2, 2))
    with pytest.raises(nibble.InvalidArgumentError, match="expected 'column' or 'row'"):
        cpu_registry.prepare(ck, layer, device="cpu", shard=("diagonal", 0, 2))
    s = cpu_registry.select(ck, layer, device="cpu", shard=("row", 1, 4))
    assert s.backend == "cpu_w4a16", s.trace

