"""test_tokens_embed.py: ringvit.tokens against `ringvit tokens -o` and
ringvit.Encoder.embed against `ringvit embed -o`: every tensor bit-identical and
every metadata value equal, at cp 1, 2 and 3, with spans, strategies, per-token
outputs, dtype and normalize (one pipeline: both run the library's embed job with
the same thread split); embedding token arrays equals embedding the path; the
Encoder's life cycle."""

import json

import numpy as np
import pytest

from conftest import cli_tensors

import ringvit


def _same(py, cli):
    """The same tensors as the command wrote: names, dtypes, shapes and bytes."""
    assert sorted(py) == sorted(cli), (sorted(py), sorted(cli))
    for name, ref in cli.items():
        got = py[name]
        assert got.dtype == ref.dtype and got.shape == ref.shape, name
        assert got.tobytes() == ref.tobytes(), name


def _same_meta(py, meta):
    """Every metadata key the command writes, with the same value."""
    assert sorted(py.meta) == sorted(meta), (sorted(py.meta), sorted(meta))
    for k, v in meta.items():
        assert py.meta[k] == _parsed(v) or py.meta[k] == v, (k, py.meta[k], v)


def _parsed(text):
    """A metadata string of the command's file as a value (JSON where it parses)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


TIMINGS = ("wall_s", "tokenize_cpu_s", "tokenize_tokens_per_s")


def _report(r):
    """The tokens report without what differs from run to run (timings) or names
    the command's output file."""
    r = dict(r, recording={k: v for k, v in r["recording"].items() if k not in TIMINGS})
    r.pop("output", None)
    return r


# The tiny preset's tokenizer is the command's default plus a class token.
TOKEN_CASES = [
    ({}, ["--cls"]),
    ({"fps": 2, "size": 64, "start": 0.5, "cp": 3, "shard": "zigzag"},
     ["--cls", "--fps", "2", "--size", "64", "--start", "0.5", "--cp", "3", "--shard", "zigzag"]),
    ({"audio": False, "size": 32, "pad": True}, ["--cls", "--no-audio", "--size", "32", "--pad"]),
    ({"attention": "block=1", "size": 32}, ["--cls", "--block", "1", "--size", "32"]),
]


@pytest.mark.parametrize("kw,flags", TOKEN_CASES)
def test_tokens_equal_cli(clips, tmp_path, kw, flags):
    t, meta = cli_tensors(tmp_path, "tokens", clips[0], *flags)
    py = ringvit.tokens(clips[0], model="tiny", **kw)
    assert isinstance(py, ringvit.Arrays) and isinstance(py.meta, dict)
    _same(py, t)
    assert all(a.flags.owndata for a in py.values())
    assert py.meta["format"] == meta["format"] == "ringvit-tokens"
    assert py.meta["time_origin"] == float(meta["time_origin"])
    assert py.meta["probe"] == json.loads(meta["probe"])
    assert _report(py.meta["tokens"]) == _report(json.loads(meta["tokens"]))


@pytest.fixture(scope="module")
def encoders():
    with ringvit.Encoder("tiny") as e1, ringvit.Encoder("tiny", cp=2) as e2:
        yield {1: e1, 2: e2}


@pytest.mark.parametrize("cp", [1, 2])
def test_embed_equals_cli(clips, tmp_path, encoders, cp):
    for clip in clips:
        t, meta = cli_tensors(tmp_path, "embed", clip, "--model", "tiny", "--cp", str(cp))
        py = encoders[cp].embed(clip)
        _same(py, t)
        assert py["global"].shape == (192,)
        _same_meta(py, meta)


def test_embed_options_equal_cli(clips, tmp_path, encoders):
    t, _ = cli_tensors(tmp_path, "embed", clips[1], "--model", "tiny", "--cp", "2", "--tokens",
                       "--fps", "2", "--size", "64", "--segment", "1.5", "--hop", "0.5",
                       "--no-audio")
    py = encoders[2].embed(clips[1], tokens=True, fps=2, size=64, segment=1.5, hop=0.5,
                           audio=False)
    _same(py, t)
    assert "tokens" in py and py["tokens"].shape[0] == py["token_time"].shape[0]


@pytest.mark.parametrize("kw,flags", [
    ({"cp": 2, "strategy": "allgather", "attention": "window=1.5"},
     ["--cp", "2", "--strategy", "allgather", "--attention", "window=1.5"]),
    ({"cp": 3, "strategy": "ulysses", "causal": True},
     ["--cp", "3", "--strategy", "ulysses", "--causal"]),
    ({"cp": 2, "attention": "block=2"}, ["--cp", "2", "--attention", "block=2"]),
])
def test_embed_strategies_equal_cli(clips, tmp_path, kw, flags):
    t, _ = cli_tensors(tmp_path, "embed", clips[1], "--model", "tiny", *flags)
    with ringvit.Encoder("tiny", **kw) as enc:
        _same(enc.embed(clips[1]), t)


@pytest.mark.parametrize("cp,attention,kw,flags", [
    (1, "full", {"dtype": "f16", "normalize": True, "tokens": True},
     ["--dtype", "f16", "--normalize", "--tokens"]),
    (2, "full", {"dtype": "bf16", "tokens": True}, ["--dtype", "bf16", "--tokens"]),
    (3, "window=1.5", {"normalize": True, "segment": 1.0}, ["--normalize", "--segment", "1"]),
])
def test_embed_dtype_normalize_equal_cli(clips, tmp_path, cp, attention, kw, flags):
    t, meta = cli_tensors(tmp_path, "embed", clips[1], "--model", "tiny", "--cp", str(cp),
                          "--attention", attention, *flags)
    with ringvit.Encoder("tiny", cp=cp, attention=attention) as enc:
        py = enc.embed(clips[1], **kw)
    _same(py, t)
    _same_meta(py, meta)
    if kw.get("dtype") == "bf16":
        assert py["global"].dtype == np.uint16
        g = ringvit.bf16_to_f32(py["global"])
        assert g.dtype == np.float32 and np.all(np.isfinite(g)) and np.any(g != 0)


def test_embed_token_arrays(clips, encoders):
    """Encoder.embed(tokens(...)) is embed(path): the same sequence, encoded."""
    toks = ringvit.tokens(clips[0], model="tiny", fps=2)
    a = encoders[1].embed(toks)
    b = encoders[1].embed(clips[0], fps=2)
    _same(a, b)
    with pytest.raises(ValueError, match="apply to a path"):
        encoders[1].embed(toks, fps=3)


def test_encoder_life_cycle(clips):
    e = ringvit.Encoder("tiny", seed=3)
    assert e.config["dim"] == 192
    g = e.embed(clips[0])["global"]
    with ringvit.Encoder("tiny", seed=4) as other:
        assert not np.array_equal(other.embed(clips[0])["global"], g)  # seeded weights
    e.close()
    e.close()  # twice is fine
    with pytest.raises(ringvit.Error, match="closed"):
        e.embed(clips[0])
