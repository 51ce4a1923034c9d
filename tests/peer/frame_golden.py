#!/usr/bin/python3
"""frame_golden.py: golden data for `ringvit embed --attention frame` with a
torchvision image ViT (tests/cli/test_spans.sh).

  frame_golden.py CONVERT OUTDIR [--frames N]

Makes, in OUTDIR:
  vit.safetensors  a tiny torchvision VisionTransformer (image 32, patch 8, 2
                   layers, D 128, 2 heads = D / 64, MLP 192; seeded, every bias,
                   LayerNorm parameter and the class token perturbed away from 0
                   and 1), converted by scripts/convert-torchvision.py (CONVERT);
  frames.rgb       N (default 5) random 32 x 32 RGB frames, raw rgb24, for the
                   ffmpeg command to encode losslessly;
  golden.npy       (N, 17, 128) float64: torchvision's per-token encoder outputs
                   of each frame on its own (the image model run on every frame,
                   CLS first), computed in float64 from the float32 weights and
                   the frame normalised with ImageNet's mean and std in float32,
                   as ringvit does.
Needs /usr/bin/python3 with torch, torchvision and numpy.
"""
import copy
import importlib.util
import os
import sys

import numpy as np
import torch
from torchvision.models.vision_transformer import VisionTransformer

sys.dont_write_bytecode = True  # no scripts/__pycache__ in the source tree

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def make_model(seed):
    torch.manual_seed(seed)
    m = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                          hidden_dim=128, mlp_dim=192)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name == "class_token":
                p.copy_(noise * 0.3)
            elif ".ln" in name or name.startswith("encoder.ln"):
                p.add_(noise * 0.1)
            elif name.endswith("bias") or name.startswith("heads."):
                p.add_(noise * 0.05)
    return m.eval()


def frame_tokens(m64, rgb):
    """(17, D) float64: the encoder's outputs of one frame, CLS first."""
    x = ((rgb.astype(np.float32) / np.float32(255.0) - MEAN) / STD).astype(np.float64)
    with torch.no_grad():
        x = torch.from_numpy(x).permute(2, 0, 1).unsqueeze(0)
        x = m64._process_input(x)
        x = torch.cat([m64.class_token.expand(1, -1, -1), x], dim=1)
        return m64.encoder(x)[0].numpy()


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--frames"):
        print(__doc__, file=sys.stderr)
        return 2
    convert, out = argv[0], argv[1]
    n = int(argv[3]) if len(argv) == 4 else 5
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    m = make_model(4242)
    pth = os.path.join(out, "vit.pth")
    torch.save(m.state_dict(), pth)
    spec = importlib.util.spec_from_file_location("convert_torchvision", convert)
    cv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cv)
    rc = cv.main([pth, "-o", os.path.join(out, "vit.safetensors")])
    if rc:
        return rc
    os.remove(pth)
    rng = np.random.default_rng(7)
    frames = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    frames.tofile(os.path.join(out, "frames.rgb"))
    m64 = copy.deepcopy(m).double()
    golden = np.stack([frame_tokens(m64, f) for f in frames])
    np.save(os.path.join(out, "golden.npy"), golden)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
