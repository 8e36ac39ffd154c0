"""DLPack tensors from Python objects, borrowed for the length of one call: nothing is copied.

Any object with __dlpack__ (numpy arrays, PyTorch, JAX, CuPy tensors) is exported through its
capsule (PyTorch's through torch.utils.dlpack.to_dlpack, which skips __dlpack__'s stream
handshake: nibble runs on the stream it is given). The capsule is not consumed, so its own
destructor releases the tensor once the call has returned and the capsule is dropped.
"""
import ctypes
import sys

from ._errors import InvalidArgumentError

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def borrow(obj, layer, name):
    """(address of a DLTensor, the capsule that keeps it alive) for obj, or an
    InvalidArgumentError naming the layer and the tensor."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and isinstance(obj, torch.Tensor):
            capsule = torch.utils.dlpack.to_dlpack(obj)
        else:
            export = getattr(obj, "__dlpack__", None)
            if export is None:
                raise InvalidArgumentError(f"layer '{layer}': tensor '{name}': expected a tensor that speaks DLPack "
                                           f"(__dlpack__), found {type(obj).__module__}.{type(obj).__qualname__}",
                                           "invalid argument")
            capsule = export()
    except (BufferError, TypeError, RuntimeError) as e:
        raise InvalidArgumentError(f"layer '{layer}': tensor '{name}': its DLPack export failed: {e}",
                                   "invalid argument") from e
    # A DLManagedTensor starts with its DLTensor.
    return _get_pointer(capsule, b"dltensor"), capsule
