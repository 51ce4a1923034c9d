"""test_memory.py: iter_frames over a 30-minute recording keeps the process's
peak resident set (VmHWM, each run in its own process) within 100 MB of the peak
over a 2-minute one. The frames it reads add up to far more than that (9000
frames of 128 px and 30 minutes of 16 kHz audio, about 560 MB), so a reader that
kept what it handed out, or Python arrays that were never freed, would fail."""

import subprocess
import sys
import textwrap

import pytest

from conftest import PKG_DIR, make_clip

FPS, SIZE = 5, 128


@pytest.fixture(scope="session")
def recordings(tmp_path_factory):
    d = tmp_path_factory.mktemp("long")
    # cheap to make and decode: 64x64 test pattern at 5 fps, 8 kHz tone
    return {minutes: make_clip(d / f"{minutes}min.mp4", seconds=60 * minutes, size="64x64",
                               rate=5, sample_rate=8000)
            for minutes in (2, 30)}


def _peak_mb(path):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(PKG_DIR)!r})
        import ringvit
        n = 0
        for chunk in ringvit.iter_frames({str(path)!r}, fps={FPS}, size={SIZE}):
            n += len(chunk.times)
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
        print(n, int(hwm.split()[1]))
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    n, kb = map(int, r.stdout.split())
    return n, kb / 1024


def test_iter_frames_memory_bounded(recordings):
    n2, peak2 = _peak_mb(recordings[2])
    n30, peak30 = _peak_mb(recordings[30])
    assert n2 == 2 * 60 * FPS and n30 == 30 * 60 * FPS
    assert peak30 - peak2 < 100, f"peak RSS {peak30:.0f} MB over 30 min, {peak2:.0f} MB over 2"
