"""nibble's host API in Python, over the C API: backends found by a Registry, a Checkpoint's layers
and specs, Policies, Selections (the whole verdict trace as data) and PreparedLinear layers that
apply to any tensor that speaks DLPack."""
import os
import weakref
from collections import namedtuple
from dataclasses import dataclass
from typing import Optional, Tuple

from . import _capi, _dlpack
from ._capi import lib, text
from ._errors import BY_CODE, InvalidArgumentError, NibbleError

Device = namedtuple("Device", "type index")
Device.__str__ = lambda d: d.type if d.type == "cpu" else f"{d.type}:{d.index}"

_FORMATS = {0: "unknown", 1: "gptq", 2: "gptq_v2", 3: "awq", 4: "compressed-tensors", 5: "autoround"}
_WEIGHT_TYPES = {1: "uint4", 2: "uint4b8", 3: "uint8", 4: "uint8b128", 5: "uint2", 6: "uint2b2", 7: "uint3", 8: "uint3b4"}
_LAYER_STATUS = {0: "quantized", 1: "unquantized", 2: "unsupported"}
_PARALLEL = {0: "none", 1: "column", 2: "row"}
_DTYPE_ALIASES = {"f16": 1, "float16": 1, "fp16": 1, "half": 1, "bf16": 2, "bfloat16": 2,
                  "f32": 3, "float32": 3, "fp32": 3, "float": 3}


def _check(err):
    """Raises the exception of a nibble_host_error (and frees it); nothing for NULL."""
    if not err:
        return
    try:
        code = lib.nibble_host_error_status(err)
        message = text(lib.nibble_host_error_message(err))
        trace = lib.nibble_host_error_selection(err)
        selection = Selection._read(trace) if trace else None
        exc = BY_CODE.get(code, NibbleError)(message, text(lib.nibble_host_status_name(code)), code, selection)
    finally:
        lib.nibble_host_error_free(err)
    raise exc


def _owned(obj, handle, free):
    """Ties a C handle's life to obj: freed when obj is collected, in whatever order. Not at
    interpreter exit, where a GPU runtime may already be gone (the process ends anyway)."""
    weakref.finalize(obj, free, handle).atexit = False


def _bytes(s, what):
    if s is None:
        raise InvalidArgumentError(f"{what}: expected a string or path, found None", "invalid argument")
    return os.fsencode(s)


def _dtype_arg(dtype):
    """A nibble_dtype from None (the model's), 'f16', 'bf16', 'f32', or a numpy / PyTorch dtype."""
    if dtype is None:
        return 0
    name = getattr(dtype, "__name__", None) or str(dtype)
    name = name[len("torch."):] if name.startswith("torch.") else name
    if name not in _DTYPE_ALIASES:
        raise InvalidArgumentError(f"dtype: expected f16, bf16 or f32 (or a numpy / PyTorch float16, bfloat16, "
                                   f"float32), found {dtype!r}", "invalid argument")
    return _DTYPE_ALIASES[name]


def _device_arg(device):
    """(DLDeviceType, index) from None (any), 'cpu', 'cuda', 'cuda:1', a torch.device or a Device."""
    if device is None:
        return 0, 0
    if isinstance(device, tuple) and len(device) == 2:
        kind, index = device
    else:
        kind, _, idx = str(device).partition(":")
        index = int(idx) if idx else None
    if kind not in _capi.DEVICE_TYPES:
        raise InvalidArgumentError(f"device: expected cpu, cuda[:N] or rocm[:N], found {device!r}", "invalid argument")
    if index is None:
        index = 0
        import sys
        torch = sys.modules.get("torch")
        if kind != "cpu" and torch is not None and torch.cuda.is_available():
            index = torch.cuda.current_device()
    return _capi.DEVICE_TYPES[kind], int(index)


@dataclass(frozen=True)
class Backend:
    """A plugin the registry loaded."""
    name: str
    version: str
    platform: str
    description: str
    path: str
    capabilities: str
    priority: int
    available: bool
    device: str  #: its probe: the device, or why there is none
    memory: Optional[str]  #: where tensors for it live ("cpu", "cuda", "rocm"), None if nibble knows none


