"""test_examples.py: the README's two examples (apps/python/examples) run: the
PyTorch IterableDataset of token windows (every window is its slice of the
recording's tokens) and a folder embedded into one matrix (each row is that
file's `ringvit embed` global, bit for bit: the same library call on the same
settings)."""

import importlib.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import PKG_DIR, cli_tensors

import ringvit

EXAMPLES = PKG_DIR / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(script, *args, cwd):
    env = dict(os.environ, PYTHONPATH=str(PKG_DIR))
    r = subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, args)],
                       capture_output=True, text=True, env=env, cwd=cwd)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_token_windows(clips, tmp_path):
    import torch  # a test dependency (python3-torch, scripts/install-deps.sh)
    mod = _load("token_windows")
    n = 100
    data = mod.TokenWindows(clips, window=n, fps=2)
    windows = list(data)
    per_file = [ringvit.tokens(c, fps=2) for c in clips]
    assert len(windows) == sum(len(t["token_modality"]) // n for t in per_file)
    # the windows of the first file, against its token arrays
    t = per_file[0]
    mod_, vid, aud = t["token_modality"], t["video_patches"], t["audio_patches"]
    vrow, arow = np.cumsum(mod_ == 0) - 1, np.cumsum(mod_ == 1) - 1
    for k in range(len(mod_) // n):
        w = windows[k]
        assert isinstance(w["patches"], torch.Tensor)
        assert np.array_equal(w["modality"].numpy(), mod_[k * n:(k + 1) * n])
        assert np.array_equal(w["time"].numpy(), t["token_time"][k * n:(k + 1) * n])
        for j in range(n):
            i = k * n + j
            p = w["patches"][j].numpy()
            if mod_[i] == 0:
                ref = vid[vrow[i]]
            elif mod_[i] == 1:
                ref = aud[arow[i]]
            else:
                ref = np.zeros(0, np.float32)
            assert np.array_equal(p[:len(ref)], ref) and not p[len(ref):].any()
    out = _run("token_windows.py", *clips, "--window", n, "--batch", 4, "--fps", 2, cwd=tmp_path)
    first = (f"0 {{'patches': (4, {n}, 1536), 'modality': (4, {n}), 'pos': (4, {n}, 3), "
             f"'time': (4, {n}, 2)}}")
    assert out.splitlines()[0] == first
    # two DataLoader worker processes, a file each: the same number of windows
    out2 = _run("token_windows.py", *clips, "--window", n, "--batch", 1, "--fps", 2,
                "--workers", 2, cwd=tmp_path)
    assert len(out2.splitlines()) == len(windows)


def test_embed_folder(clips, tmp_path):
    folder = tmp_path / "videos"
    folder.mkdir()
    for c in clips:
        shutil.copy(c, folder / c.name)
    (folder / "notes.txt").write_text("not media")
    out = _run("embed_folder.py", folder, "--cp", 2, "-o", tmp_path / "emb.npz", cwd=tmp_path)
    assert out.strip() == f"2 files x 192 -> {tmp_path / 'emb.npz'}"
    z = np.load(tmp_path / "emb.npz")
    assert list(z["names"]) == sorted(c.name for c in clips)
    m = z["embeddings"]
    assert m.shape == (2, 192) and m.dtype == np.float32
    for row, name in zip(m, z["names"]):
        t, _ = cli_tensors(tmp_path, "embed", folder / name, "--model", "tiny", "--cp", "2")
        assert row.dtype == t["global"].dtype and np.array_equal(row, t["global"]), \
            f"{name}: differs from the command's by {np.abs(row - t['global']).max():.3g}"
