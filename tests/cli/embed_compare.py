#!/usr/bin/python3
"""embed_compare.py: checks `ringvit embed` outputs, reading safetensors by hand
(json + numpy only, no safetensors package), for tests/cli/test_embed.sh.

  embed_compare.py same A B [--rtol R]    the tensors of A and B agree: every
        tensor both hold, compared as max |a - b| / max(max |b|, 1e-30) <= R
        (default SAME_RTOL; 0: identical) for floats, exactly for integers; both
        must hold the same tensor names
  embed_compare.py check FILE [key=value ...]   FILE is a complete embed output:
        the tensors every output has, consistent shapes, finite values; each
        key=value is a check: tokens=N (S), segments=G, video=N, audio=N
        (per-modality token counts in the metadata), cls=0|1, per_token=0|1
        (the --tokens tensors present), dim=D
  embed_compare.py show FILE              prints the tensor names and shapes
  embed_compare.py complete FILE...       prints each FILE that is a readable output
Exit 0 when the check holds, 1 (with a message) when not, 2 on bad usage.
"""
import json
import struct
import sys

import numpy as np

# Tolerances, relative: max |a - b| / max |b|.
# `same` by default: two outputs of different computations of one embedding (rank
# counts, strategies, spans that change nothing): f32 rounding (epsilon 1.2e-7)
# of attention's sums split differently, sqrt(S) * eps per layer. Callers pass
# --rtol 0 for two runs of the same computation (then they must be identical).
SAME_RTOL = 1e-5
# `check`: a pooled mean (f32, summed by the library) against the mean of its
# per-token outputs in float64, relative to the tokens' magnitude (the summands'
# scale): sqrt(S) * eps of a few thousand tokens, with room.
POOL_RTOL = 1e-4

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U8": np.uint8,
          "I32": np.int32, "F16": np.float16}


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than a safetensors header")
    n = struct.unpack("<Q", raw[:8])[0]
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the file ({len(raw)} bytes)")
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    for name, t in head.items():
        b, e = t["data_offsets"]
        dt = np.dtype(DTYPES[t["dtype"]]).newbyteorder("<")
        count = int(np.prod(t["shape"], dtype=np.int64)) if t["shape"] else 1
        if e - b != count * dt.itemsize or e > len(data):
            raise ValueError(f"{path}: tensor {name}: {e - b} bytes for shape {t['shape']}")
        tensors[name] = np.frombuffer(data[b:e], dtype=dt).reshape(t["shape"])
    return tensors, meta


def fail(msg):
    print("embed_compare: " + msg)
    sys.exit(1)


