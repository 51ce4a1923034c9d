"""embed_folder.py: every recording of a folder embedded into one NumPy matrix,
one row per file (Encoder.embed(path)["global"]), saved with the file names.

    python3 embed_folder.py videos/ --model tiny --cp 2 -o videos.npz
"""

import argparse
from pathlib import Path

import numpy as np

import ringvit

MEDIA = {".mp4", ".mkv", ".mov", ".webm", ".avi", ".ts", ".wav", ".mp3", ".flac", ".m4a"}


def embed_folder(folder, model="tiny", cp=1, **embed_kw):
    """(paths, matrix float32 [files, D]) for the media files of folder."""
    paths = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in MEDIA)
    with ringvit.Encoder(model, cp=cp) as enc:
        rows = [enc.embed(p, **embed_kw)["global"] for p in paths]
    return paths, np.stack(rows) if rows else np.empty((0, 0), np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--cp", type=int, default=1)
    ap.add_argument("-o", "--output", default="embeddings.npz")
    a = ap.parse_args()
    paths, matrix = embed_folder(a.folder, a.model, a.cp)
    np.savez(a.output, names=np.array([p.name for p in paths]), embeddings=matrix)
    print(f"{matrix.shape[0]} files x {matrix.shape[1]} -> {a.output}")


if __name__ == "__main__":
    main()