@dataclass(frozen=True)
class Skipped:
    """A plugin file that was not loaded, and why."""
    path: str
    kind: str
    reason: str


@dataclass(frozen=True)
class Layer:
    """A linear layer of a checkpoint and how it is stored."""
    name: str
    status: str  #: "quantized", "unquantized" or "unsupported"
    reason: str  #: why it is unquantized or unsupported ("" when quantized)
    in_features: int
    out_features: int
    bits: int
    group_size: int
    symmetric: bool
    act_order: bool
    format: str
    packing: str


@dataclass(frozen=True)
class Spec:
    """What a backend decides on: Y[M, n] = X[M, k] * W (+ bias)."""
    name: str
    k: int
    n: int
    full_k: int
    full_n: int
    parallel: str
    bits: int
    group_size: int
    weight_type: str
    act_dtype: str
    scale_dtype: str
    act_order: bool
    has_bias: bool
    format: str

    @classmethod
    def _read(cls, s):
        dt = lambda d: _capi.DTYPE_NAMES.get(d, f"dtype {d}")
        return cls(text(s.layer_name), s.k, s.n, s.full_k, s.full_n, _PARALLEL.get(s.parallel, str(s.parallel)),
                   s.bits, s.group_size, _WEIGHT_TYPES.get(s.weight_type, f"weight type {s.weight_type}"),
                   dt(s.act_dtype), dt(s.scale_dtype), bool(s.act_order), bool(s.has_bias),
                   _FORMATS.get(s.format, str(s.format)))


@dataclass(frozen=True)
class Candidate:
    """One backend's verdict on a layer."""
    backend: str
    verdict: str  #: "selected", "viable", "denied", "no device", "prepare failed", ...
    reason: str


@dataclass(frozen=True)
class Selection:
    """Which backend runs a layer, and every candidate's verdict in the order they were considered."""
    layer: str
    backend: Optional[str]  #: the winner, None if no backend can take the layer
    candidates: Tuple[Candidate, ...]
    notes: Tuple[str, ...]  #: policy remarks, and why plugins may be missing
    trace: str  #: all of it for people

    def __bool__(self):
        return self.backend is not None

    @classmethod
    def _read(cls, h):
        cands = []
        for i in range(lib.nibble_host_selection_num_candidates(h)):
            c = _capi.CandidateInfo()
            _check(lib.nibble_host_selection_candidate(h, i, c))
            cands.append(Candidate(text(c.backend), text(c.verdict_name), text(c.reason)))
        notes = tuple(text(lib.nibble_host_selection_note(h, i)) for i in range(lib.nibble_host_selection_num_notes(h)))
        return cls(text(lib.nibble_host_selection_layer(h)), text(lib.nibble_host_selection_backend(h)), tuple(cands),
                   notes, text(lib.nibble_host_selection_trace(h)))

    @classmethod
    def _take(cls, h):
        try:
            return cls._read(h)
        finally:
            lib.nibble_host_selection_free(h)


@dataclass(frozen=True)
class LayerChoice:
    """A layer of explain(): its storage, and the selection for a quantized one (None otherwise)."""
    layer: Layer
    selection: Optional[Selection]


class Policy:
    """Which backends may run which layers (docs/policy.md). Policy() has no rules."""

    def __init__(self, _handle=None):
        if _handle is None:
            h = _capi.c_void_p()
            _check(lib.nibble_host_policy_new(h))
            _handle = h
        self._h = _handle
        _owned(self, _handle.value, lib.nibble_host_policy_free)

    @classmethod
    def from_env(cls):
        """NIBBLE_CONFIG (a TOML file) if set, then NIBBLE_BACKEND (a strict pin) on top."""
        h = _capi.c_void_p()
        _check(lib.nibble_host_policy_from_environment(h))
        return cls(h)

    @classmethod
    def from_file(cls, path):
        h = _capi.c_void_p()
        _check(lib.nibble_host_policy_from_file(_bytes(path, "Policy.from_file"), h))
        return cls(h)

    @classmethod
    def from_toml(cls, text_, origin=None):
        h = _capi.c_void_p()
        _check(lib.nibble_host_policy_from_toml(text_.encode(), origin.encode() if origin else None, h))
        return cls(h)

    def pin(self, backend, strict=True):
        """Pins `backend` for every layer (strict: only it runs). Returns self."""
        _check(lib.nibble_host_policy_pin(self._h, backend.encode(), 1 if strict else 0))
        return self


