"""A minimal safetensors reader and writer on numpy, for checking nibble against plain frameworks
without the safetensors package (Debian 12 has none). bf16 tensors are read and written as
uint16 arrays of their bits."""
import json
import struct

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BOOL": "?"}
_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32", "int16": "I16",
          "int8": "I8", "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL"}


def load(path):
    """Every tensor of a .safetensors file as a numpy array (a copy, writable), by name."""
    import numpy
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name] = numpy.frombuffer(data[begin:end], dtype=_DTYPES[t["dtype"]]).reshape(t["shape"]).copy()
    return out


def save(path, tensors, metadata=None, bf16=()):
    """Writes numpy arrays (by name) into a .safetensors file; names in `bf16` are uint16 arrays of
    bf16 bits and stored as BF16."""
    import numpy
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = numpy.ascontiguousarray(a)
        dtype = "BF16" if name in bf16 else _NAMES[a.dtype.name]
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
