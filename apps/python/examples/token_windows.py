"""token_windows.py: a PyTorch IterableDataset of fixed-length token windows of
long recordings: ringvit.tokens per file (the model's tokenizer, in the
library), each sequence cut into windows of N tokens in sequence order. Every
window holds, per token, its patch (video tubelet or audio patch, zero-padded to
the longer of the two; zeros for special tokens), modality, position and time,
so windows stack into batches. With several DataLoader workers each worker
takes every k-th file.

    python3 token_windows.py talk.mp4 lecture.mkv --window 512 --batch 8 --workers 2
"""

import argparse

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import ringvit


class TokenWindows(IterableDataset):
    def __init__(self, paths, window=512, model="tiny", **tokens_kw):
        self.paths, self.window, self.model, self.kw = list(paths), window, model, tokens_kw

    def windows(self, path):
        """The windows of one file, as dicts of NumPy arrays."""
        t = ringvit.tokens(path, model=self.model, **self.kw)
        mod, vid, aud = t["token_modality"], t["video_patches"], t["audio_patches"]
        width = max(vid.shape[1], aud.shape[1])
        # row of each token in its modality's patch array (rows follow sequence order)
        row = np.zeros(len(mod), np.int64)
        for m in (0, 1):
            sel = mod == m
            row[sel] = np.arange(sel.sum())
        n = self.window
        for s in range(0, len(mod) - n + 1, n):  # the last partial window is dropped
            patches = np.zeros((n, width), np.float32)
            for m, src in ((0, vid), (1, aud)):
                sel = mod[s:s + n] == m
                patches[sel, :src.shape[1]] = src[row[s:s + n][sel]]
            yield {"patches": patches, "modality": mod[s:s + n], "pos": t["token_pos"][s:s + n],
                   "time": t["token_time"][s:s + n]}

    def __iter__(self):
        info = get_worker_info()
        paths = self.paths if info is None else self.paths[info.id::info.num_workers]
        for path in paths:
            for w in self.windows(path):
                yield {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in w.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--fps", type=float, default=1)
    ap.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    a = ap.parse_args()
    data = TokenWindows(a.paths, window=a.window, model=a.model, fps=a.fps)
    for i, batch in enumerate(DataLoader(data, batch_size=a.batch, num_workers=a.workers)):
        print(i, {k: tuple(v.shape) for k, v in batch.items()})


if __name__ == "__main__":
    main()
