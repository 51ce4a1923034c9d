#!/usr/bin/python3
"""vit_golden.py: the peer reference for ringvit's encoder (encoder/rv_vit.h),
so tests/unit/test_vit_golden.c can check it against torchvision's
VisionTransformer.

    vit_golden.py OUTDIR

Writes into OUTDIR (safetensors laid out by hand: 8-byte header length, JSON
header, raw little-endian data; no "__metadata__"):

  A.safetensors, B.safetensors   two tiny torchvision ViTs (2 layers), their
        state_dict without the classification head (heads.*) and nothing else,
        so ringvit must read them as plain torchvision image ViTs:
          A: image 64, patch 16 (grid 4), D 128, 2 heads (= D / 64, the default
             ringvit assumes for a torchvision-only file), MLP 256;
          B: image 64, patch 8 (grid 8), D 96, 3 heads (D / 64 would be 1: the
             test loads it with heads = 3), MLP 192.
        Weights: torchvision's own initialisation (seeded), then every bias,
        LayerNorm weight and bias and the class token perturbed with small
        noise so that none is trivially 0 or 1.
  img0.png img1.png img2.png   64 x 64 RGB pictures with structure (gradients,
        stripes, a disc, noise), written as plain 8-bit RGB PNGs (zlib by hand);
  img80.png img48.png          80 x 80 and 48 x 48 pictures of the same kind,
        for the position resampling;
  golden.safetensors   for each case NAME = MODEL/IMAGE (A/img0 ... B/img2,
        A/img80, A/img48, B/img80):
          NAME/input  (S, S, 3) F32    the normalised picture the model sees,
                                       (pixel / 255 - mean[c]) / std[c] with the
                                       ImageNet float32 mean and std, computed in
                                       double and rounded to float32 (as
                                       ringvit's tokenizer does)
          NAME/out    (1 + g*g, D) F64 the per-token outputs after encoder.ln,
                                       CLS first, then patches row by row: the
                                       torchvision model run in float64 on input
          NAME/out32  (1 + g*g, D) F32 the same run in float32 (to show the
                                       float32 noise floor)
        For the 64 x 64 pictures the output is exactly torchvision's
            x = model._process_input(input); x = cat(class_token, x);
            model.encoder(x)
        For 80 x 80 and 48 x 48 (grid g != the stored grid) the stored
        position table's patch part is resampled to g x g with
        torch.nn.functional.interpolate(mode="bilinear", align_corners=False)
        (the CLS slot kept), as rv_vit.h specifies, and the encoder's layers and
        final LayerNorm run on conv_proj's patches + that table. (torchvision's
        own interpolate_embeddings uses bicubic by default; ringvit documents
        bilinear, and this is the bilinear reference.)
Seeded: the same files every run.
"""
import copy
import json
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.models.vision_transformer import VisionTransformer

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).astype(np.float64)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).astype(np.float64)

MODELS = {
    "A": dict(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=128, mlp_dim=256),
    "B": dict(image_size=64, patch_size=8, num_layers=2, num_heads=3, hidden_dim=96, mlp_dim=192),
}
CASES = [("A", "img0"), ("A", "img1"), ("A", "img2"), ("B", "img0"), ("B", "img1"),
         ("B", "img2"), ("A", "img80"), ("A", "img48"), ("B", "img80")]


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        dt = {np.dtype("float32"): "F32", np.dtype("float64"): "F64"}[arr.dtype]
        raw = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_png(path, rgb):
    """rgb (H, W, 3) uint8 -> an 8-bit RGB PNG, every row filter 0."""
    h, w, _ = rgb.shape

    def chunk(kind, data):
        c = kind + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


