"""The nibble package: discovery, checkpoints, explain() as data, policies, errors carrying
nibble's message and trace, every bad input, lifetimes under any GC order, and threads."""
import ctypes
import gc
import os
import random
import threading

import numpy as np
import pytest
import torch

import nibble
from nibble import _capi

from conftest import CPU_DIR, FIXTURES, TEST_DIR

Q = "model.layers.0.self_attn.q_proj"  # K 512, N 256 in gptq_v1_sym_g128
DOWN = "model.layers.0.mlp.down_proj"  # K 256, N 128


def test_discovery_lists_backends_skipped_files_and_remarks(registry):
    names = {b.name for b in registry.backends}
    assert {"cpu_w4a16", "test_good_a", "test_good_b", "test_no_device"} <= names
    cpu = registry.backend("cpu_w4a16")
    assert cpu.available and cpu.memory == "cpu" and "uint4b8" in cpu.capabilities and cpu.path.endswith("cpu_w4a16.so")
    assert not registry.backend("test_no_device").available
    skipped = {os.path.basename(s.path): s for s in registry.skipped}
    assert skipped["test_wrong_abi.so"].kind == "refused" and "ABI version 99" in skipped["test_wrong_abi.so"].reason
    with pytest.raises(KeyError, match="cpu_w4a16"):
        registry.backend("nope")


def test_why_no_backend_was_found_is_data(monkeypatch, tmp_path):
    monkeypatch.setenv("NIBBLE_PLUGIN_PATH", "relative/plugins")
    reg = nibble.Registry(use_default_dirs=False)
    assert reg.backends == ()
    assert any("'relative/plugins' ignored" in r for r in reg.remarks)
    sel = reg.select(os.path.join(FIXTURES, "gptq_v1_sym_g128"), Q)
    assert not sel and sel.backend is None
    assert any("must be absolute" in n for n in sel.notes) and "(no backends were found)" in sel.trace


def test_checkpoint_layers_and_specs(gptq_dir):
    ck = nibble.Checkpoint(gptq_dir)
    assert "4-bit" in ck.quantization and ck.model_dtype == "f16"
    by = {l.name: l for l in ck.layers}
    assert by["lm_head"].status == "unquantized" and "lm_head" in by["lm_head"].reason and by["lm_head"].bits == 0
    q = by[Q]
    assert (q.status, q.in_features, q.out_features, q.bits, q.group_size, q.format) == ("quantized", 512, 256, 4, 128, "gptq")
    s = ck.spec(Q, "bf16")
    assert (s.name, s.k, s.n, s.weight_type, s.act_dtype, s.scale_dtype, s.act_order, s.has_bias) == \
        (Q, 512, 256, "uint4b8", "bf16", "f16", False, False)
    assert ck.spec(Q, torch.float32).act_dtype == "f32" and ck.spec(Q, np.float16).act_dtype == "f16"
    with pytest.raises(nibble.UnsupportedError, match="layer 'lm_head' is not quantized"):
        ck.spec("lm_head")
    with pytest.raises(nibble.InvalidArgumentError, match="dtype: expected f16, bf16 or f32"):
        ck.spec(Q, "int8")
    with pytest.raises(nibble.NotFoundError, match="/no/such/model"):
        nibble.Checkpoint("/no/such/model")


