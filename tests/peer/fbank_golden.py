#!/usr/bin/python3
"""fbank_golden.py: the peer reference for ringvit's log-mel filterbank
(tokenize/fbank.c), so tests/unit/test_tokenize_fbank.c can check it against
torchaudio.

    fbank_golden.py OUT.safetensors [NAME=SIGNAL.f32 ...]

Makes a set of test signals (16 kHz, float32 in [-1, 1]), or takes the given
ones (raw little-endian float32 files, e.g. the samples of one attention block
that tests/unit/test_tokenize_ast_blocks.c cuts out), and, for each NAME,
writes (safetensors laid out by hand: 8-byte header length, JSON header, raw
little-endian data)
    NAME/wave     (n) F32            the signal
    NAME/fbank    (frames, 128) F32  torchaudio.compliance.kaldi.fbank of it in
                                     float32, with the Audio Spectrogram
                                     Transformer's call (below)
    NAME/fbank64  (frames, 128) F64  the same computed in float64
The call, as the issue and AST make it:
    fbank(w, htk_compat=True, window_type='hanning', num_mel_bins=128,
          dither=0.0, frame_shift=10, use_energy=False, sample_frequency=16000)
torchaudio asserts on signals shorter than one frame (400 samples); ringvit gives
zero frames there, and so does this file (shape (0, 128)).

The signals: tones, a chord up to 7.9 kHz, a chirp, white and Gaussian noise,
silence, a hard-clipped sine, a DC offset, a very quiet tone (mel energies near
the log floor), an impulse, and lengths that are not a whole number of frames
(399, 400, 559, ...). Seeded: the same file every run.
"""
import json
import math
import struct
import sys

import numpy as np
import torch
import torchaudio.compliance.kaldi as kaldi

RATE = 16000


def signals():
    rng = np.random.default_rng(20240601)
    t = lambda n: np.arange(n, dtype=np.float64) / RATE
    out = {}
    n = RATE + 123
    out["tone440"] = 0.5 * np.sin(2 * math.pi * 440 * t(n))
    n = 8000 + 57
    out["chord"] = (0.3 * np.sin(2 * math.pi * 1000 * t(n)) + 0.2 * np.sin(2 * math.pi * 5500 * t(n))
                    + 0.1 * np.sin(2 * math.pi * 7900 * t(n)))
    n = 24000 + 7
    f0, f1, dur = 50.0, 7950.0, n / RATE
    tt = t(n)
    out["chirp"] = 0.8 * np.sin(2 * math.pi * (f0 * tt + (f1 - f0) / (2 * dur) * tt * tt))
    out["noise"] = rng.uniform(-0.5, 0.5, 12345)
    out["gauss"] = rng.normal(0.0, 0.01, 4001)
    out["silence"] = np.zeros(3299)
    out["clipped"] = np.clip(3.0 * np.sin(2 * math.pi * 300 * t(RATE + 159)), -1.0, 1.0)
    out["dc"] = 0.3 + 0.1 * np.sin(2 * math.pi * 200 * t(5000))
    out["quiet"] = 1e-4 * np.sin(2 * math.pi * 2000 * t(4000))
    imp = np.zeros(3000)
    imp[1000] = 1.0
    out["impulse"] = imp
    out["short399"] = 0.5 * np.sin(2 * math.pi * 700 * t(399))
    out["short400"] = 0.5 * np.sin(2 * math.pi * 700 * t(400))
    out["short559"] = rng.uniform(-0.9, 0.9, 559)
    return {k: v.astype(np.float32) for k, v in out.items()}


def fbank(wave, dtype):
    if wave.shape[0] < 400:
        return np.zeros((0, 128), dtype=np.float32 if dtype == torch.float32 else np.float64)
    w = torch.from_numpy(wave.astype(np.float64)).to(dtype).unsqueeze(0)
    fb = kaldi.fbank(w, htk_compat=True, window_type="hanning", num_mel_bins=128, dither=0.0,
                     frame_shift=10, use_energy=False, sample_frequency=RATE)
    return fb.numpy()


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        dt = {np.dtype("float32"): "F32", np.dtype("float64"): "F64"}[arr.dtype]
        raw = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def given(args):
    out = {}
    for a in args:
        name, sep, path = a.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"fbank_golden.py: {a!r} is not NAME=SIGNAL.f32")
        out[name] = np.fromfile(path, dtype="<f4")
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    tensors = []
    waves = given(sys.argv[2:]) if len(sys.argv) > 2 else signals()
    for name, wave in waves.items():
        tensors.append((name + "/wave", wave))
        tensors.append((name + "/fbank", fbank(wave, torch.float32).astype(np.float32)))
        tensors.append((name + "/fbank64", fbank(wave, torch.float64).astype(np.float64)))
    write_safetensors(sys.argv[1], tensors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
