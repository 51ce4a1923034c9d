#!/usr/bin/python3
"""adamw_golden.py: the peer reference for ringvit's optimizer
(encoder/train/train_adamw.c), so tests/unit/test_train_optim.c can check it against
torch.optim.AdamW and the schedule against an independent implementation.

    adamw_golden.py OUT.safetensors

Makes a flat parameter vector (n), a gradient for each of STEPS steps and a
weight-decay mask, runs torch.optim.AdamW (foreach=False, float32) with two
parameter groups (the masked elements with weight_decay WD, the others with 0;
AdamW is element-wise, so this is the same as one vector with a mask), setting
each group's lr to the warm-up + cosine schedule of rv_vit_train.h before every
step, and writes (safetensors laid out by hand)
    opts    (8) F64        lr, beta1, beta2, eps, wd, warmup, total, min_lr
    mask    (n) U8         1: weight decay applies
    params0 (n) F32        the starting parameters
    grads   (STEPS, n) F32 the gradient of each step
    params  (STEPS, n) F32 the parameters after each step
    m, v    (n) F32        the moments after the last step
    lrs     (STEPS) F64    the learning rate of each step
The schedule: lr * (s + 1) / warmup for s < warmup, then min_lr + (lr - min_lr)
* (1 + cos(pi * (s - warmup) / (total - warmup))) / 2, min_lr from s >= total.
STEPS runs past total, so all three phases are covered. Seeded: the same file
every run.
"""
import json
import math
import struct
import sys

import numpy as np
import torch

N = 1000
STEPS = 9
LR, BETA1, BETA2, EPS, WD = 1e-2, 0.9, 0.999, 1e-8, 0.1
WARMUP, TOTAL, MIN_LR = 3, 8, 1e-3


def lr_at(s):
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    if s >= TOTAL:
        return MIN_LR
    t = (s - WARMUP) / (TOTAL - WARMUP)
    return MIN_LR + (LR - MIN_LR) * 0.5 * (1.0 + math.cos(math.pi * t))


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    names = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("uint8"): "U8"}
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        raw = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": names[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rng = np.random.default_rng(20261129)
    mask = (rng.uniform(size=N) < 0.6).astype(np.uint8)
    p0 = rng.normal(0.0, 1.0, N).astype(np.float32)
    grads = rng.normal(0.0, 1.0, (STEPS, N))
    # Gradients of very different sizes per element, some exactly zero, one step all tiny.
    grads *= np.exp(rng.uniform(-6, 2, N))[None, :]
    grads[:, ::17] = 0.0
    grads[4] *= 1e-4
    grads = grads.astype(np.float32)

    dec = mask == 1
    pd = torch.tensor(p0[dec], dtype=torch.float32, requires_grad=True)
    pn = torch.tensor(p0[~dec], dtype=torch.float32, requires_grad=True)
    opt = torch.optim.AdamW([{"params": [pd], "weight_decay": WD},
                             {"params": [pn], "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=EPS, foreach=False)
    params = np.zeros((STEPS, N), dtype=np.float32)
    lrs = np.zeros(STEPS, dtype=np.float64)
    for s in range(STEPS):
        lrs[s] = lr_at(s)
        for g in opt.param_groups:
            g["lr"] = lrs[s]
        pd.grad = torch.tensor(grads[s][dec])
        pn.grad = torch.tensor(grads[s][~dec])
        opt.step()
        params[s][dec] = pd.detach().numpy()
        params[s][~dec] = pn.detach().numpy()
    m = np.zeros(N, dtype=np.float32)
    v = np.zeros(N, dtype=np.float32)
    m[dec] = opt.state[pd]["exp_avg"].numpy()
    m[~dec] = opt.state[pn]["exp_avg"].numpy()
    v[dec] = opt.state[pd]["exp_avg_sq"].numpy()
    v[~dec] = opt.state[pn]["exp_avg_sq"].numpy()
    opts = np.array([LR, BETA1, BETA2, EPS, WD, WARMUP, TOTAL, MIN_LR], dtype=np.float64)
    write_safetensors(sys.argv[1], [("opts", opts), ("mask", mask), ("params0", p0),
                                    ("grads", grads), ("params", params), ("m", m), ("v", v),
                                    ("lrs", lrs)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