def test_explain_returns_the_trace_as_data(registry, gptq_dir):
    policy = nibble.Policy.from_toml('prefer = ["test_good_b"]\ndeny = ["test_good_a"]\n', "inline.toml")
    choices = registry.explain(gptq_dir, policy=policy)
    assert [c.layer.name for c in choices] == ["lm_head", DOWN, Q]
    assert choices[0].selection is None
    sel = choices[2].selection
    assert sel.backend == "test_good_b" and sel.layer == Q
    verdicts = {c.backend: c for c in sel.candidates}
    assert verdicts["test_good_a"].verdict == "denied" and "inline.toml" in verdicts["test_good_a"].reason
    assert verdicts["test_no_device"].verdict == "no device" and verdicts["test_no_device"].reason == "no test device present"
    assert verdicts["test_lying_caps"].verdict == "cannot implement"
    assert verdicts["cpu_w4a16"].verdict == "viable"
    assert verdicts["test_wrong_abi.so"].verdict == "load failed"
    assert "test_good_b      selected" in sel.trace
    # The module-level explain(): the environment's policy (NIBBLE_BACKEND, a strict pin).
    os.environ["NIBBLE_BACKEND"] = "cpu_w4a16"
    try:
        choices = nibble.explain(gptq_dir, registry)
    finally:
        del os.environ["NIBBLE_BACKEND"]
    assert choices[2].selection.backend == "cpu_w4a16"
    assert {c.verdict for c in choices[2].selection.candidates if c.backend == "test_good_b"} == {"not considered"}


def test_tensors_elsewhere_deny_the_backends_of_other_memory(registry, gptq_dir):
    sel = registry.select(gptq_dir, Q, device="cuda:0")
    assert not sel
    assert {c.verdict for c in sel.candidates if c.verdict != "load failed"} == {"denied"}
    assert "device type cuda asked for" in sel.candidates[0].reason
    with pytest.raises(nibble.NoBackendError) as e:
        registry.prepare(gptq_dir, Q, device="cuda:0")
    assert e.value.selection is not None and not e.value.selection
    with pytest.raises(nibble.InvalidArgumentError, match="device: expected cpu, cuda"):
        registry.select(gptq_dir, Q, device="tpu")


def test_policies(registry, gptq_dir, tmp_path):
    f = tmp_path / "policy.toml"
    f.write_text('pin = "test_good_b"\nstrict = true\n')
    assert registry.select(gptq_dir, Q, policy=nibble.Policy.from_file(f)).backend == "test_good_b"
    assert registry.select(gptq_dir, Q, policy=nibble.Policy().pin("cpu_w4a16")).backend == "cpu_w4a16"
    soft = registry.select(gptq_dir, Q, policy=nibble.Policy().pin("test_no_device", strict=False))
    assert soft.backend != "test_no_device" and soft.candidates[0].backend == "test_no_device"
    with pytest.raises(nibble.FormatError, match="bad.toml"):
        nibble.Policy.from_toml("prefer = [", "bad.toml")
    with pytest.raises(nibble.NoBackendError, match="backend 'ghost'.*cpu_w4a16"):
        registry.select(gptq_dir, Q, policy=nibble.Policy().pin("ghost"))


def test_no_backend_error_carries_the_whole_trace(registry, gptq_dir):
    with pytest.raises(nibble.NoBackendError) as e:
        registry.prepare(gptq_dir, Q, policy=nibble.Policy().pin("test_no_device"))
    err = e.value
    assert err.status == "no backend" and err.code == 7
    assert "no backend can run layer 'model.layers.0.self_attn.q_proj'" in str(err)
    assert "no test device present" in str(err)
    assert err.selection.backend is None
    assert {c.backend: c.verdict for c in err.selection.candidates}["test_no_device"] == "no device"


def test_prepare_falls_back_past_a_failing_backend(registry, gptq_dir):
    policy = nibble.Policy.from_toml('prefer = ["test_process_fails", "test_good_b"]\n')
    p = registry.prepare(gptq_dir, Q, policy=policy)
    assert p.backend == "test_good_b" and p.selection.backend == "test_good_b"
    first = p.selection.candidates[0]
    assert (first.backend, first.verdict) == ("test_process_fails", "prepare failed")
    assert "simulated device failure while uploading weights" in first.reason


@pytest.fixture(scope="module")
def q_layer(cpu_registry, gptq_dir):
    return cpu_registry.prepare(gptq_dir, Q, device="cpu")