def picture(rng, s, kind):
    y, x = np.mgrid[0:s, 0:s].astype(np.float64) / (s - 1)
    if kind == 0:    # diagonal gradients per channel + noise
        img = np.stack([255 * x, 255 * y, 255 * (1 - x) * y], axis=-1)
        img += rng.normal(0, 12, img.shape)
    elif kind == 1:  # stripes and a bright disc
        r = np.hypot(x - 0.4, y - 0.6)
        img = np.stack([128 + 100 * np.sin(12 * x), 128 + 100 * np.cos(9 * y + 3 * x),
                        np.where(r < 0.3, 240.0, 30.0)], axis=-1)
        img += rng.normal(0, 6, img.shape)
    else:            # blocks of random colour + uniform noise, saturated extremes
        blocks = rng.integers(0, 256, (4, 4, 3)).astype(np.float64)
        idx = np.minimum((np.mgrid[0:s, 0:s] * 4) // s, 3)
        img = blocks[idx[0], idx[1]] + rng.uniform(-40, 40, (s, s, 3))
        img[:2, :2] = 0
        img[-2:, -2:] = 255
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def normalise(rgb):
    return ((rgb.astype(np.float64) / 255.0 - MEAN) / STD).astype(np.float32)


def make_model(name, seed):
    torch.manual_seed(seed)
    m = VisionTransformer(**MODELS[name])
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for pname, p in m.named_parameters():
            if pname.startswith("heads."):
                continue
            noise = lambda std: torch.randn(p.shape, generator=g) * std
            if pname == "class_token":
                p.copy_(noise(0.3))
            elif ".ln" in pname or pname.startswith("encoder.ln"):
                p.add_(noise(0.1))           # LN weights around 1, biases around 0
            elif pname.endswith("bias"):
                p.add_(noise(0.05))
    return m.eval()


def encode(m, img, newpos=None):
    """img (S, S, 3) float32 normalised -> (1 + g*g, D) outputs in m's dtype."""
    dt = next(m.parameters()).dtype
    x = torch.from_numpy(img).to(dt).permute(2, 0, 1).unsqueeze(0)
    with torch.no_grad():
        if newpos is None:
            x = m._process_input(x)
            x = torch.cat([m.class_token.expand(1, -1, -1), x], dim=1)
            y = m.encoder(x)
        else:
            n = x.shape[-1] // m.patch_size
            x = m.conv_proj(x).reshape(1, m.hidden_dim, n * n).permute(0, 2, 1)
            x = torch.cat([m.class_token.expand(1, -1, -1), x], dim=1)
            y = m.encoder.ln(m.encoder.layers(x + newpos.to(dt)))
    return y[0]


def resampled_pos(m, n):
    """The stored pos table with its g x g patch part resampled bilinearly to n x n."""
    pos = m.encoder.pos_embedding.detach().double()
    d = pos.shape[-1]
    g = int(round((pos.shape[1] - 1) ** 0.5))
    grid = pos[:, 1:].reshape(1, g, g, d).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(n, n), mode="bilinear", align_corners=False)
    grid = grid.permute(0, 2, 3, 1).reshape(1, n * n, d)
    return torch.cat([pos[:, :1], grid], dim=1)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(20241129)
    images = {}
    for i in range(3):
        images["img%d" % i] = picture(rng, 64, i)
    images["img80"] = picture(rng, 80, 1)
    images["img48"] = picture(rng, 48, 2)
    for name, rgb in images.items():
        write_png(os.path.join(out, name + ".png"), rgb)

    models = {}
    for k, (name, cfg) in enumerate(MODELS.items()):
        m = make_model(name, 1000 + k)
        sd = [(n, t.detach().numpy().astype(np.float32)) for n, t in m.state_dict().items()
              if not n.startswith("heads.")]
        write_safetensors(os.path.join(out, name + ".safetensors"), sd)
        models[name] = m

    golden = []
    for mname, iname in CASES:
        m32 = models[mname]
        m64 = copy.deepcopy(m32).double()
        img = normalise(images[iname])
        s = img.shape[0]
        if s == MODELS[mname]["image_size"]:
            y64, y32 = encode(m64, img), encode(m32, img)
        else:
            pos = resampled_pos(m64, s // MODELS[mname]["patch_size"])
            y64, y32 = encode(m64, img, pos), encode(m32, img, pos.float())
        case = mname + "/" + iname
        golden.append((case + "/input", img))
        golden.append((case + "/out", y64.numpy().astype(np.float64)))
        golden.append((case + "/out32", y32.numpy().astype(np.float32)))
    write_safetensors(os.path.join(out, "golden.safetensors"), golden)
    return 0


if __name__ == "__main__":
    sys.exit(main())
