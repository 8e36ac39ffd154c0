"""nibble layers as PyTorch modules.

QuantLinear is an nn.Module over a nibble.PreparedLinear: it runs on the device of its tensors and
on PyTorch's current stream, with no copy of x or y (both go to nibble as DLPack tensors, y made
by PyTorch). With PyTorch >= 2.4 the layer is the custom op nibble::linear (with a fake kernel), so
torch.compile(fullgraph=True) sees one opaque op and CUDA graphs capture the kernels it launches;
on older PyTorch it is a plain call. replace_linears swaps every quantized nn.Linear of a model
for a QuantLinear, by name, from a whole checkpoint.
"""
import itertools
import weakref

import torch

from . import core
from ._errors import InvalidArgumentError, UnsupportedError

# Prepared layers by key: the custom op takes the key (an int) rather than a Python object. Keys
# are never reused, so a stale compiled graph cannot reach another layer.
_LAYERS = weakref.WeakValueDictionary()
_KEYS = itertools.count(1)

HAS_CUSTOM_OP = hasattr(torch.library, "custom_op")


def _layer(key):
    p = _LAYERS.get(key)
    if p is None:
        raise InvalidArgumentError(f"nibble::linear: layer key {key} is gone (its QuantLinear was freed)",
                                   "invalid argument")
    return p


def _run(p, x):
    y = torch.empty((x.shape[0], p.out_features), dtype=x.dtype, device=x.device)
    if not x.is_cuda:
        p._apply(x, y, None)
    elif x.device.index == torch.cuda.current_device():
        p._apply(x, y, torch.cuda.current_stream().cuda_stream)
    else:  # the plugin runs on the current device: make it x's for the call
        with torch.cuda.device(x.device):
            p._apply(x, y, torch.cuda.current_stream().cuda_stream)
    return y


if HAS_CUSTOM_OP:
    @torch.library.custom_op("nibble::linear", mutates_args=())
    def _linear_op(x: torch.Tensor, layer: int) -> torch.Tensor:
        return _run(_layer(layer), x)

    @_linear_op.register_fake
    def _linear_fake(x, layer):
        return x.new_empty((x.shape[0], _layer(layer).out_features))

    def _linear(x, key):
        return torch.ops.nibble.linear(x, key)
else:
    def _linear(x, key):
        return _run(_layer(key), x)


class QuantLinear(torch.nn.Module):
    """y = x @ W.T (+ b) of one quantized checkpoint layer, for x [..., in_features] on the layer's
    device in its activation dtype, contiguous (a non-contiguous x is an error: nibble never copies)."""

    def __init__(self, prepared):
        super().__init__()
        if not isinstance(prepared, core.PreparedLinear):
            raise InvalidArgumentError(f"QuantLinear: expected a nibble.PreparedLinear, found {type(prepared).__name__}",
                                       "invalid argument")
        self.prepared = prepared
        self.in_features, self.out_features = prepared.in_features, prepared.out_features
        self._key = next(_KEYS)
        _LAYERS[self._key] = prepared

    @classmethod
    def from_checkpoint(cls, checkpoint, name, *, registry=None, policy=None, dtype=None, device="cpu"):
        """The layer `name` of a checkpoint (a path or a nibble.Checkpoint) prepared for tensors on
        `device` in `dtype` (default: the model's), by the backend the policy selects among those
        whose memory is that device."""
        registry = registry if registry is not None else core.Registry()
        device = torch.device(device)
        if device.type == "cuda":
            with torch.cuda.device(device):
                return cls(registry.prepare(checkpoint, name, policy=policy, dtype=dtype, device=device))
        return cls(registry.prepare(checkpoint, name, policy=policy, dtype=dtype, device=device))

    def forward(self, x):
        p = self.prepared
        if x.shape[-1] != self.in_features or x.dim() < 1:
            raise InvalidArgumentError(f"layer '{p.name}': tensor 'x': expected shape [..., {self.in_features}], "
                                       f"found {list(x.shape)}", "invalid argument")
        if not x.is_contiguous():
            raise InvalidArgumentError(f"layer '{p.name}': tensor 'x': expected a contiguous tensor, found strides "
                                       f"{list(x.stride())} for shape {list(x.shape)}; nibble never copies a tensor: "
                                       "make it contiguous first", "invalid argument")
        y = _linear(x.view(-1, self.in_features), self._key)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self):
        p = self.prepared
        return (f"'{p.name}', in_features={self.in_features}, out_features={self.out_features}, {p.dtype}, "
                f"backend={p.backend}, device={p.device}")


def replace_linears(model, checkpoint, *, registry=None, policy=None, dtype=None, device=None, prefix=""):
    """Swaps every nn.Linear of `model` whose name (with `prefix` in front) is a quantized layer of
    the checkpoint for a QuantLinear on the Linear's device (or `device`), and returns the names
    swapped. A layer the checkpoint stores in a way nibble does not run is an UnsupportedError (the
    model would otherwise run it with weights that were never loaded); unquantized layers keep their
    nn.Linear, whose 16-bit weight the caller loads."""
    ck = checkpoint if isinstance(checkpoint, core.Checkpoint) else core.Checkpoint(checkpoint)
    registry = registry if registry is not None else core.Registry()
    swapped = []
    for name, module in list(model.named_modules()):
        if not isinstance(module, torch.nn.Linear):
            continue
        full = prefix + name
        try:
            entry = ck.layer(full)
        except KeyError:
            continue
        if entry.status == "unsupported":
            raise UnsupportedError(f"layer '{full}': {entry.reason}", "unsupported")
        if entry.status != "quantized":
            continue
        if (entry.in_features, entry.out_features) != (module.in_features, module.out_features):
            raise InvalidArgumentError(f"layer '{full}': the model's nn.Linear is [{module.in_features} -> "
                                       f"{module.out_features}], the checkpoint's [{entry.in_features} -> "
                                       f"{entry.out_features}]", "invalid argument")
        spec = ck.spec(full, dtype)
        if (module.bias is not None) != spec.has_bias:
            raise InvalidArgumentError(f"layer '{full}': the model's nn.Linear {'has' if module.bias is not None else 'has no'}"
                                       f" bias, the checkpoint {'has one' if spec.has_bias else 'has none'}",
                                       "invalid argument")
        q = QuantLinear.from_checkpoint(ck, full, registry=registry, policy=policy,
                                        dtype=dtype if dtype is not None else module.weight.dtype,
                                        device=device if device is not None else module.weight.device)
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, q)
        swapped.append(full)
    return swapped