def test_prepared_layer(q_layer):
    p = q_layer
    assert (p.name, p.in_features, p.out_features, p.dtype, p.backend, str(p.device)) == (Q, 512, 256, "f16", "cpu_w4a16", "cpu")
    assert p.kernel(1) and p.selection.backend == "cpu_w4a16"
    x = (np.arange(3 * 512) % 13 - 6).astype(np.float16).reshape(3, 512) / 8
    y = p.apply(x)
    assert y.shape == (3, 256) and y.dtype == np.float16
    out = np.zeros((3, 256), np.float16)
    assert p.apply(x, out) is out and np.array_equal(out, y)
    yt = p.apply(torch.from_numpy(x))
    assert isinstance(yt, torch.Tensor) and np.array_equal(yt.numpy(), y)
    assert p.apply(np.zeros((0, 512), np.float16)).shape == (0, 256)


class ForeignTensor:
    """A DLPack producer written from scratch: a [rows, cols] f16 tensor on any device."""

    def __init__(self, array, device_type=_capi.kDLCPU, device_id=0, code=_capi.kDLFloat, bits=16):
        self.array = array
        self.shape_arr = (ctypes.c_int64 * 2)(*array.shape)
        self.managed = _capi.DLManagedTensor()
        t = self.managed.dl_tensor
        t.data = array.ctypes.data
        t.device.device_type, t.device.device_id = device_type, device_id
        t.ndim, t.shape, t.strides = 2, self.shape_arr, None
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
        self.shape = array.shape

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def test_anything_that_speaks_dlpack(q_layer):
    x = np.ones((2, 512), np.float16)
    y = np.empty((2, 256), np.float16)
    assert q_layer.apply(ForeignTensor(x), ForeignTensor(y)).array is y
    assert np.array_equal(y, q_layer.apply(x))


def _raises(match, fn):
    with pytest.raises(nibble.InvalidArgumentError, match=match) as e:
        fn()
    assert f"layer '{Q}'" in str(e.value)
    return e.value


def test_every_bad_input_names_layer_tensor_expected_and_found(q_layer):
    p = q_layer
    x = np.ones((3, 512), np.float16)
    y = np.empty((3, 256), np.float16)
    _raises(r"tensor 'x': expected dtype float16 \(the layer's activation dtype f16\), found float32",
            lambda: p.apply(x.astype(np.float32)))
    _raises(r"tensor 'y': expected dtype float16 .*found bfloat16",
            lambda: p.apply(torch.ones(3, 512, dtype=torch.float16), torch.empty(3, 256, dtype=torch.bfloat16)))
    _raises(r"tensor 'x': expected dtype float16 .*found int32", lambda: p.apply(np.ones((3, 512), np.int32), y))
    _raises(r"tensor 'x': expected device cpu \(where backend cpu_w4a16 prepared the layer\), found cuda:1",
            lambda: p.apply(ForeignTensor(x, _capi.kDLCUDA, 1), ForeignTensor(y)))
    _raises(r"tensor 'y': expected device cpu .*found rocm:0",
            lambda: p.apply(ForeignTensor(x), ForeignTensor(y, _capi.kDLROCM, 0)))
    _raises(r"tensor 'x': expected shape \[M, 512\], found \[3, 256\]", lambda: p.apply(np.ones((3, 256), np.float16)))
    _raises(r"tensor 'y': expected shape \[3, 256\] \(M of x\), found \[4, 256\]",
            lambda: p.apply(x, np.empty((4, 256), np.float16)))
    _raises(r"tensor 'x': expected 2 dimensions \[M, 512\], found 3 dimension\(s\) \[1, 3, 512\]",
            lambda: p.apply(x.reshape(1, 3, 512), y))
    _raises(r"tensor 'x': expected 2 dimensions \[M, 512\], found 1 dimension\(s\) \[512\]", lambda: p.apply(x[0], y))
    # Strides: a transposed view and every other column; numpy and PyTorch.
    xt = np.ones((512, 3), np.float16).T
    _raises(r"tensor 'x': expected a contiguous row-major tensor \(strides \[512, 1\]\), found strides \[1, 3\]"
            r".*never copies", lambda: p.apply(xt, y))
    _raises(r"tensor 'x': expected a contiguous .*found strides \[1024, 2\]",
            lambda: p.apply(np.ones((3, 1024), np.float16)[:, ::2], y))
    _raises(r"tensor 'y': expected a contiguous .*found strides \[1, 3\]",
            lambda: p.apply(torch.ones(3, 512, dtype=torch.float16), torch.empty(256, 3, dtype=torch.float16).t()))
    _raises(r"tensor 'x': expected a tensor that speaks DLPack \(__dlpack__\), found builtins.list",
            lambda: p.apply([[1.0] * 512], y))
    readonly = np.ones((3, 512), np.float16)
    readonly.flags.writeable = False
    _raises(r"tensor 'x': its DLPack export failed", lambda: p.apply(readonly, y))
    buf = np.ones(3 * 512 + 3 * 256, np.float16)  # y begins inside x
    _raises(r"tensor 'y' overlaps tensor 'x'",
            lambda: p.apply(buf[:3 * 512].reshape(3, 512), buf[3 * 512 - 256:3 * 512 + 512].reshape(3, 256)))


