"""test_labels.py: ringvit.labels against the command (`ringvit labels --json`)
and against NumPy's own softmax and sigmoid of the file's logits, on an embed
output written here with per-block logits; its errors."""

import json
import struct

import numpy as np
import pytest

from conftest import run_cli

import ringvit

LABELS = ["chat", "Bär", "rain, heavy", "🎸"]
Z = np.array([[4, 0, 1, 0], [0, 0, 0, 5], [0.5, 2, 0, 0]], np.float32)


def write_st(path, tensors, meta):
    """tensors: (name, array, dtype) in order; a safetensors file by hand."""
    head, blobs, off = {}, [], 0
    for name, a, dt in tensors:
        b = a.astype({"F32": "<f4", "F64": "<f8"}[dt]).tobytes()
        head[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    head["__metadata__"] = meta
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return path


@pytest.fixture
def blocks(tmp_path):
    return write_st(tmp_path / "blocks.safetensors", [
        ("block_start", np.array([0.0, 10.24, 3605.5]), "F64"),
        ("block_end", np.array([10.24, 20.48, 3615.74]), "F64"),
        ("segment_start", np.array([0.0]), "F64"), ("segment_end", np.array([3615.74]), "F64"),
        ("block_logits", Z, "F32"), ("logits", Z.mean(0), "F32")],
        {"format": "ringvit-embed", "labels": json.dumps(LABELS), "multi_label": "false"})


def ranked(z, sigmoid, top):
    z = z.astype(np.float64)
    p = 1 / (1 + np.exp(-z)) if sigmoid else np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    order = sorted(range(len(p)), key=lambda i: (-p[i], i))[:top]
    return [(LABELS[i], p[i]) for i in order]


@pytest.mark.parametrize("kw,flags", [
    ({}, []), ({"top": 2}, ["--top", "2"]),
    ({"multi_label": True, "top": 4}, ["--multi-label", "--top", "4"]),
    ({"level": "recording"}, ["--level", "recording"])])
def test_labels_equal_cli_and_numpy(blocks, kw, flags):
    rows = ringvit.labels(blocks, **kw)
    cli = [json.loads(l) for l in run_cli("labels", blocks, "--json", *flags).stdout.splitlines()]
    assert len(rows) == len(cli)
    for r, c in zip(rows, cli):
        assert (r["start"], r["end"]) == (c["start"], c["end"])
        assert [l for l, _ in r["labels"]] == [x["label"] for x in c["labels"]]
        assert [p for _, p in r["labels"]] == pytest.approx([x["p"] for x in c["labels"]], abs=1e-8)
    recording = kw.get("level") == "recording"
    zs = [Z.mean(0)] if recording else list(Z)
    starts = [0.0] if recording else [0.0, 10.24, 3605.5]
    for r, z, s in zip(rows, zs, starts):
        want = ranked(z, kw.get("multi_label", False), min(kw.get("top", 5), 4))
        assert r["start"] == s
        assert [l for l, _ in r["labels"]] == [l for l, _ in want]
        assert [p for _, p in r["labels"]] == pytest.approx([p for _, p in want], rel=1e-6)
    if not recording:  # the known winners
        assert [r["labels"][0][0] for r in rows] == ["chat", "🎸", "Bär"]


def test_labels_errors(blocks, tmp_path):
    with pytest.raises(ringvit.Error, match="not a ringvit embed output"):
        ringvit.labels(write_st(tmp_path / "x.safetensors", [("a", np.zeros(2), "F32")], {}))
    bad = write_st(tmp_path / "bad.safetensors", [("segment_start", np.zeros(1), "F64"),
                                                  ("segment_end", np.ones(1), "F64"),
                                                  ("logits", np.zeros(3), "F32")],
                   {"format": "ringvit-embed", "labels": json.dumps(LABELS)})
    with pytest.raises(ringvit.Error, match="names 4 labels"):
        ringvit.labels(bad)
    with pytest.raises(ringvit.Error, match="no block_logits"):
        ringvit.labels(bad, level="block")
    with pytest.raises(ValueError, match="level"):
        ringvit.labels(blocks, level="frame")
    with pytest.raises(ValueError, match="top"):
        ringvit.labels(blocks, top=0)
    with pytest.raises(TypeError, match="multi_label"):
        ringvit.labels(blocks, multi_label=1)