@dataclass(frozen=True)
class Shard:
    """Rank `rank` of `world` ranks' partition of a layer (docs/tensor_parallel.md). split "column"
    slices N (the ranks' y are concatenated along N); "row" slices K (rank r takes x[:, r*K/world :
    (r+1)*K/world] and the ranks' y are summed; the bias is on rank 0 only)."""
    split: str
    rank: int
    world: int

    def x_columns(self, k):
        """The slice of x's K columns this rank takes: all of them for a column split."""
        if self.split == "column":
            return slice(0, k)
        part = k // self.world
        return slice(self.rank * part, (self.rank + 1) * part)


_SPLITS = {"column": 1, "row": 2}


def _shard_arg(shard):
    """(parallel, rank, world) for the C API from a Shard, a (split, rank, world) tuple or None."""
    if shard is None:
        return 0, 0, 0
    if isinstance(shard, tuple) and len(shard) == 3:
        shard = Shard(*shard)
    if not isinstance(shard, Shard):
        raise InvalidArgumentError(f"shard: expected a nibble.Shard or (split, rank, world), found {shard!r}",
                                   "invalid argument")
    if shard.split not in _SPLITS:
        raise InvalidArgumentError(f"shard: split: expected 'column' or 'row', found {shard.split!r}", "invalid argument")
    return _SPLITS[shard.split], int(shard.rank), int(shard.world)


def _options(policy, dtype, device, stream=None, shard=None):
    dev_type, dev_id = _device_arg(device)
    if policy is not None and not isinstance(policy, Policy):
        raise InvalidArgumentError(f"policy: expected a nibble.Policy, found {type(policy).__name__}", "invalid argument")
    parallel, rank, world = _shard_arg(shard)
    return _capi.LayerOptions(policy=policy._h.value if policy is not None else None, act_dtype=_dtype_arg(dtype),
                              device_type=dev_type, device_id=dev_id, stream=stream, parallel=parallel, rank=rank,
                              world=world)


