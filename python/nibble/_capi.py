"""ctypes declarations of nibble's C API (core/include/nibble/nibble_c.h) and the loading of libnibble.

Every struct here mirrors the header field for field; each crosses the boundary with its
struct_size, so a library newer or older than this file reads and writes only the fields both know.
"""
import ctypes
import os
from ctypes import POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_size_t, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p

API_VERSION = 1  # NIBBLE_HOST_API_VERSION

# nibble_dtype
DTYPE_F16, DTYPE_BF16, DTYPE_F32 = 1, 2, 3
DTYPE_NAMES = {DTYPE_F16: "f16", DTYPE_BF16: "bf16", DTYPE_F32: "f32"}

# DLDeviceType and DLDataTypeCode (dlpack.h)
kDLCPU, kDLCUDA, kDLCUDAHost, kDLROCM = 1, 2, 3, 10
kDLInt, kDLUInt, kDLFloat, kDLBfloat = 0, 1, 2, 4
DEVICE_TYPES = {"cpu": kDLCPU, "cuda": kDLCUDA, "rocm": kDLROCM, "hip": kDLROCM}
DEVICE_NAMES = {kDLCPU: "cpu", kDLCUDA: "cuda", kDLROCM: "rocm"}

ERR_NO_BACKEND = 7


class DLDevice(Structure):
    _fields_ = [("device_type", c_int), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor)))]


class Sized(Structure):
    """A struct of the C API: made with struct_size set to its own size."""

    def __init__(self, **kw):
        super().__init__(struct_size=ctypes.sizeof(self), **kw)


class LinearSpec(Sized):  # nibble_linear_spec (plugin_abi.h)
    _fields_ = [("struct_size", c_uint32), ("layer_name", c_char_p), ("k", c_int64), ("n", c_int64),
                ("full_k", c_int64), ("full_n", c_int64), ("parallel", c_int32), ("bits", c_int32),
                ("group_size", c_int32), ("weight_type", c_int32), ("act_dtype", c_int32), ("scale_dtype", c_int32),
                ("act_order", c_int32), ("has_bias", c_int32), ("format", c_int32)]


class Discovery(Sized):
    _fields_ = [("struct_size", c_uint32), ("dirs", POINTER(c_char_p)), ("num_dirs", c_size_t),
                ("use_default_dirs", c_int32), ("use_env", c_int32)]


class BackendInfo(Sized):
    _fields_ = [("struct_size", c_uint32), ("name", c_char_p), ("version", c_char_p), ("platform", c_char_p),
                ("description", c_char_p), ("path", c_char_p), ("capabilities", c_char_p), ("priority", c_int32),
                ("available", c_int32), ("device", c_char_p), ("dlpack_device", c_int32)]


class SkippedInfo(Sized):
    _fields_ = [("struct_size", c_uint32), ("path", c_char_p), ("kind", c_char_p), ("reason", c_char_p)]


class LayerInfo(Sized):
    _fields_ = [("struct_size", c_uint32), ("name", c_char_p), ("status", c_int32), ("reason", c_char_p),
                ("k", c_int64), ("n", c_int64), ("bits", c_int32), ("group_size", c_int32), ("symmetric", c_int32),
                ("act_order", c_int32), ("format", c_int32), ("packing", c_char_p)]


class CandidateInfo(Sized):
    _fields_ = [("struct_size", c_uint32), ("backend", c_char_p), ("verdict", c_int32), ("verdict_name", c_char_p),
                ("reason", c_char_p)]


class LayerOptions(Sized):
    _fields_ = [("struct_size", c_uint32), ("policy", c_void_p), ("act_dtype", c_int32), ("device_type", c_int32),
                ("device_id", c_int32), ("stream", c_void_p), ("parallel", c_int32), ("rank", c_int32),
                ("world", c_int32)]


