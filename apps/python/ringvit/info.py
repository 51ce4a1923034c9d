"""info.py: ringvit.build_info(), the library build `ringvit --version` describes
(rv_flat_build_info), and where the library was loaded from."""

import ctypes
import json

from . import _call, _lib


def build_info():
    """The build as a dict: version, cuda, mpi, nccl, cpu_kernels, ... (the facts
    `ringvit --version` prints), plus "library", the file loaded."""
    lib = _lib.load()
    p = _call.out_call(lib.rv_flat_build_info)
    try:
        info = json.loads(ctypes.string_at(p).decode())
    finally:
        lib.rv_flat_free(p)
    info["library"] = _lib.path()
    return info


def library_path():
    """The libringvit file this process loaded (loads it if needed)."""
    return _lib.path()
