"""conftest.py: what every test of the Python package shares: the package on
sys.path (tests run from the source tree), the library and the `ringvit` command
(RINGVIT_LIB, RINGVIT_CLI, else the repository's build/), generated recordings
(ffmpeg), a safetensors reader and a runner for the command. A missing ffmpeg,
library or command fails the tests (they are test dependencies), it never skips
them."""

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PKG_DIR = Path(__file__).resolve().parents[1]  # apps/python
REPO = PKG_DIR.parents[1]
sys.path.insert(0, str(PKG_DIR))


def _library():
    env = os.environ.get("RINGVIT_LIB")
    if env:
        return Path(env)
    return REPO / "build" / "libringvit.so"


def _cli():
    env = os.environ.get("RINGVIT_CLI")
    if env:
        return Path(env)
    return _library().resolve().parent / "ringvit"


LIB = _library()
CLI = _cli()
# The package under test loads exactly the library the command was built with.
os.environ["RINGVIT_LIB"] = str(LIB)


def pytest_sessionstart(session):
    problems = []
    if not LIB.is_file():
        problems.append(f"no library at {LIB} (set RINGVIT_LIB)")
    if not CLI.is_file():
        problems.append(f"no ringvit command at {CLI} (set RINGVIT_CLI)")
    if shutil.which("ffmpeg") is None:
        problems.append("no ffmpeg command (scripts/install-deps.sh installs it)")
    if problems:
        raise pytest.UsageError("ringvit Python tests cannot run: " + "; ".join(problems))


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", *map(str, args)], check=True)


def make_clip(path, seconds=3, size="320x240", rate=25, src="testsrc", freq=440, audio=True,
              sample_rate=44100, codec=("libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p")):
    """A generated recording: a test pattern and a sine tone (AAC)."""
    args = ["-f", "lavfi", "-i", f"{src}=size={size}:rate={rate}:duration={seconds}"]
    if audio:
        args += ["-f", "lavfi", "-i",
                 f"sine=frequency={freq}:sample_rate={sample_rate}:duration={seconds}",
                 "-c:a", "aac", "-b:a", "64k" if sample_rate > 16000 else "16k"]
    ffmpeg(*args, "-c:v", *codec, path)
    return path


@pytest.fixture(scope="session")
def clips(tmp_path_factory):
    """Two different 320x240 clips with audio (3 s and 4 s)."""
    d = tmp_path_factory.mktemp("clips")
    a = make_clip(d / "a.mp4", seconds=3)
    b = make_clip(d / "b.mp4", seconds=4, src="testsrc2", freq=880)
    return a, b


def load_safetensors(path):
    """(dict name -> ndarray, metadata dict) of a safetensors file."""
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    dt = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "U8": "u1", "F16": "<f2", "BF16": "<u2"}
    base = 8 + n
    out = {}
    for k, v in head.items():
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(raw[base + b:base + e], dt[v["dtype"]]).reshape(v["shape"])
    return out, meta


def run_cli(*args, check=True):
    """Runs the ringvit command; returns the CompletedProcess (text)."""
    r = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"ringvit {' '.join(map(str, args))} failed ({r.returncode}):\n"
                             f"{r.stderr}")
    return r


def cli_tensors(tmp_path, *args, name="out.safetensors"):
    """Runs `ringvit ARGS -o OUT` and loads OUT."""
    out = tmp_path / name
    run_cli(*args, "-o", out, *(["--quiet"] if args[0] == "embed" else []))
    return load_safetensors(out)


def rss_kb(field="VmRSS"):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")
