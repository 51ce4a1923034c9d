"""test_errors.py: failures raise the documented exception with the library's
message (the same text the command prints), bad arguments raise ValueError or
TypeError before any C call, and 1000 failing calls leave the resident set flat."""

import os

import numpy as np

import pytest

from conftest import load_safetensors, rss_kb, run_cli

import ringvit
from ringvit import _lib

# The GPU's embedding from Python against `ringvit embed --device cuda`'s: the same
# computation in two processes, compared by normalised error (max |a - b| /
# max |b|) within the GPU's stated bf16 error (test_gpu_cli.sh's) until a device
# run shows it bit-identical.
GPU_RTOL = 2e-2


def _cli_error(*args):
    """The message `ringvit ARGS` prints on failure (exit status 1)."""
    r = run_cli(*args, check=False)
    assert r.returncode == 1, r.stderr
    return r.stderr


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory):
    p = tmp_path_factory.mktemp("bad") / "noise.mp4"
    p.write_bytes(os.urandom(64 << 10))
    return p


def test_missing_file(tmp_path):
    missing = tmp_path / "missing.mp4"
    for call in (ringvit.probe, ringvit.frames, ringvit.audio, ringvit.tokens,
                 lambda p: list(ringvit.iter_frames(p))):
        with pytest.raises(ringvit.Error) as e:
            call(missing)
        assert isinstance(e.value, RuntimeError)
        assert str(missing) in str(e.value) and "no such file" in str(e.value)
        assert e.value.status == -3
    assert str(e.value) in _cli_error("frames", missing, "-o", tmp_path / "x.safetensors")


def test_corrupt_file(corrupt, tmp_path):
    with pytest.raises(ringvit.Error) as e:
        ringvit.frames(corrupt)
    msg = str(e.value)
    assert str(corrupt) in msg
    assert msg in _cli_error("frames", corrupt, "-o", tmp_path / "x.safetensors")
    with pytest.raises(ringvit.Error) as e:
        ringvit.probe(corrupt)
    assert str(e.value) in _cli_error("probe", corrupt)
    with ringvit.Encoder("tiny") as enc, pytest.raises(ringvit.Error) as e:
        enc.embed(corrupt)
    assert str(corrupt) in str(e.value)


def test_bad_model(tmp_path, clips):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"x\": 1}")
    for model in (bad, tmp_path / "no-such-model", "no-such-preset"):
        with pytest.raises(ringvit.Error) as e:
            ringvit.Encoder(model)
        msg = str(e.value)
        assert msg and str(model) in msg
        if model != "no-such-preset":  # the command refuses that one as a usage error
            assert msg in _cli_error("embed", clips[0], "--model", model, "-o",
                                     tmp_path / "x.safetensors")
        with pytest.raises(ringvit.Error) as e:
            ringvit.tokens(clips[0], model=model)
        assert str(model) in str(e.value)


BAD_ARGS = [
    (ringvit.frames, {"fps": 0}, ValueError, "fps"),
    (ringvit.frames, {"fps": -1.5}, ValueError, "fps"),
    (ringvit.frames, {"fps": "0/1"}, ValueError, "fps"),
    (ringvit.frames, {"fps": "fast"}, ValueError, "fps"),
    (ringvit.frames, {"size": 4}, ValueError, "size"),
    (ringvit.frames, {"size": 5000}, ValueError, "size"),
    (ringvit.frames, {"size": 64.0}, TypeError, "size"),
    (ringvit.frames, {"size": True}, TypeError, "size"),
    (ringvit.frames, {"start": -1}, ValueError, "start"),
    (ringvit.frames, {"duration": 0}, ValueError, "duration"),
    (ringvit.frames, {"pad": "yes"}, TypeError, "pad"),
    (ringvit.frames, {"max_corrupt": "lots"}, ValueError, "max_corrupt"),
    (ringvit.iter_frames, {"chunk_frames": 0}, ValueError, "chunk_frames"),
    (ringvit.audio, {"duration": float("nan")}, ValueError, "duration"),
    (ringvit.tokens, {"cp": 0}, ValueError, "cp"),
    (ringvit.tokens, {"video": False, "audio": False}, ValueError, "nothing"),
    (ringvit.tokens, {"model": 3}, TypeError, "model"),
    (ringvit.tokens, {"shard": "random"}, ValueError, "shard"),
    (ringvit.tokens, {"attention": "wide"}, ValueError, "attention"),
    (ringvit.Encoder, {"cp": 0}, ValueError, "cp"),
    (ringvit.Encoder, {"device": "tpu"}, ValueError, "device"),
    (ringvit.Encoder, {"strategy": "tree"}, ValueError, "strategy"),
    (ringvit.Encoder, {"attention": "window=0"}, ValueError, "attention"),
    (ringvit.Encoder, {"attention": "block=x"}, ValueError, "attention"),
    (ringvit.Encoder, {"attention": "local"}, ValueError, "attention"),
    (ringvit.Encoder, {"threads": 0}, ValueError, "threads"),
]


