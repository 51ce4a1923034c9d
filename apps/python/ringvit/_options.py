"""_options.py: checks the arguments of the public calls and turns them into the
JSON option text of encoder/rv_flat.h. Every check runs before any C call: a bad
type raises TypeError, a bad value ValueError, each naming the argument. The
ranges are the command's (`ringvit frames`, `tokens`, `embed` flags)."""

import json
import math
import numbers
import os
import re
from fractions import Fraction

DEVICES = ("cpu", "cuda")
STRATEGIES = ("ring", "allgather", "ulysses")
SHARDS = ("contiguous", "zigzag")

_RATIONAL = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def path_bytes(path, what="path"):
    """A file path as the bytes the C calls take (str, bytes or os.PathLike)."""
    if isinstance(path, (str, bytes, os.PathLike)):
        p = os.fsencode(path)
    else:
        raise TypeError(f"{what} must be a str, bytes or os.PathLike, not {type(path).__name__}")
    if not p:
        raise ValueError(f"{what} is empty")
    if b"\0" in p:
        raise ValueError(f"{what} contains a NUL byte")
    return p


def _number(name, v, lo, hi, lo_open=False):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a number, not {type(v).__name__}")
    v = float(v)
    if not math.isfinite(v) or v > hi or (v <= lo if lo_open else v < lo):
        low = f"({lo}" if lo_open else f"[{lo}"
        raise ValueError(f"{name} must be in {low}, {hi}], got {v!r}")
    return v


def _int(name, v, lo, hi):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    v = int(v)
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def _bool(name, v):
    if not isinstance(v, bool):
        raise TypeError(f"{name} must be True or False, not {type(v).__name__}")
    return v


def fps(v):
    """fps > 0: a number, a Fraction, or text "N/D" / "29.97"."""
    if isinstance(v, Fraction):
        if v <= 0:
            raise ValueError(f"fps must be > 0, got {v}")
        return f"{v.numerator}/{v.denominator}"
    if isinstance(v, str):
        m = _RATIONAL.match(v)
        if m:
            n, d = int(m.group(1)), int(m.group(2))
            if n <= 0 or d <= 0:
                raise ValueError(f"fps must be > 0 with a positive denominator, got {v!r}")
            return f"{n}/{d}"
        try:
            v = float(v)
        except ValueError:
            raise ValueError(f"fps must be a number or 'N/D' text, got {v!r}") from None
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        if v <= 0:
            raise ValueError(f"fps must be > 0, got {v}")
        return int(v)
    return _number("fps", v, 0, 1e6, lo_open=True)


def size(v):
    return _int("size", v, 8, 4096)


def reader(fps_=1, size_=None, start=None, duration=None, pad=False, video=True, audio=True,
           threads=None, max_corrupt=None, chunk_frames=None):
    """The reader keys (frames, audio, and the shared part of tokens and embed)."""
    o = {"fps": fps(fps_)}
    if size_ is not None:
        o["size"] = size(size_)
    if start is not None:
        o["start"] = _number("start", start, 0, 1e8)
    if duration is not None:
        o["duration"] = _number("duration", duration, 1e-6, 1e8)
    # Only what differs from the defaults is sent: a model without a modality
    # leaves it out by itself, while an explicit true would insist on it.
    if _bool("pad", pad):
        o["pad"] = True
    if not _bool("video", video):
        o["video"] = False
    if not _bool("audio", audio):
        o["audio"] = False
    if not video and not audio:
        raise ValueError("video=False and audio=False leave nothing to read")
    if threads is not None:
        o["threads"] = _int("threads", threads, 0, 256)
    if max_corrupt is not None:
        o["max_corrupt"] = _max_corrupt(max_corrupt)
    if chunk_frames is not None:
        o["chunk_frames"] = _int("chunk_frames", chunk_frames, 1, 1 << 20)
    return o


def _max_corrupt(v):
    """A count of corrupt packets (int, 0 to 2**30) or a share of the file's
    packets as text "P%" (0 to 100)."""
    if isinstance(v, str):
        t = v.strip()
        try:
            share = float(t[:-1]) if t.endswith("%") else float("nan")
        except ValueError:
            share = float("nan")
        if not 0 <= share <= 100:
            raise ValueError(f"max_corrupt text must be a share like '0.5%' (0% to 100%), "
                             f"got {v!r}")
        return t
    return _int("max_corrupt", v, 0, 1 << 30)


def cp(v):
    return _int("cp", v, 1, 1024)


def model(v):
    """A model spec: a folder, a weights file or a preset name."""
    if isinstance(v, (str, bytes, os.PathLike)):
        p = os.fsdecode(v)
    else:
        raise TypeError(f"model must be a str or os.PathLike, not {type(v).__name__}")
    if not p or "\0" in p:
        raise ValueError(f"model must be a folder, a weights file or a preset name, got {p!r}")
    return p


def attention(v):
    """'full', 'frame', 'window=S' or 'block=S' (0 < S <= 1e7 seconds)."""
    if not isinstance(v, str):
        raise TypeError(f"attention must be a str, not {type(v).__name__}")
    if v in ("full", "frame"):
        return v
    for kind in ("window=", "block="):
        if v.startswith(kind):
            try:
                s = float(v[len(kind):])
            except ValueError:
                s = float("nan")
            if not (math.isfinite(s) and 0 < s <= 1e7):
                raise ValueError(f"attention {v!r}: the seconds must be a number in (0, 1e7]")
            return v
    raise ValueError(f"attention must be 'full', 'frame', 'window=SECONDS' or "
                     f"'block=SECONDS', got {v!r}")


def encoder(cp_=1, device="cpu", strategy="ring", attention_="full", causal=False,
            threads=None, seed=None, precision="auto"):
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    o = {"cp": cp(cp_), "device": device, "strategy": strategy,
         "attention": attention(attention_), "causal": _bool("causal", causal)}
    if threads is not None:
        o["threads"] = _int("threads", threads, 1, 1024)
    if seed is not None:
        o["seed"] = _int("seed", seed, 0, (1 << 63) - 1)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "auto":
        o["precision"] = precision
    return o


DTYPES = ("f32", "f16", "bf16")
PRECISIONS = ("auto", "f32", "bf16")


def embed(segment=None, hop=None, tokens=False, dtype="f32", normalize=False):
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    o = {"tokens": _bool("tokens", tokens), "dtype": dtype,
         "normalize": _bool("normalize", normalize)}
    if segment is not None:
        o["segment"] = _number("segment", segment, 0.001, 1e9)
    if hop is not None:
        o["hop"] = _number("hop", hop, 0.001, 1e9)
    return o


def dumps(opts):
    return json.dumps(opts).encode()
