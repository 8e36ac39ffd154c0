"""nibble from Python: the 4-bit (and 2/3/8-bit) weight linear layers of quantized LLM checkpoints
on CPUs and GPUs, through nibble's C API (ctypes; no compiled extension, so one build serves any
Python 3 and any PyTorch, or none).

    import nibble
    reg = nibble.Registry()                      # NIBBLE_PLUGIN_PATH, then the install directory
    ck = nibble.Checkpoint("/models/llama-gptq")
    for choice in reg.explain(ck):               # every layer, every backend's verdict, as data
        print(choice.layer.name, choice.selection and choice.selection.backend)
    layer = reg.prepare(ck, "model.layers.0.mlp.down_proj")
    y = layer.apply(x)                           # x: numpy or PyTorch (CPU, CUDA) [M, K]

nibble.torch holds QuantLinear (an nn.Module) and replace_linears (a whole model at once).
"""
from ._capi import library_path
from ._errors import (DeviceError, FormatError, InternalError, InvalidArgumentError, LimitError, NibbleError,
                      NibbleIOError, NoBackendError, NoDeviceError, NotFoundError, OutOfMemoryError, PluginError,
                      PluginUnsupportedError, UnsupportedError)
from .core import (Backend, Candidate, Checkpoint, Device, Layer, LayerChoice, Policy, PreparedLinear, Registry,
                   Selection, Shard, Skipped, Spec, explain)

__version__ = _capi.text(_capi.lib.nibble_host_version())