def same(a_path, b_path, rtol):
    a, _ = load(a_path)
    b, _ = load(b_path)
    if set(a) != set(b):
        fail(f"tensor names differ: {sorted(set(a) ^ set(b))}")
    worst = 0.0
    for name in sorted(a):
        x, y = a[name], b[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            fail(f"{name}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
        if x.dtype.kind in "iu":
            if not np.array_equal(x, y):
                fail(f"{name}: integer values differ")
            continue
        xd, yd = x.astype(np.float64), y.astype(np.float64)
        if not (np.isfinite(xd).all() and np.isfinite(yd).all()):
            fail(f"{name}: non-finite values")
        scale = max(float(np.abs(yd).max()) if yd.size else 0.0, 1e-30)
        err = float(np.abs(xd - yd).max()) / scale if xd.size else 0.0
        worst = max(worst, err)
        if err > rtol:
            fail(f"{name}: relative error {err:.3g} > {rtol:g}")
    print(f"same: {len(a)} tensors, worst relative error {worst:.3g}")


def check(path, wants):
    t, meta = load(path)
    need = ["global", "segments", "segment_start", "segment_end", "segment_tokens",
            "video_mean", "audio_mean"]
    for name in need:
        if name not in t:
            fail(f"{path}: no tensor {name}")
    if meta.get("format") != "ringvit-embed":
        fail(f"{path}: metadata format is {meta.get('format')!r}")
    for key in ["source", "probe", "model", "model_hash", "config", "cp", "strategy",
                "ringvit_version", "tokens"]:
        if key not in meta:
            fail(f"{path}: no metadata {key}")
    json.loads(meta["probe"])
    cfg = json.loads(meta["config"])
    d = t["global"].shape[0]
    g = t["segments"].shape[0]
    if t["segments"].shape != (g, d) or t["segment_start"].shape != (g,) or \
            t["segment_end"].shape != (g,) or t["video_mean"].shape != (d,):
        fail(f"{path}: inconsistent shapes")
    for name, x in t.items():
        if x.dtype.kind == "f" and not np.isfinite(x).all():
            fail(f"{path}: {name} has non-finite values")
    if not (np.diff(t["segment_start"]) > 0).all() or (t["segment_end"] <= t["segment_start"]).any():
        fail(f"{path}: segment times out of order")
    s = int(meta["tokens"])
    per_token = "tokens" in t
    if per_token:
        if t["tokens"].shape != (s, d) or t["token_time"].shape != (s, 2) or \
                t["token_modality"].shape != (s,) or t["token_pos"].shape != (s, 3):
            fail(f"{path}: per-token tensors do not have {s} rows")
        nv = int((t["token_modality"] == 0).sum())
        na = int((t["token_modality"] == 1).sum())
        # The pooled means are the means of the per-token outputs.
        for m, name, count in ((0, "video_mean", nv), (1, "audio_mean", na)):
            if count:
                ref = t["tokens"][t["token_modality"] == m].astype(np.float64).mean(0)
                err = np.abs(ref - t[name]).max() / max(np.abs(ref).max(), 1e-30)
                if err > POOL_RTOL:
                    fail(f"{path}: {name} is not the mean of its tokens (rel err {err:.3g})")
        body = t["tokens"][t["token_modality"] != 2].astype(np.float64)
        err = np.abs(body.mean(0) - t["global"]).max() / max(np.abs(body).max(), 1e-30)
        if err > POOL_RTOL:
            fail(f"{path}: global is not the mean of the tokens but CLS (rel err {err:.3g})")
        if int(t["segment_tokens"].sum()) != nv + na:
            fail(f"{path}: segment_tokens sum {int(t['segment_tokens'].sum())} != {nv + na}")
    for w in wants:
        k, v = w.split("=", 1)
        got = {"tokens": s, "segments": g, "video": int(meta.get("video_tokens", -1)),
               "audio": int(meta.get("audio_tokens", -1)), "cls": int("cls" in t),
               "per_token": int(per_token), "dim": d, "cp": int(meta["cp"])}.get(k)
        if got is None:
            print(f"embed_compare: unknown check {k}")
            sys.exit(2)
        if got != int(v):
            fail(f"{path}: {k} is {got}, want {v}")
    if cfg.get("dim") not in (None, d):
        fail(f"{path}: config dim {cfg.get('dim')} but global has {d}")
    print(f"check: {path}: {s} tokens, {g} segments, D {d}")


def main(argv):
    try:
        if len(argv) >= 3 and argv[0] == "same":
            rtol = SAME_RTOL
            if len(argv) == 5 and argv[3] == "--rtol":
                rtol = float(argv[4])
            same(argv[1], argv[2], rtol)
        elif len(argv) >= 2 and argv[0] == "check":
            check(argv[1], argv[2:])
        elif len(argv) >= 1 and argv[0] == "complete":
            for path in argv[1:]:
                try:
                    load(path)
                    print(path)
                except (OSError, ValueError, KeyError, SystemExit):
                    pass
        elif len(argv) == 2 and argv[0] == "show":
            t, meta = load(argv[1])
            for name, x in t.items():
                print(name, x.dtype, list(x.shape))
            print(json.dumps(meta, indent=1))
        else:
            print(__doc__)
            sys.exit(2)
    except (OSError, ValueError, KeyError) as e:
        fail(str(e))


if __name__ == "__main__":
    main(sys.argv[1:])
