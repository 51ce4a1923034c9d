"""test_media.py: ringvit.probe, frames, iter_frames and audio against what the
`ringvit` command prints and writes for the same arguments (probe dict equal,
arrays bit-identical), and the generator's life cycle."""

import json

import numpy as np
import pytest

from conftest import cli_tensors, ffmpeg, run_cli

import ringvit


def test_probe_equals_cli(clips):
    for clip in clips:
        cli = json.loads(run_cli("probe", clip, "--json").stdout)
        assert ringvit.probe(clip) == cli
        assert ringvit.probe(str(clip).encode()) == cli  # bytes paths too


CASES = [
    # (python kwargs, the command's flags)
    ({}, []),
    ({"fps": 2, "size": 64}, ["--fps", "2", "--size", "64"]),
    ({"fps": "30000/1001", "size": 48, "pad": True, "start": 0.5, "duration": 1.5},
     ["--fps", "30000/1001", "--size", "48", "--pad", "--start", "0.5", "--duration", "1.5"]),
    ({"fps": 2.5, "size": 32, "audio": False}, ["--fps", "2.5", "--size", "32", "--no-audio"]),
    ({"size": 40, "threads": 2, "max_corrupt": "1%"},
     ["--size", "40", "--threads", "2", "--max-corrupt", "1%"]),
    ({"size": 40, "max_corrupt": 0}, ["--size", "40", "--max-corrupt", "0"]),
]


@pytest.mark.parametrize("kw,flags", CASES)
def test_frames_equal_cli(clips, tmp_path, kw, flags):
    clip = clips[0]
    t, _ = cli_tensors(tmp_path, "frames", clip, *flags)
    f = ringvit.frames(clip, **kw)
    assert isinstance(f, ringvit.Frames)
    assert all(a.flags.owndata and a.flags.writeable for a in f)  # Python's memory
    assert np.array_equal(f.frames, t["frames"]) and f.frames.dtype == t["frames"].dtype
    assert np.array_equal(f.times, t["frame_time"]) and f.times.dtype == np.float64
    assert np.array_equal(f.source_times, t["frame_source_time"])
    assert f.source_times.dtype == np.float64


def test_iter_frames_chunks(clips):
    clip = clips[1]
    whole = ringvit.frames(clip, fps=5, size=32)
    chunks = list(ringvit.iter_frames(clip, fps=5, size=32, chunk_frames=7))
    assert len(chunks) == -(-len(whole.times) // 7) and len(whole.times) == 20
    assert all(len(c.times) == 7 for c in chunks[:-1])
    for field in ringvit.Frames._fields:
        assert np.array_equal(np.concatenate([getattr(c, field) for c in chunks]),
                              getattr(whole, field))
    # the arrays are Python's: own data, writable, intact after the reader is gone
    assert all(a.flags.owndata for c in chunks for a in c)
    chunks[0].frames[0, 0, 0, 0] ^= 1
    assert chunks[1].frames.sum() > 0


def test_iter_frames_closed_early(clips):
    g = ringvit.iter_frames(clips[1], fps=5, size=32, chunk_frames=4)
    first = next(g)
    g.close()  # closes the reader; the generator is done
    with pytest.raises(StopIteration):
        next(g)
    assert first.frames.shape == (4, 32, 32, 3)
    # many readers opened and dropped early do not pile up (each is closed)
    for _ in range(50):
        for _c in ringvit.iter_frames(clips[0], size=16):
            break


def test_audio_equals_cli(clips, tmp_path):
    """audio() reads without the video: the samples `ringvit frames` writes for the
    audio stream alone (an .m4a copy), to the audio's own end; with the video the
    command stops at the last frame's end, and the samples up to it are the same."""
    clip = clips[0]
    m4a = tmp_path / "a.m4a"
    ffmpeg("-i", clip, "-vn", "-c:a", "copy", m4a)
    alone, _ = cli_tensors(tmp_path, "frames", m4a, name="alone.safetensors")
    a = ringvit.audio(clip)
    assert a.dtype == np.float32 and a.ndim == 1 and a.flags.owndata
    assert np.array_equal(a, alone["audio"])
    assert len(a) > 3 * 16000  # the last AAC frame ends after the video
    with_video, _ = cli_tensors(tmp_path, "frames", clip, "--size", "16")
    assert np.array_equal(a[:3 * 16000], with_video["audio"])
    part, _ = cli_tensors(tmp_path, "frames", m4a, "--start", "1", "--duration", "1.25",
                          name="part.safetensors")
    b = ringvit.audio(clip, start=1, duration=1.25)
    assert len(b) == 20000 and np.array_equal(b, part["audio"])
