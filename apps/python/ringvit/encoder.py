"""encoder.py: ringvit.Encoder, a model with cp context-parallel ranks (threads of
this process) that embeds recordings or token arrays as `ringvit embed` does
(rv_flat_encoder_*). One call at a time per Encoder (a lock); several Encoders
may work on different threads at once."""

import ctypes
import json
import os
import threading

from . import _arrays, _call, _lib, _options
from .errors import Error


def _close_handle(h):
    if h:
        _lib.load().rv_flat_encoder_close(ctypes.byref(ctypes.c_void_p(h)))


class Encoder:
    """Encoder(model="tiny", cp=1, device="cpu", strategy="ring", attention="full",
    *, causal=False, threads=None, seed=None, precision="auto")

    model: a model folder (Hugging Face layout), a weights file or a preset name
    ("tiny", "small", "base": random weights, seeded by seed). cp: ranks sharing
    one recording; device: "cpu" or "cuda" (the encoder's blocks on a GPU, as
    `ringvit embed --device cuda`; refused with ringvit.Error and the command's
    message where it cannot run: a build without CUDA, no GPU); strategy: "ring",
    "allgather" or "ulysses"; attention: "full", "window=S", "block=S" or "frame";
    threads: compute threads in all, shared by the cp ranks (default every core);
    precision: "auto" (f32 on the CPU, bf16 on a GPU), "f32" or "bf16", as
    `ringvit embed --precision` (bf16 on the CPU where it has AVX-512 BF16 or AMX,
    refused with ringvit.Error elsewhere).
    Use as a context manager or call close()."""

    def __init__(self, model="tiny", cp=1, device="cpu", strategy="ring", attention="full", *,
                 causal=False, threads=None, seed=None, precision="auto"):
        self._h = None
        self._lock = threading.Lock()
        m = os.fsencode(_options.model(model))
        opts = _options.dumps(_options.encoder(cp, device, strategy, attention, causal,
                                               threads, seed, precision))
        self.model = model
        self.cp = cp
        lib = _lib.load()
        self._h = _call.run(lambda: _call.out_call(lib.rv_flat_encoder_open, m, opts),
                            free=_close_handle)

    def _handle(self):
        if not self._h:
            raise Error("ringvit: the Encoder is closed")
        return self._h

    @property
    def config(self):
        """The model's config (dict)."""
        lib = _lib.load()
        with self._lock:
            p = _call.out_call(lib.rv_flat_encoder_config, self._handle())
        try:
            return json.loads(ctypes.string_at(p).decode())
        finally:
            lib.rv_flat_free(p)

    def embed(self, source, *, fps=1, size=None, start=None, duration=None, pad=False,
              video=True, audio=True, segment=None, hop=None, tokens=False, dtype="f32",
              normalize=False, decode_threads=None, max_corrupt=None):
        """Embeds source, a media path or the token arrays ringvit.tokens returned
        (an Arrays, or a dict of arrays plus meta=...), and returns the tensors
        `ringvit embed` writes (global, segments, segment_start, segment_end,
        segment_tokens, video_mean, audio_mean, pooled, ...; tokens=True adds every
        token's output) as an Arrays, .meta the metadata: the same values, bit for
        bit, as the command's file for the same options. The sampling arguments
        (fps, size, start, duration, pad, video, audio, decode_threads,
        max_corrupt) apply to a path only; segment and hop (seconds), tokens,
        dtype ("f32", "f16" or "bf16": the embeddings rounded to nearest even;
        bf16 comes back as its uint16 bit patterns, ringvit.bf16_to_f32 widens
        them) and normalize (L2 rows of global, segments, tokens) to both."""
        lib = _lib.load()
        eo = _options.embed(segment, hop, tokens, dtype, normalize)
        if isinstance(source, dict):
            reading = dict(fps=fps, size=size, start=start, duration=duration, pad=pad,
                           video=video, audio=audio, decode_threads=decode_threads,
                           max_corrupt=max_corrupt)
            defaults = dict(fps=1, size=None, start=None, duration=None, pad=False, video=True,
                            audio=True, decode_threads=None, max_corrupt=None)
            given = sorted(k for k in reading if reading[k] != defaults[k])
            if given:
                raise ValueError(f"{', '.join(given)}: sampling arguments apply to a path, "
                                 "not to token arrays (they were sampled already)")
            opts = _options.dumps(eo)
            meta = getattr(source, "meta", None)
            with self._lock:
                h = self._handle()
                toks = _arrays.to_handle(source, meta)
                try:
                    out = _call.run(lambda: _call.out_call(lib.rv_flat_encoder_embed_tokens,
                                                           h, toks, opts),
                                    free=_arrays.free)
                finally:
                    _arrays.free(toks)
        else:
            p = _options.path_bytes(source, "source")
            o = _options.reader(fps, size, start, duration, pad, video, audio, decode_threads,
                                max_corrupt)
            o.update(eo)
            opts = _options.dumps(o)
            with self._lock:
                h = self._handle()
                out = _call.run(lambda: _call.out_call(lib.rv_flat_encoder_embed, h, p, opts),
                                free=_arrays.free)
        return _arrays.take(out)

    def close(self):
        """Frees the model and ranks; further calls raise ringvit.Error."""
        with self._lock:
            h, self._h = self._h, None
            _close_handle(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None):
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self):
        state = "open" if self._h else "closed"
        return f"ringvit.Encoder(model={self.model!r}, cp={self.cp}, {state})"