class Registry:
    """The backends found: dirs first (absolute), then NIBBLE_PLUGIN_PATH and the install directory
    unless turned off. A bad plugin never fails this: it is in `skipped`, with the reason."""

    def __init__(self, dirs=(), *, use_default_dirs=True, use_env=True):
        if isinstance(dirs, (str, bytes, os.PathLike)):
            dirs = [dirs]
        encoded = [os.fsencode(d) for d in dirs]
        arr = (_capi.c_char_p * max(1, len(encoded)))(*encoded)
        opts = _capi.Discovery(dirs=arr, num_dirs=len(encoded), use_default_dirs=int(use_default_dirs),
                               use_env=int(use_env))
        h = _capi.c_void_p()
        _check(lib.nibble_host_registry_discover(opts, h))
        self._h = h
        _owned(self, h.value, lib.nibble_host_registry_free)
        self.backends = tuple(self._backend(i) for i in range(lib.nibble_host_registry_num_backends(h)))
        self.skipped = tuple(self._skipped(i) for i in range(lib.nibble_host_registry_num_skipped(h)))
        self.remarks = tuple(text(lib.nibble_host_registry_remark(h, i))
                             for i in range(lib.nibble_host_registry_num_remarks(h)))

    def _backend(self, i):
        b = _capi.BackendInfo()
        _check(lib.nibble_host_registry_backend(self._h, i, b))
        return Backend(text(b.name), text(b.version), text(b.platform), text(b.description), text(b.path),
                       text(b.capabilities), b.priority, bool(b.available), text(b.device),
                       _capi.DEVICE_NAMES.get(b.dlpack_device))

    def _skipped(self, i):
        s = _capi.SkippedInfo()
        _check(lib.nibble_host_registry_skipped(self._h, i, s))
        return Skipped(text(s.path), text(s.kind), text(s.reason))

    def backend(self, name):
        for b in self.backends:
            if b.name == name:
                return b
        raise KeyError(f"backend '{name}' was not found; backends: {', '.join(b.name for b in self.backends) or '(none)'}")

    def select(self, checkpoint, layer, *, policy=None, dtype=None, device=None, shard=None):
        """The Selection for a quantized layer (no weights are read). device: where the tensors will
        be; backends whose memory is elsewhere are denied. shard: a Shard (or (split, rank, world)):
        the selection for that rank's partition."""
        ck = _checkpoint(checkpoint)  # kept alive across the call: its handle is freed with it
        h = _capi.c_void_p()
        _check(lib.nibble_host_select(self._h, ck._h, layer.encode(), _options(policy, dtype, device, shard=shard), h))
        return Selection._take(h)

    def explain(self, checkpoint, *, policy=None, dtype=None, device=None):
        """Every linear layer of the checkpoint with its storage and, for a quantized one, its Selection."""
        ck = _checkpoint(checkpoint)
        return [LayerChoice(l, self.select(ck, l.name, policy=policy, dtype=dtype, device=device)
                            if l.status == "quantized" else None) for l in ck.layers]

    def prepare(self, checkpoint, layer, *, policy=None, dtype=None, device=None, stream=None, shard=None):
        """A PreparedLinear of `layer` on the selected backend (the next viable one where its
        process_weights fails). NoBackendError, carrying the whole trace, when none can take it.
        shard: a Shard (or (split, rank, world)): only that rank's partition is prepared;
        UnsupportedError naming the layer, the split and the group size where it cannot be made."""
        ck = _checkpoint(checkpoint)
        out, sel = _capi.c_void_p(), _capi.c_void_p()
        _check(lib.nibble_host_prepare(self._h, ck._h, layer.encode(), _options(policy, dtype, device, stream, shard),
                                       out, sel))
        return PreparedLinear(out, Selection._take(sel))