_H = c_void_p  # every handle, and nibble_host_error*
_PROTOTYPES = {
    "nibble_host_api_version": (c_uint32, []),
    "nibble_host_version": (c_char_p, []),
    "nibble_host_status_name": (c_char_p, [c_int32]),
    "nibble_host_error_status": (c_int32, [_H]),
    "nibble_host_error_message": (c_char_p, [_H]),
    "nibble_host_error_selection": (_H, [_H]),
    "nibble_host_error_free": (None, [_H]),
    "nibble_host_policy_new": (_H, [POINTER(_H)]),
    "nibble_host_policy_from_environment": (_H, [POINTER(_H)]),
    "nibble_host_policy_from_file": (_H, [c_char_p, POINTER(_H)]),
    "nibble_host_policy_from_toml": (_H, [c_char_p, c_char_p, POINTER(_H)]),
    "nibble_host_policy_pin": (_H, [_H, c_char_p, c_int32]),
    "nibble_host_policy_free": (None, [_H]),
    "nibble_host_registry_discover": (_H, [POINTER(Discovery), POINTER(_H)]),
    "nibble_host_registry_free": (None, [_H]),
    "nibble_host_registry_num_backends": (c_size_t, [_H]),
    "nibble_host_registry_backend": (_H, [_H, c_size_t, POINTER(BackendInfo)]),
    "nibble_host_registry_num_skipped": (c_size_t, [_H]),
    "nibble_host_registry_skipped": (_H, [_H, c_size_t, POINTER(SkippedInfo)]),
    "nibble_host_registry_num_remarks": (c_size_t, [_H]),
    "nibble_host_registry_remark": (c_char_p, [_H, c_size_t]),
    "nibble_host_checkpoint_open": (_H, [c_char_p, POINTER(_H)]),
    "nibble_host_checkpoint_free": (None, [_H]),
    "nibble_host_checkpoint_quantization": (c_char_p, [_H]),
    "nibble_host_checkpoint_model_dtype": (c_int32, [_H]),
    "nibble_host_checkpoint_num_layers": (c_size_t, [_H]),
    "nibble_host_checkpoint_layer": (_H, [_H, c_size_t, POINTER(LayerInfo)]),
    "nibble_host_checkpoint_find_layer": (_H, [_H, c_char_p, POINTER(c_size_t)]),
    "nibble_host_checkpoint_spec": (_H, [_H, c_char_p, c_int32, POINTER(LinearSpec)]),
    "nibble_host_checkpoint_shard_spec": (_H, [_H, c_char_p, c_int32, c_int32, c_int32, c_int32, POINTER(LinearSpec)]),
    "nibble_host_checkpoint_dequantize": (_H, [_H, c_char_p, c_void_p]),
    "nibble_host_select": (_H, [_H, _H, c_char_p, POINTER(LayerOptions), POINTER(_H)]),
    "nibble_host_selection_free": (None, [_H]),
    "nibble_host_selection_layer": (c_char_p, [_H]),
    "nibble_host_selection_backend": (c_char_p, [_H]),
    "nibble_host_selection_num_candidates": (c_size_t, [_H]),
    "nibble_host_selection_candidate": (_H, [_H, c_size_t, POINTER(CandidateInfo)]),
    "nibble_host_selection_num_notes": (c_size_t, [_H]),
    "nibble_host_selection_note": (c_char_p, [_H, c_size_t]),
    "nibble_host_selection_trace": (c_char_p, [_H]),
    "nibble_host_prepare": (_H, [_H, _H, c_char_p, POINTER(LayerOptions), POINTER(_H), POINTER(_H)]),
    "nibble_host_linear_free": (None, [_H]),
    "nibble_host_linear_spec": (_H, [_H, POINTER(LinearSpec)]),
    "nibble_host_linear_backend": (c_char_p, [_H]),
    "nibble_host_linear_device": (_H, [_H, POINTER(DLDevice)]),
    "nibble_host_linear_kernel": (c_size_t, [_H, c_int64, c_char_p, c_size_t]),
    "nibble_host_linear_apply": (_H, [_H, c_void_p, c_void_p, c_void_p]),  # DLTensor* as addresses
    "nibble_host_linear_apply_managed": (_H, [_H, POINTER(DLManagedTensor), POINTER(DLManagedTensor), c_void_p]),
}


def _library_candidates():
    env = os.environ.get("NIBBLE_LIBRARY")
    if env:
        return [env], "NIBBLE_LIBRARY"
    from . import _location  # written by meson: where this copy of the package finds libnibble
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.normpath(os.path.join(here, p)) for p in _location.LIBRARY], _location.LAYOUT


def _load():
    candidates, origin = _library_candidates()
    for path in candidates:
        if os.path.exists(path):
            lib = ctypes.CDLL(path)  # ctypes releases the GIL around every call
            break
    else:
        raise ImportError(f"nibble: libnibble not found ({origin}: looked for {', '.join(candidates)}); build "
                          "nibble (scripts/bootstrap) and import this package from the build tree "
                          "(build/python) or an install, or set NIBBLE_LIBRARY to the library's path")
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    found = lib.nibble_host_api_version()
    if found != API_VERSION:
        raise ImportError(f"nibble: {path} speaks C API version {found}, this package version {API_VERSION}: "
                          "use the package built with that library")
    return lib, path


lib, library_path = _load()


def text(b):
    return b.decode("utf-8", "replace") if b is not None else None
