"""_arrays.py: rv_arrays handles to and from Python. take() copies every array of
a handle into a NumPy array Python owns and frees the handle (nothing points into
library memory afterwards); to_handle() builds a handle from NumPy arrays for
calls that take one (rv_flat_encoder_embed_tokens)."""

import ctypes
import json

import numpy as np

from . import _lib
from ._call import check
from .errors import Error

DTYPES = {"u8": np.dtype("<u1"), "i64": np.dtype("<i8"), "f32": np.dtype("<f4"),
          "f64": np.dtype("<f8")}
_NAMES = {(v.kind, v.itemsize): k for k, v in DTYPES.items()}
# What only comes out (embeddings at a lower precision, dtype="f16" or "bf16"):
# NumPy's float16, and bfloat16, which NumPy lacks, as the uint16 bit patterns
# (widen exactly with bf16_to_f32).
_OUT_DTYPES = dict(DTYPES, f16=np.dtype("<f2"), bf16=np.dtype("<u2"))


def bf16_to_f32(a):
    """bfloat16 bit patterns (uint16, as Encoder.embed(dtype="bf16") returns
    them) as float32, exactly."""
    a = np.asarray(a, np.uint16)
    return (a.astype(np.uint32) << 16).view(np.float32)


class Arrays(dict):
    """Named NumPy arrays (dict name -> ndarray) plus .meta, the call's metadata
    (a dict parsed from the library's JSON)."""

    def __init__(self, arrays=(), meta=None):
        super().__init__(arrays)
        self.meta = dict(meta or {})

    def __repr__(self):
        inner = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.items())
        return f"ringvit.Arrays({{{inner}}}, meta keys {sorted(self.meta)})"


def free(handle):
    """Frees an rv_arrays handle (a void * value); None is ignored."""
    if handle:
        _lib.load().rv_arrays_free(ctypes.byref(ctypes.c_void_p(handle)))


def take(handle):
    """Copies the handle's arrays and metadata into an Arrays, then frees it."""
    lib = _lib.load()
    try:
        out = Arrays()
        for i in range(lib.rv_arrays_count(handle)):
            name = lib.rv_arrays_name(handle, i).decode()
            dt = lib.rv_arrays_dtype(handle, i).decode()
            if dt not in _OUT_DTYPES:
                raise Error(f"ringvit: array '{name}' has an unknown dtype '{dt}'")
            shape = tuple(int(lib.rv_arrays_dim(handle, i, d))
                          for d in range(lib.rv_arrays_ndim(handle, i)))
            a = np.empty(shape, _OUT_DTYPES[dt])
            if a.nbytes:
                src = lib.rv_arrays_data(handle, i)
                if not src:
                    raise Error(f"ringvit: array '{name}' {shape} has no data")
                ctypes.memmove(a.ctypes.data, src, a.nbytes)
            out[name] = a
        meta = lib.rv_arrays_meta(handle)
        out.meta = json.loads(meta.decode()) if meta else {}
        return out
    finally:
        free(handle)


def to_handle(arrays, meta=None):
    """A new rv_arrays handle holding copies of arrays (name -> array-like of u8,
    i64, f32 or f64) and meta (a dict); the caller frees it."""
    lib = _lib.load()
    if not (_lib.has("rv_arrays_new") and _lib.has("rv_arrays_add")):
        raise Error("ringvit: this libringvit cannot take token arrays (no rv_arrays_new); "
                    "embed the recording's path instead")
    prepared = []
    for name, a in arrays.items():
        if not isinstance(name, str):
            raise TypeError(f"array names must be str, not {type(name).__name__}")
        a = np.asarray(a)
        dt = _NAMES.get((a.dtype.kind, a.dtype.itemsize))
        if dt is None:
            raise ValueError(f"array '{name}': dtype {a.dtype} is not one of uint8, int64, "
                             "float32, float64")
        prepared.append((name, dt, np.ascontiguousarray(a, DTYPES[dt])))
    h = ctypes.c_void_p()
    check(lib.rv_arrays_new(json.dumps(meta or {}).encode(), ctypes.byref(h)))
    try:
        for name, dt, a in prepared:
            dims = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
            check(lib.rv_arrays_add(h, name.encode(), dt.encode(), a.ndim, dims,
                                    ctypes.c_void_p(a.ctypes.data) if a.nbytes else None))
    except BaseException:
        free(h.value)
        raise
    return h.value
