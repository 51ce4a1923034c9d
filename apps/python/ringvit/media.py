"""media.py: probe, frames, iter_frames and audio: the ingest stage as `ringvit
probe --json` and `ringvit frames` run it (same sampling rules, bit for bit),
through rv_flat_probe and the chunked reader (rv_flat_reader_*)."""

import ctypes
import json
from collections import namedtuple

import numpy as np

from . import _arrays, _call, _lib, _options

Frames = namedtuple("Frames", ["frames", "times", "source_times"])
Frames.__doc__ = """Sampled frames: frames uint8 (N, S, S, 3) RGB, times float64 (N)
the sample times, source_times float64 (N) the presentation time of the frame
each sample shows; seconds on the file's own clock."""


def _take_string(fn, *args):
    """Calls fn(*args, &char*) and returns the string, freeing the C copy."""
    lib = _lib.load()
    p = _call.out_call(fn, *args)
    try:
        return ctypes.string_at(p).decode("utf-8", "replace") if p else ""
    finally:
        lib.rv_flat_free(p)


def probe(path):
    """What a media file holds, from its headers: the dict `ringvit probe --json`
    prints (format, duration_s, streams, ...). Raises ringvit.Error."""
    p = _options.path_bytes(path)
    lib = _lib.load()
    return json.loads(_call.run(lambda: _take_string(lib.rv_flat_probe, p)))


def _reader_opts(fps, size, start, duration, pad, video, audio, threads, max_corrupt,
                 chunk_frames):
    return _options.dumps(_options.reader(fps, size, start, duration, pad, video, audio,
                                          threads, max_corrupt, chunk_frames))


def _chunks(path, opts, pick):
    """Yields pick(chunk) for each chunk of the reader (an Arrays); closing the
    generator closes the reader."""
    lib = _lib.load()
    reader = _call.run(lambda: _call.out_call(lib.rv_flat_reader_open, path, opts),
                       free=lambda h: lib.rv_flat_reader_close(ctypes.byref(ctypes.c_void_p(h))))
    try:
        while True:
            h = _call.run(lambda: _call.out_call(lib.rv_flat_reader_next, reader),
                          free=_arrays.free)
            if not h:
                return
            yield pick(_arrays.take(h))
    finally:
        lib.rv_flat_reader_close(ctypes.byref(ctypes.c_void_p(reader)))


def _frames_of(chunk):
    return Frames(chunk["frames"], chunk["frame_time"], chunk["frame_source_time"])


def iter_frames(path, fps=1, size=224, start=None, duration=None, pad=False, *,
                audio=True, threads=None, max_corrupt=None, chunk_frames=None):
    """Yields the sampled frames in chunks (Frames of up to chunk_frames samples,
    default 32), so a long recording never sits in memory. The arguments are
    `ringvit frames`' flags; audio=False is --no-audio (the sample grid then
    starts at the first video frame rather than the earlier of video and audio).
    Closing the generator early closes the reader. Arguments are checked now
    (ValueError, TypeError); the file is opened at the first chunk."""
    p = _options.path_bytes(path)
    opts = _reader_opts(fps, size, start, duration, pad, True, audio, threads, max_corrupt,
                        chunk_frames)
    return _chunks(p, opts, _frames_of)


def frames(path, fps=1, size=224, start=None, duration=None, pad=False, *, audio=True,
           threads=None, max_corrupt=None):
    """All sampled frames at once: Frames(frames uint8 [N, S, S, 3], times float64
    [N], source_times float64 [N]), what `ringvit frames` writes as frames,
    frame_time and frame_source_time."""
    parts = list(iter_frames(path, fps, size, start, duration, pad, audio=audio,
                             threads=threads, max_corrupt=max_corrupt))
    if not parts:
        return Frames(np.empty((0, size, size, 3), np.uint8), np.empty(0), np.empty(0))
    return Frames(*(np.concatenate([getattr(c, f) for c in parts]) for f in Frames._fields))


def audio(path, start=None, duration=None, *, threads=None, max_corrupt=None):
    """The audio as float32 mono 16 kHz samples (the best audio stream resampled as
    `ffmpeg -ac 1 -ar 16000`), read without the video: sample j is at the audio's
    start (or start) + j / 16000 s."""
    p = _options.path_bytes(path)
    opts = _reader_opts(1, None, start, duration, False, False, True, threads, max_corrupt,
                        None)
    parts = list(_chunks(p, opts, lambda c: c["audio"]))
    return np.concatenate(parts) if parts else np.empty(0, np.float32)