@pytest.mark.parametrize("fn,kw,exc,word", BAD_ARGS)
def test_bad_arguments_before_c(monkeypatch, clips, fn, kw, exc, word):
    """Checked in Python: with the library made unloadable, the argument error
    still comes (no C call was needed to find it)."""
    def no_library():
        raise AssertionError("reached the library")
    monkeypatch.setattr(_lib, "load", no_library)
    with pytest.raises(exc, match=word):
        if fn is ringvit.Encoder:
            fn(**kw)
        else:
            fn(clips[0], **kw)
    with pytest.raises(TypeError):
        ringvit.probe(42)


def test_device_cuda_as_the_command(clips, tmp_path):
    """device="cuda" works from Python where `ringvit embed --device cuda` does, and is
    refused with the command's own message where it cannot run (no CUDA in the build,
    no GPU)."""
    out = tmp_path / "cuda.safetensors"
    r = run_cli("embed", clips[0], "--device", "cuda", "-o", out, "--quiet", check=False)
    if r.returncode != 0:
        msg = r.stderr.strip().split("embed: ", 1)[1]
        assert msg.startswith("device cuda:"), r.stderr
        with pytest.raises(ringvit.Error) as e:
            ringvit.Encoder("tiny", device="cuda")
        assert str(e.value).endswith(msg) and e.value.status < 0
    else:
        cli, _ = load_safetensors(out)
        with ringvit.Encoder("tiny", device="cuda") as enc:
            py = enc.embed(clips[0])
        a, b = py["global"].astype(np.float64), cli["global"].astype(np.float64)
        err = float(np.abs(a - b).max()) / max(float(np.abs(b).max()), 1e-30)
        assert err <= GPU_RTOL, f"global differs from the command's by {err:.3g}"


def test_embed_bad_arguments(clips):
    with ringvit.Encoder("tiny") as enc:
        with pytest.raises(ValueError, match="segment"):
            enc.embed(clips[0], segment=0)
        with pytest.raises(ValueError, match="hop"):
            enc.embed(clips[0], hop=-1)
        with pytest.raises(TypeError, match="tokens"):
            enc.embed(clips[0], tokens=1)


def test_failing_calls_do_not_leak(tmp_path, corrupt, clips):
    """1000 failing calls of every kind (after a warm-up): the resident set stays
    within 5 MB (what the calls allocate on failure is freed, the arrays and
    handles of the library included)."""
    missing = str(tmp_path / "missing.mp4")
    bad_model = tmp_path / "bad.safetensors"
    bad_model.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    enc = ringvit.Encoder("tiny")
    calls = [lambda: ringvit.probe(missing), lambda: ringvit.probe(corrupt),
             lambda: ringvit.frames(corrupt), lambda: list(ringvit.iter_frames(missing)),
             lambda: ringvit.audio(corrupt), lambda: ringvit.tokens(missing),
             lambda: ringvit.tokens(clips[0], model=bad_model),
             lambda: ringvit.Encoder(bad_model), lambda: enc.embed(corrupt),
             lambda: enc.embed(missing)]

    def fail_many(n):
        for i in range(n):
            try:
                calls[i % len(calls)]()
            except ringvit.Error:
                pass
            else:
                raise AssertionError("the call did not fail")

    try:
        fail_many(100)  # warm-up: allocator pools, the library's lazy state
        before = rss_kb()
        fail_many(1000)
        grown = rss_kb() - before
    finally:
        enc.close()
    assert grown < 5 * 1024, f"the resident set grew by {grown} kB over 1000 failing calls"