def test_a_prepared_layer_outlives_registry_and_checkpoint_in_any_gc_order(gptq_dir):
    x = np.ones((2, 512), np.float16)
    expect = None
    rng = random.Random(7)
    for trial in range(6):
        objs = {"registry": nibble.Registry([CPU_DIR], use_default_dirs=False, use_env=False),
                "checkpoint": nibble.Checkpoint(gptq_dir), "policy": nibble.Policy().pin("cpu_w4a16")}
        objs["a"] = objs["registry"].prepare(objs["checkpoint"], Q, policy=objs["policy"])
        objs["b"] = objs["registry"].prepare(objs["checkpoint"], Q, dtype="f32")
        order = list(objs)
        rng.shuffle(order)
        for name in order:  # drop one at a time; whatever is left must still work
            del objs[name]
            gc.collect()
            if "a" in objs:
                y = objs["a"].apply(x)
                expect = y if expect is None else expect
                assert np.array_equal(y, expect), f"trial {trial}: after dropping {name}"
            if "b" in objs:
                assert objs["b"].apply(x.astype(np.float32)).shape == (2, 256)


def test_two_threads_apply_different_layers_at_once(cpu_registry, gptq_dir):
    ck = nibble.Checkpoint(gptq_dir)
    layers = {Q: cpu_registry.prepare(ck, Q), DOWN: cpu_registry.prepare(ck, DOWN)}
    rng = np.random.default_rng(3)
    inputs = {n: (rng.integers(-8, 8, (7, p.in_features)) / 8).astype(np.float16) for n, p in layers.items()}
    expect = {n: layers[n].apply(inputs[n]) for n in layers}
    start, errors, counts = threading.Barrier(2), [], {}

    def work(name):
        try:
            start.wait()
            p, x = layers[name], inputs[name]
            for i in range(300):
                if not np.array_equal(p.apply(x), expect[name]):
                    errors.append(f"{name}: call {i} differs from the single-thread result")
            counts[name] = 300
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(n,)) for n in layers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and counts == {Q: 300, DOWN: 300}


def test_dequantize_into_any_host_tensor(gptq_dir):
    ck = nibble.Checkpoint(gptq_dir)
    w = ck.dequantize(Q)
    assert w.shape == (512, 256) and w.dtype == np.float32 and np.abs(w).max() > 0
    out = torch.empty(512, 256)
    ck.dequantize(Q, out)
    assert np.array_equal(out.numpy(), w)
    with pytest.raises(nibble.InvalidArgumentError, match=r"tensor 'weight': expected shape \[512, 256\], found \[256, 512\]"):
        ck.dequantize(Q, np.empty((256, 512), np.float32))