class Checkpoint:
    """A model directory: config.json and safetensors (single or sharded)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        h = _capi.c_void_p()
        _check(lib.nibble_host_checkpoint_open(_bytes(path, "Checkpoint"), h))
        self._h = h
        _owned(self, h.value, lib.nibble_host_checkpoint_free)
        self.quantization = text(lib.nibble_host_checkpoint_quantization(h))
        self.model_dtype = _capi.DTYPE_NAMES.get(lib.nibble_host_checkpoint_model_dtype(h))
        layers = []
        for i in range(lib.nibble_host_checkpoint_num_layers(h)):
            li = _capi.LayerInfo()
            _check(lib.nibble_host_checkpoint_layer(h, i, li))
            layers.append(Layer(text(li.name), _LAYER_STATUS.get(li.status, str(li.status)), text(li.reason), li.k,
                                li.n, li.bits, li.group_size, bool(li.symmetric), bool(li.act_order),
                                _FORMATS.get(li.format, str(li.format)), text(li.packing)))
        self.layers = tuple(layers)
        self._by_name = {l.name: l for l in layers}

    def layer(self, name):
        if name not in self._by_name:
            raise KeyError(f"layer '{name}' is not a linear layer of {self.path}")
        return self._by_name[name]

    def spec(self, layer, dtype=None, shard=None):
        """The layer's Spec from the tensor headers (no weights are read); with shard (a Shard or
        (split, rank, world)), that rank's partition's, with every check of the split."""
        s = _capi.LinearSpec()
        if shard is None:
            _check(lib.nibble_host_checkpoint_spec(self._h, layer.encode(), _dtype_arg(dtype), s))
        else:
            parallel, rank, world = _shard_arg(shard)
            _check(lib.nibble_host_checkpoint_shard_spec(self._h, layer.encode(), _dtype_arg(dtype), parallel, rank, world,
                                                         s))
        return Spec._read(s)

    def dequantize(self, layer, out=None):
        """nibble's reference dequantization of a layer as float32 [K, N] (numpy, or into `out`, any
        host DLPack tensor of that shape): what backends are checked against."""
        entry = self.layer(layer)
        if out is None:
            import numpy
            out = numpy.empty((entry.in_features, entry.out_features), dtype=numpy.float32)
        t, keep = _dlpack.borrow(out, layer, "weight")
        _check(lib.nibble_host_checkpoint_dequantize(self._h, layer.encode(), t))
        del keep
        return out

    def __repr__(self):
        return f"nibble.Checkpoint({self.path!r}: {self.quantization}, {len(self.layers)} linear layers)"


def _checkpoint(c):
    return c if isinstance(c, Checkpoint) else Checkpoint(c)


def _empty_like_output(x, rows, cols):
    """y for x when the caller gives none: the same kind of array, dtype and device."""
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(x, numpy.ndarray):
        return numpy.empty((rows, cols), dtype=x.dtype)
    return None


class PreparedLinear:
    """A layer's weights prepared by one backend on its device. It keeps the plugin loaded and
    outlives the Registry and Checkpoint it came from."""

    def __init__(self, handle, selection):
        self._h = handle
        _owned(self, handle.value, lib.nibble_host_linear_free)
        s = _capi.LinearSpec()
        _check(lib.nibble_host_linear_spec(handle, s))
        self.spec = Spec._read(s)
        self.selection = selection
        self.name = self.spec.name
        self.backend = text(lib.nibble_host_linear_backend(handle))
        self.in_features, self.out_features = self.spec.k, self.spec.n
        self.dtype = self.spec.act_dtype
        d = _capi.DLDevice()
        _check(lib.nibble_host_linear_device(handle, d))
        self.device = Device(_capi.DEVICE_NAMES.get(d.device_type, str(d.device_type)), d.device_id)

    def kernel(self, m):
        """The kernel the backend runs for m rows ("" if it does not say)."""
        buf = _capi.ctypes.create_string_buffer(256)
        lib.nibble_host_linear_kernel(self._h, m, buf, 256)
        return text(buf.value)

    def apply(self, x, out=None, *, stream=None):
        """y = x @ W (+ bias) for x [M, K] on the layer's device, written into `out` [M, N] (made
        like x when not given: numpy and PyTorch). Runs on `stream` (a CUDA / HIP stream pointer;
        PyTorch GPU tensors default to PyTorch's current stream) and returns out. Any tensor that
        speaks DLPack; a wrong dtype, device, shape or layout is an InvalidArgumentError naming the
        layer and the tensor; nothing is copied."""
        shape = getattr(x, "shape", None)
        if out is None and shape is not None and len(shape) == 2:
            out = _empty_like_output(x, shape[0], self.out_features)
            if out is None:
                raise InvalidArgumentError(f"layer '{self.name}': tensor 'y': pass out= for a "
                                           f"{type(x).__module__}.{type(x).__qualname__} input (nibble makes numpy "
                                           "arrays and PyTorch tensors only)", "invalid argument")
        if stream is None:
            stream = _default_stream(x)
        self._apply(x, out, stream)
        return out

    def _apply(self, x, y, stream):
        tx, keep_x = _dlpack.borrow(x, self.name, "x")
        ty, keep_y = _dlpack.borrow(y, self.name, "y") if y is not None else (None, None)
        _check(lib.nibble_host_linear_apply(self._h, tx, ty, stream))
        del keep_x, keep_y

    def __repr__(self):
        return (f"nibble.PreparedLinear({self.name!r} [{self.in_features} -> {self.out_features}] {self.dtype} on "
                f"{self.backend} ({self.device}))")


def _default_stream(x):
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor) and x.is_cuda:
        return torch.cuda.current_stream(x.device).cuda_stream
    return None


def explain(checkpoint, registry=None, *, policy=None, dtype=None, device=None):
    """Every linear layer of a checkpoint (a path or a Checkpoint), with its Selection: the trace as data.
    registry: a Registry (default: NIBBLE_PLUGIN_PATH and the install directory); policy: a Policy
    (default: NIBBLE_CONFIG / NIBBLE_BACKEND)."""
    registry = registry if registry is not None else Registry()
    policy = policy if policy is not None else Policy.from_env()
    return registry.explain(checkpoint, policy=policy, dtype=dtype, device=device)
