"""_lib.py: finds and loads libringvit once (ctypes.CDLL, so every call releases
the GIL) and declares the flat calls of encoder/rv_flat.h.

Search order: the RINGVIT_LIB environment variable (a file, or a folder holding
libringvit.so); the build tree when the package runs from the repository
(<repo>/build/libringvit.so); the install prefix (the prefix pip installed
the package into, sys.prefix, /usr/local, /usr: lib/, its multiarch folder,
lib64/); then the dynamic
loader's own search (LD_LIBRARY_PATH, ld.so.cache: libringvit.so.0). The error
when none loads lists every place looked and why each failed."""

import ctypes
import ctypes.util
import os
import sys
import sysconfig
import threading
from pathlib import Path

from .errors import LibraryNotFoundError

_SONAMES = ("libringvit.so", "libringvit.so.0")

_lock = threading.Lock()
_lib = None
_path = None

c_int, c_char_p, c_void_p, c_int64 = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int64
P = ctypes.POINTER

# name: (restype, argtypes). Handles are opaque (void *); strings the library
# allocates come back as void * so they can be freed with rv_flat_free.
_PROTOTYPES = {
    "rv_last_error": (c_char_p, []),
    "rv_arrays_count": (c_int, [c_void_p]),
    "rv_arrays_find": (c_int, [c_void_p, c_char_p]),
    "rv_arrays_name": (c_char_p, [c_void_p, c_int]),
    "rv_arrays_dtype": (c_char_p, [c_void_p, c_int]),
    "rv_arrays_ndim": (c_int, [c_void_p, c_int]),
    "rv_arrays_dim": (c_int64, [c_void_p, c_int, c_int]),
    "rv_arrays_data": (c_void_p, [c_void_p, c_int]),
    "rv_arrays_meta": (c_char_p, [c_void_p]),
    "rv_arrays_free": (None, [P(c_void_p)]),
    "rv_flat_free": (None, [c_void_p]),
    "rv_flat_probe": (c_int, [c_char_p, P(c_void_p)]),
    "rv_flat_build_info": (c_int, [P(c_void_p)]),
    "rv_flat_reader_open": (c_int, [c_char_p, c_char_p, P(c_void_p)]),
    "rv_flat_reader_next": (c_int, [c_void_p, P(c_void_p)]),
    "rv_flat_reader_close": (None, [P(c_void_p)]),
    "rv_flat_tokens": (c_int, [c_char_p, c_char_p, P(c_void_p)]),
    "rv_flat_encoder_open": (c_int, [c_char_p, c_char_p, P(c_void_p)]),
    "rv_flat_encoder_embed": (c_int, [c_void_p, c_char_p, c_char_p, P(c_void_p)]),
    "rv_flat_encoder_embed_tokens": (c_int, [c_void_p, c_void_p, c_char_p, P(c_void_p)]),
    "rv_flat_encoder_config": (c_int, [c_void_p, P(c_void_p)]),
    "rv_flat_encoder_close": (None, [P(c_void_p)]),
    "rv_flat_labels": (c_int, [c_char_p, c_char_p, P(c_void_p)]),
    "rv_flat_interrupt": (None, []),
}

# Calls a library may lack (older builds): declared when present.
_OPTIONAL = {
    "rv_arrays_new": (c_int, [c_char_p, P(c_void_p)]),
    "rv_arrays_add": (c_int, [c_void_p, c_char_p, c_char_p, c_int, P(c_int64), c_void_p]),
}


def _multiarch():
    m = sysconfig.get_config_var("MULTIARCH")
    return [m] if m else []


def _candidates():
    """(description, path or soname) in search order."""
    out = []
    env = os.environ.get("RINGVIT_LIB")
    if env:
        p = Path(env)
        if p.is_dir():
            out += [("RINGVIT_LIB folder", str(p / n)) for n in _SONAMES]
        else:
            out.append(("RINGVIT_LIB", str(p)))
        return out  # an explicit choice: nothing else is tried
    here = Path(__file__).resolve().parents
    # the repository, when the package runs from apps/python/ringvit
    if len(here) > 3 and (here[3] / "CMakeLists.txt").is_file():
        out.append(("build tree", str(here[3] / "build" / "libringvit.so")))
    # the prefix pip installed into: <P>/lib/pythonX.Y/site-packages/ringvit, or
    # Debian's <P>/local/lib/python3/dist-packages/ringvit
    prefixes = []
    if len(here) > 4 and here[3].name in ("lib", "lib64"):
        prefixes.append(here[4])
        if here[4].name == "local" and len(here) > 5:
            prefixes.append(here[5])
    dirs = []
    for prefix in dict.fromkeys(prefixes + [Path(sys.prefix), Path(sys.base_prefix),
                                            Path("/usr/local"), Path("/usr")]):
        for sub in ["lib"] + ["lib/" + m for m in _multiarch()] + ["lib64"]:
            dirs.append(Path(prefix) / sub)
    for d in dict.fromkeys(dirs):
        out += [("install prefix", str(d / n)) for n in _SONAMES]
    found = ctypes.util.find_library("ringvit")
    if found:
        out.append(("ldconfig", found))
    out += [("dynamic loader", n) for n in _SONAMES]
    return out


# Without these the file is not a libringvit with the flat calls at all.
_CORE = ("rv_last_error", "rv_flat_free", "rv_flat_build_info", "rv_flat_interrupt")


def _missing(name, where):
    def call(*args):
        raise LibraryNotFoundError(f"ringvit: {where} has no {name} (a libringvit older than "
                                   "this package?); set RINGVIT_LIB to a matching build")
    return call


def _declare(lib, where):
    for name in _CORE:
        getattr(lib, name)  # AttributeError: not a libringvit with the flat calls
    for name, (res, args) in _PROTOTYPES.items():
        f = getattr(lib, name, None)
        if f is None:
            setattr(lib, name, _missing(name, where))
        else:
            f.restype, f.argtypes = res, args
    for name, (res, args) in _OPTIONAL.items():
        f = getattr(lib, name, None)
        if f is not None:
            f.restype, f.argtypes = res, args


def load():
    """The loaded library (loaded on first use)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for what, cand in _candidates():
            is_path = os.sep in cand
            if is_path and not os.path.exists(cand):
                tried.append(f"  {what}: {cand} (no such file)")
                continue
            try:
                lib = ctypes.CDLL(cand)
            except OSError as e:
                tried.append(f"  {what}: {cand} ({e})")
                continue
            try:
                _declare(lib, cand)
            except AttributeError as e:
                tried.append(f"  {what}: {cand} (not a libringvit with the flat calls: {e})")
                continue
            _lib, _path = lib, cand
            return _lib
        raise LibraryNotFoundError(
            "ringvit: cannot load libringvit; set RINGVIT_LIB to the library file "
            "(e.g. build/libringvit.so). Looked in:\n" + "\n".join(tried))


def path():
    """Where the library was loaded from (loads it)."""
    load()
    return _path


def has(name):
    """Whether the library exports name."""
    f = getattr(load(), name, None)
    return f is not None and isinstance(f, ctypes._CFuncPtr)
