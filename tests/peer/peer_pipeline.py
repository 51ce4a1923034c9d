#!/usr/bin/python3
"""peer_pipeline.py: the PyTorch pipeline a user would write for the jobs of
scripts/bench-peers.sh (issue 39), and the check that it and ringvit computed
the same thing. One embedding per unit of a recording:

    CLIP (clip, clip_vision_model)  per frame at --fps (default 1): get_image_features
    VideoMAE                        per clip of num_frames (16) frames at --fps (default 8):
                                    fc_norm of the mean of the clip's tokens
    AST                             per window of max_length x 10 ms (10.24 s) of audio:
                                    (CLS + distillation) / 2 after the final norm

    peer_pipeline.py run MODELDIR MEDIA OUT.safetensors [--fps F] [--threads N]
                     [--batch B] [--linear blas|mkldnn] [--gemm]
    peer_pipeline.py check MODELDIR RINGVIT_OUT FRAMES PEER_OUT [--tol 1e-3]
                     [--units K] [--threads N]
    peer_pipeline.py blas [--threads N]
    peer_pipeline.py selftest

Exit status: 0 ok, 1 failed (one line saying why), 2 bad usage.

RUN (timed by the caller; prints one JSON line)
  Decode: PyAV (FFmpeg), the video decoder on its automatic threads. Video
    frames are sampled by presentation time as `ringvit frames` does: the grid
    starts at the container's start time (the earliest stream's first
    timestamp, in microseconds), sample k at start + k / fps shows the last
    frame whose pts <= that time (the first frame for samples before it), up to
    the end of the last frame's display, taken as its pts plus one period of
    the stream's average rate (PyAV 10 gives frames no duration). Every frame
    is decoded (nothing skipped), only sampled ones are converted to RGB
    (PyAV's to_image). Audio: the first audio stream through PyAV's
    AudioResampler to float mono 16 kHz, concatenated from its first frame on
    (gaps are not filled); a window's end is clamped to the stream's end (its
    stated duration, else its last frame's end: the samples past it are kept,
    as ringvit keeps them, but the bounds end with the recording, as ringvit's
    do).
  Pictures (the transformers image processors' steps): PIL resize of the
    shorter side to the preprocessor's size.shortest_edge with its resample
    (CLIP bicubic, VideoMAE bilinear; long side int(side * long / short)),
    centre crop to crop_size (top (h - c) // 2, left (w - c) // 2), rescale
    1/255, normalise by image_mean / image_std.
  Audio features: torchaudio.compliance.kaldi.fbank of each window's samples
    (ASTFeatureExtractor's settings: htk_compat, hanning, 128 mel bins, dither
    0, 10 ms shift, no energy), normalised (x - mean) / (2 std). A full window
    has 1022 fbank frames, 101 time steps: exactly transformers' padded 1024.
    A shorter window (the last one) keeps its own length, as ringvit does
    (transformers would pad it with zeros): the first columns of the position
    grid.
  Model: the published architecture, as tests/peer/hub_models.py's float64
    reference spells it and the transformers modelling code computes it, in
    float32 and batched: Conv2d / Conv3d patch embedding, per layer LayerNorm,
    separate q, k, v nn.Linear products (torch.nn.functional.linear), attention
    as torch.matmul, softmax, torch.matmul over (batch, heads, tokens, dim),
    output dense, LayerNorm, MLP (F.gelu or quick_gelu), under
    torch.inference_mode() with torch.set_num_threads(N). --linear mkldnn runs
    every linear layer through torch.utils.mkldnn's MkldnnLinear (oneDNN)
    instead of the BLAS torch was built on (Debian's: OpenBLAS).
  Batches: --batch units of one shape per model call (default CLIP 16 frames,
    VideoMAE 2 clips, AST 4 windows); units of another shape (a last partial
    clip or window) go in a batch of their own.
  OUT: rows (units, P) F32 (CLIP: the projected 512; else the pooled D),
    unit_start / unit_end (units) F64 in seconds on the container's clock,
    metadata "peer" (the JSON printed). JSON: family, unit, units, threads,
    batch, linear, torch, blas (torch.__config__'s BLAS_INFO), blas_core
    (OpenBLAS's openblas_get_corename, "" when torch is on another BLAS),
    openblas_coretype (the environment's), model_gflop (the model's FLOPs:
    linear layers 2 M K N, attention products 4 S^2 D per layer, patch
    convolution), seconds: load (weights), decode (decode, resize, normalise,
    fbank), model, total (from main's start, torch's import included); with
    --gemm gemm_gflops: a 2048^3 float32 product on the same threads, best of 3,
    after the run, on what the linear layers ran on (torch.mm for blas, a 2048 x
    2048 MkldnnLinear for mkldnn).

BLAS (untimed probe; one JSON line)
  One base-size linear layer (3152 x 768 -> 3072) through F.linear and through
  MkldnnLinear, best of 5 each, under this process's environment (run it with
  and without OPENBLAS_CORETYPE to see which BLAS and core are fastest):
  threads, torch, blas, blas_core, openblas_coretype, linear_gflops {blas, mkldnn}.

CHECK (untimed)
  The same float32 model (BLAS linear), fed what ringvit decoded (`ringvit
  frames` of the same recording at the same fps and size: frames, frame_time,
  audio from metadata ingest's start_s), unit by unit on ringvit's own block
  bounds (frames whose times fall in [block_start, block_end); the block's audio
  samples), against RINGVIT_OUT's block_projected (CLIP) or block_pooled:
  error = per unit |ringvit - peer|.max / |peer|.max, the max over K units (--units,
  default 8, evenly spaced, first and last included; 0 for all). It fails above
  --tol (default 1e-3: two float32 computations of the same 12-layer model,
  different summation orders; bf16 runs need a wider one). PEER_OUT (the run's
  output) must have ringvit's unit count and bounds (within 1e-6 s); its rows'
  error against ringvit's (end to end: PIL against swscale resampling, PyAV's
  audio resampler against ringvit's) is reported, not judged. Prints one JSON
  line: units, checked, err, tol, e2e_err, e2e_median, ok.

SELFTEST builds two tiny checkpoints (tests/peer/hub_models.py make), runs the
batched float32 model against the float64 reference of hub_models.py (CLIP,
VideoMAE, AST; max rel error <= 1e-4), checks that batching does not change a
unit's output, that the sampler picks the frames `ringvit frames` would on a
synthetic timeline, and that check fails on a perturbed row.
"""
import ctypes
import json
import math
import os
import sys
import tempfile
import time
from fractions import Fraction

T_MAIN = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hub_models as hm  # noqa: E402

DEFAULT_BATCH = {"clip": 16, "videomae": 2, "ast": 4}
DEFAULT_FPS = {"clip": 1, "videomae": 8}
UNIT_NAME = {"clip": "frame", "videomae": "clip", "ast": "window"}


class Fail(Exception):
    pass


# ---------------------------------------------------------------- model


class Linear:
    """y = x W^T + b as nn.Linear; mkldnn: torch.utils.mkldnn.MkldnnLinear."""

    def __init__(self, w, b, mode):
        self.w, self.b = w, b
        self.mk = None
        if mode == "mkldnn":
            from torch.utils import mkldnn
            lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=True)
            lin.weight.data = w
            lin.bias.data = b if b is not None else torch.zeros(w.shape[0])
            self.mk = mkldnn.MkldnnLinear(lin, torch.float)

    def __call__(self, x):
        if self.mk is None:
            return F.linear(x, self.w, self.b)
        lead = x.shape[:-1]
        return self.mk(x.reshape(-1, x.shape[-1])).reshape(*lead, self.w.shape[0])


def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


ACT = {"gelu": F.gelu, "quick_gelu": quick_gelu, "gelu_new": gelu_tanh,
       "gelu_pytorch_tanh": gelu_tanh, "gelu_fast": gelu_tanh, "relu": torch.relu}


class PeerModel:
    """A base checkpoint's encoder in float32 (CLIP, VideoMAE, AST), read with
    hub_models.Model (config, preprocessor, tensor names)."""

    def __init__(self, folder, linear="blas"):
        m = hm.Model(folder)
        if m.family not in ("clip", "videomae", "ast"):
            raise Fail(f"{folder}: family {m.family}: the peer runs clip, videomae, ast")
        self.m, self.family, self.pp, self.cfg = m, m.family, m.pp, m.cfg
        self.d, self.heads, self.eps, self.patch = m.dim, m.heads, m.eps, m.patch
        act = m.cfg.get("hidden_act", m.DEFAULT_ACT[m.family])
        if act not in ACT:
            raise Fail(f"{folder}: hidden_act {act!r} not handled")
        self.act = ACT[act]
        self.layers = []
        self.flops = 0   # model FLOPs so far: linear layers, attention products, patch conv
        d = self.d
        for i in range(m.layers):
            n = hm.layer_names(m, i)
            L = {"ln1": (self.t(n["ln1"] + ".weight"), self.t(n["ln1"] + ".bias")),
                 "ln2": (self.t(n["ln2"] + ".weight"), self.t(n["ln2"] + ".bias"))}
            if m.family == "videomae":
                zero = torch.zeros(d)
                bias = {"q": self.t(n["qb"]) if m.has(n["qb"]) else zero, "k": zero,
                        "v": self.t(n["vb"]) if m.has(n["vb"]) else zero}
            else:
                bias = {k: self.t(n[k] + ".bias") for k in ("q", "k", "v")}
            for k in ("q", "k", "v"):
                L[k] = Linear(self.t(n[k] + ".weight"), bias[k], linear)
            for k in ("o", "fc1", "fc2"):
                L[k] = Linear(self.t(n[k] + ".weight"), self.t(n[k] + ".bias"), linear)
            self.layers.append(L)
        self.proj = None
        if m.family == "clip":
            q = "vision_model."
            self.conv_w = self.t(q + "embeddings.patch_embedding.weight")
            self.conv_b = None
            self.cls = self.t(q + "embeddings.class_embedding")
            self.pos = self.t(q + "embeddings.position_embedding.weight")
            self.pre = (self.t(q + "pre_layrnorm.weight"), self.t(q + "pre_layrnorm.bias"))
            self.post = (self.t(q + "post_layernorm.weight"), self.t(q + "post_layernorm.bias"))
            if m.has("visual_projection.weight"):
                self.proj = self.t("visual_projection.weight")
        elif m.family == "videomae":
            q = m.prefix + "embeddings.patch_embeddings.projection."
            self.conv_w, self.conv_b = self.t(q + "weight"), self.t(q + "bias")
            self.tubelet = int(m.cfg.get("tubelet_size", 2))
            self.final = None
            if m.has(m.prefix + "layernorm.weight"):
                self.final = (self.t(m.prefix + "layernorm.weight"),
                              self.t(m.prefix + "layernorm.bias"))
            self.fc_norm = None
            if m.has("fc_norm.weight"):
                self.fc_norm = (self.t("fc_norm.weight"), self.t("fc_norm.bias"))
        else:
            q = m.prefix + "embeddings."
            self.conv_w = self.t(q + "patch_embeddings.projection.weight")
            self.conv_b = self.t(q + "patch_embeddings.projection.bias")
            self.cls = self.t(q + "cls_token").reshape(d)
            self.dist = self.t(q + "distillation_token").reshape(d)
            self.pos = self.t(q + "position_embeddings")[0]
            self.final = (self.t(m.prefix + "layernorm.weight"),
                          self.t(m.prefix + "layernorm.bias"))
            c = m.cfg
            self.fstride = int(c.get("frequency_stride", 10))
            self.tstride = int(c.get("time_stride", 10))
            self.bins = int(c.get("num_mel_bins", 128))
            self.max_length = int(c.get("max_length", 1024))
        m.raw = None  # the float32 copies are all the peer keeps

    def t(self, name):
        if name not in self.m.raw:
            raise Fail(f"model has no tensor {name}")
        return torch.from_numpy(np.ascontiguousarray(self.m.raw[name][1], dtype=np.float32))

    def ln(self, x, wb, eps=None):
        return F.layer_norm(x, (x.shape[-1],), wb[0], wb[1], self.eps if eps is None else eps)

    def encoder(self, x):
        """x (B, S, D) -> (B, S, D): the transformers layers (eager attention)."""
        b, s, d = x.shape
        h, hd = self.heads, d // self.heads
        if self.layers:
            f = self.layers[0]["fc1"].w.shape[0]
            self.flops += len(self.layers) * b * (2 * s * (4 * d * d + 2 * d * f) + 4 * s * s * d)
        for L in self.layers:
            y = self.ln(x, L["ln1"])
            q, k, v = (L[t](y).view(b, s, h, hd).transpose(1, 2) for t in ("q", "k", "v"))
            a = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
            a = a.softmax(dim=-1)
            c = torch.matmul(a, v).transpose(1, 2).reshape(b, s, d)
            x = x + L["o"](c)
            y = self.ln(x, L["ln2"])
            x = x + L["fc2"](self.act(L["fc1"](y)))
        return x

    def count_conv(self, p):
        """A patch embedding's FLOPs: 2 x its outputs x one kernel's weights."""
        self.flops += 2 * p.numel() * (self.conv_w.numel() // self.conv_w.shape[0])

    def pixels(self, frames):
        """(N, H, W, 3) u8 numpy -> (N, 3, H, W) float32 normalised."""
        mean = torch.tensor(self.pp["image_mean"], dtype=torch.float32).view(1, 3, 1, 1)
        std = torch.tensor(self.pp["image_std"], dtype=torch.float32).view(1, 3, 1, 1)
        scale = float(self.pp.get("rescale_factor", 1 / 255))
        x = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
        return (x * scale - mean) / std

    def clip_frames(self, x):
        """x (B, 3, S, S) -> (B, P) projected (or (B, D) pooled without a projection)."""
        b = x.shape[0]
        p = F.conv2d(x, self.conv_w, self.conv_b, stride=self.patch)   # (B, D, gh, gw)
        self.count_conv(p)
        gh, gw = p.shape[2], p.shape[3]
        p = p.flatten(2).transpose(1, 2)
        table = self.pos
        if table.shape[0] != 1 + gh * gw or gh != gw:
            gs = int(round(math.sqrt(table.shape[0] - 1)))
            table = torch.cat([table[:1], hm.resample_grid(table[1:], gs, gh, gw, self.d,
                                                            False)])
        seq = torch.cat([self.cls.expand(b, 1, self.d), p], dim=1) + table[None]
        seq = self.ln(seq, self.pre)
        out = self.encoder(seq)
        pooled = self.ln(out[:, 0], self.post)
        return pooled @ self.proj.T if self.proj is not None else pooled

    def videomae_clips(self, x):
        """x (B, T, 3, S, S) -> (B, D): fc_norm of the mean of the tokens."""
        n = x.shape[1]
        tb = self.tubelet
        if n % tb:   # a partial last tubelet repeats the last frame
            x = torch.cat([x, x[:, -1:].expand(-1, tb - n % tb, -1, -1, -1)], dim=1)
        v = x.permute(0, 2, 1, 3, 4)                                    # (B, 3, T, S, S)
        p = F.conv3d(v, self.conv_w, self.conv_b, stride=(tb, self.patch, self.patch))
        self.count_conv(p)
        p = p.flatten(2).transpose(1, 2)                                # (B, tokens, D)
        p = p + hm.sinusoid(p.shape[1], self.d).to(torch.float32)[None]
        out = self.encoder(p)
        if self.final is not None:
            return self.ln(out, self.final).mean(1)
        pooled = out.mean(1)
        return self.ln(pooled, self.fc_norm, 1e-5) if self.fc_norm is not None else pooled

    def ast_windows(self, fb):
        """fb (B, frames, bins) normalised -> (B, D): (CLS + dist) / 2 after the final norm."""
        b = fb.shape[0]
        x = fb.unsqueeze(1).transpose(2, 3)                             # (B, 1, bins, frames)
        p = F.conv2d(x, self.conv_w, self.conv_b, stride=(self.fstride, self.tstride))
        self.count_conv(p)
        fd, steps = p.shape[2], p.shape[3]
        td = (self.max_length - self.patch) // self.tstride + 1
        grid = self.pos[2:].reshape(fd, td, self.d).permute(2, 0, 1)    # (D, Fd, Td)
        if steps <= td:
            grid = grid[:, :, :steps]
        else:
            grid = F.interpolate(grid[None], size=(fd, steps), mode="bilinear",
                                 align_corners=False)[0]
        p = (p + grid[None]).flatten(2).transpose(1, 2)                 # band-major
        cls = (self.cls + self.pos[0]).expand(b, 1, self.d)
        dist = (self.dist + self.pos[1]).expand(b, 1, self.d)
        out = self.ln(self.encoder(torch.cat([cls, dist, p], dim=1)), self.final)
        return (out[:, 0] + out[:, 1]) / 2

    def fbank(self, wave):
        """wave (n,) float32 numpy, 16 kHz -> (frames, bins) normalised, or None
        when shorter than one patch."""
        import torchaudio.compliance.kaldi as kaldi
        if wave.shape[0] < 400:
            return None
        fb = kaldi.fbank(torch.from_numpy(wave)[None], htk_compat=True, window_type="hanning",
                         num_mel_bins=self.bins, dither=0.0, frame_shift=10, use_energy=False,
                         sample_frequency=16000)
        if fb.shape[0] < self.patch:
            return None
        if self.pp.get("do_normalize", True):
            fb = (fb - float(self.pp.get("mean", -4.2677393))) / \
                 (2.0 * float(self.pp.get("std", 4.5689974)))
        return fb

    def units(self, batch):
        """batch: list of unit inputs of one shape -> (B, P) float32 numpy."""
        if self.family == "clip":
            out = self.clip_frames(torch.cat(batch))
        elif self.family == "videomae":
            out = self.videomae_clips(torch.stack(batch))
        else:
            out = self.ast_windows(torch.stack(batch))
        return out.numpy()


# ---------------------------------------------------------------- decode


def sample_stream(frames, start, fps, period):
    """frames: iterable of (pts as Fraction, item), pts increasing. Yields
    (sample time, item): sample k at start + k / fps shows the last item whose
    pts <= it (the first item for samples before it), up to the end of the last
    item's display (its pts + period). A sample is emitted when the first item
    after its time arrives (or at the end), so only the item on screen is held."""
    k, shown = 0, None
    for pts, item in frames:
        while start + k / fps < pts:
            yield start + k / fps, (item if shown is None else shown[1])
            k += 1
        shown = (pts, item)
    if shown is None:
        return
    while start + k / fps < shown[0] + period:
        yield start + k / fps, shown[1]
        k += 1


def sampled_frames(path, fps):
    """Yields (sample time in seconds, av.VideoFrame), decoding every frame once."""
    import av
    fps = Fraction(fps)
    with av.open(path) as c:
        if not c.streams.video:
            raise Fail(f"{path}: no video stream")
        st = c.streams.video[0]
        st.thread_type = "AUTO"
        start = Fraction(math.floor(c.start_time), 1000000) if c.start_time is not None \
            else Fraction(0)
        period = 1 / Fraction(st.average_rate) if st.average_rate else Fraction(1, 25)
        decoded = ((fr.pts * Fraction(fr.time_base), fr) for fr in c.decode(st)
                   if fr.pts is not None)
        n = 0
        for t, fr in sample_stream(decoded, start, fps, period):
            n += 1
            yield float(t), fr
        if n == 0:
            raise Fail(f"{path}: no video frame decoded")


def picture(frame, pp):
    """av.VideoFrame -> (S, S, 3) u8: PIL resize of the shorter side, centre crop."""
    from PIL import Image
    img = frame.to_image()
    side = pp["size"]["shortest_edge"] if isinstance(pp.get("size"), dict) else int(pp["size"])
    crop = pp.get("crop_size", side)
    ch, cw = (crop["height"], crop["width"]) if isinstance(crop, dict) else (crop, crop)
    w, h = img.size
    nw, nh = (side, int(side * h / w)) if w <= h else (int(side * w / h), side)
    resample = {2: Image.BILINEAR, 3: Image.BICUBIC}.get(int(pp.get("resample", 3)),
                                                          Image.BICUBIC)
    img = img.resize((nw, nh), resample=resample)
    top, left = (nh - ch) // 2, (nw - cw) // 2
    img = img.crop((left, top, left + cw, top + ch))
    return np.asarray(img, dtype=np.uint8)


def decode_audio(path):
    """-> (start seconds, float32 mono 16 kHz samples, the stream's end in
    seconds or None) with PyAV. The end: the stream's start plus its duration
    as the container states it (an MP4's edit list trims the encoder's
    padding), else its last decoded frame's pts plus its samples."""
    import av
    with av.open(path) as c:
        if not c.streams.audio:
            raise Fail(f"{path}: no audio stream")
        st = c.streams.audio[0]
        end = None
        rs = av.AudioResampler(format="flt", layout="mono", rate=16000)
        parts, start = [], None
        for fr in c.decode(st):
            if start is None and fr.pts is not None:
                start = float(fr.pts * fr.time_base)
            if fr.pts is not None and fr.sample_rate:
                end = float(fr.pts * fr.time_base) + fr.samples / fr.sample_rate
            for o in rs.resample(fr):
                parts.append(o.to_ndarray().reshape(-1))
        for o in rs.resample(None):
            parts.append(o.to_ndarray().reshape(-1))
    wave = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
    if st.duration is not None and st.time_base is not None:
        end = float((st.start_time or 0) * st.time_base + st.duration * st.time_base)
    return (start or 0.0), wave, end


def window_samples(model):
    return model.max_length * 160   # 1024 fbank frames of 10 ms: 10.24 s


# ---------------------------------------------------------------- run


class Timer:
    def __init__(self):
        self.s = {}

    def add(self, key, t0):
        self.s[key] = self.s.get(key, 0.0) + time.perf_counter() - t0


def blas_core():
    """OpenBLAS's core name as torch's OpenBLAS reports it ("" if none loaded)."""
    with open("/proc/self/maps") as f:
        paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln and ".so" in ln})
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return ""


def torch_blas():
    cfg = torch.__config__.show()
    i = cfg.find("BLAS_INFO=")
    return cfg[i + 10:].split(",")[0] if i >= 0 else "unknown"


def best_gflops(fn, flops, repeat):
    """flops / the fastest of repeat calls of fn (after one untimed), in GFLOP/s."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return flops / best / 1e9


def gemm_gflops(linear="blas"):
    """2048^3 float32 product, best of 3: torch.mm (the BLAS torch was built on),
    or with linear "mkldnn" a 2048 x 2048 MkldnnLinear, what the model's linear
    layers ran on."""
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    if linear == "mkldnn":
        lin = Linear(b, torch.zeros(n), "mkldnn")
        return best_gflops(lambda: lin(a), 2 * n ** 3, 3)
    return best_gflops(lambda: torch.mm(a, b), 2 * n ** 3, 3)


def blas_probe(threads):
    """The rate of one base-size linear layer (3152 x 768 -> 3072, 16 CLIP-B/16
    frames' fc1) through F.linear and through MkldnnLinear, best of 5 each, with
    this process's environment: which BLAS the run should take."""
    torch.set_num_threads(threads)
    m, k, n = 16 * 197, 768, 3072
    x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    rates = {}
    with torch.inference_mode():
        for mode in ("blas", "mkldnn"):
            lin = Linear(w, b, mode)
            rates[mode] = round(best_gflops(lambda: lin(x), 2 * m * k * n, 5), 1)
    res = {"threads": threads, "torch": torch.__version__, "blas": torch_blas(),
           "blas_core": blas_core(), "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
           "linear_gflops": rates}
    print(json.dumps(res))
    return 0


def run(modeldir, media, out_path, fps, threads, batch, linear, gemm):
    torch.set_num_threads(threads)
    tm = Timer()
    t0 = time.perf_counter()
    model = PeerModel(modeldir, linear)
    tm.add("load", t0)
    fam = model.family
    batch = batch or DEFAULT_BATCH[fam]
    rows, starts, ends = [], [], []
    pending, shape = [], None

    def flush():
        nonlocal pending
        if pending:
            t1 = time.perf_counter()
            rows.append(model.units([u for u, _, _ in pending]))
            tm.add("model", t1)
            starts.extend(s for _, s, _ in pending)
            ends.extend(e for _, _, e in pending)
            pending = []

    def push(unit, s, e):
        nonlocal shape
        if shape is not None and tuple(unit.shape) != shape:
            flush()
        shape = tuple(unit.shape)
        pending.append((unit, s, e))
        if len(pending) == batch:
            flush()

    with torch.inference_mode():
        if fam == "ast":
            t1 = time.perf_counter()
            start, wave, rec_end = decode_audio(media)
            tm.add("decode", t1)
            win = window_samples(model)
            for a in range(0, wave.shape[0], win):
                t1 = time.perf_counter()
                seg = wave[a:a + win]
                fb = model.fbank(seg)
                tm.add("decode", t1)
                if fb is None:
                    break
                end = start + (a + seg.shape[0]) / 16000
                push(fb, start + a / 16000, end if rec_end is None else min(end, rec_end))
        else:
            fps = Fraction(fps if fps is not None else DEFAULT_FPS[fam]).limit_denominator(1001000)
            per = int(model.cfg.get("num_frames", 16)) if fam == "videomae" else 1
            clip, clip_t = [], []
            it = sampled_frames(media, fps)
            while True:
                t1 = time.perf_counter()
                try:
                    t, fr = next(it)
                except StopIteration:
                    tm.add("decode", t1)
                    break
                clip.append(picture(fr, model.pp))
                clip_t.append(t)
                if len(clip) == per:
                    x = model.pixels(np.stack(clip))
                    tm.add("decode", t1)
                    push(x, clip_t[0], clip_t[0] + per / float(fps))
                    clip, clip_t = [], []
                else:
                    tm.add("decode", t1)
            if clip:   # a last partial clip, ending with the recording
                x = model.pixels(np.stack(clip))
                push(x, clip_t[0], clip_t[-1] + 1 / float(fps))
        flush()
    if not rows:
        raise Fail(f"{media}: no {UNIT_NAME[fam]} to embed")
    res = np.concatenate(rows)
    info = {"family": fam, "unit": UNIT_NAME[fam], "units": int(res.shape[0]),
            "threads": threads, "batch": batch, "linear": linear,
            "torch": torch.__version__, "blas": torch_blas(), "blas_core": blas_core(),
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
            "model_gflop": round(model.flops / 1e9, 1),
            "seconds": {k: round(tm.s.get(k, 0.0), 3) for k in ("load", "decode", "model")}}
    info["seconds"]["total"] = round(time.perf_counter() - T_MAIN, 3)
    if gemm:
        info["gemm_gflops"] = round(gemm_gflops(linear), 1)
    hm.write_st(out_path, [("rows", res, "F32"), ("unit_start", np.array(starts), "F64"),
                           ("unit_end", np.array(ends), "F64")], {"peer": json.dumps(info)})
    print(json.dumps(info))
    return 0


# ---------------------------------------------------------------- check


def ringvit_rows(out, family):
    key = "block_projected" if family == "clip" and "block_projected" in out else "block_pooled"
    if key not in out or "block_start" not in out or "block_end" not in out:
        raise Fail(f"ringvit output has no {key} / block_start / block_end")
    return key, out[key][1].astype(np.float64), out["block_start"][1], out["block_end"][1]


def pick(n, k):
    if k <= 0 or k >= n:
        return list(range(n))
    return sorted({int(round(i * (n - 1) / (k - 1))) for i in range(k)}) if k > 1 else [0]


def rel(a, ref):
    return float(np.abs(a - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def check(modeldir, rv_path, frames_path, peer_path, tol, k, threads):
    torch.set_num_threads(threads)
    model = PeerModel(modeldir)
    fam = model.family
    out, _ = hm.read_st(rv_path)
    key, got, bs, be = ringvit_rows(out, fam)
    n = got.shape[0]
    fr, meta = hm.read_st(frames_path)
    chosen = pick(n, k)
    err, where = 0.0, None
    with torch.inference_mode():
        for g in chosen:
            if fam == "ast":
                start = float(json.loads(meta["ingest"]).get("start_s", 0.0))
                wave = fr["audio"][1].astype(np.float32)
                a = int(round((bs[g] - start) * 16000))
                b = min(int(round((be[g] - start) * 16000)), wave.shape[0])
                fb = model.fbank(wave[max(a, 0):b])
                if fb is None:
                    raise Fail(f"block {g}: fewer samples than one patch")
                ref = model.units([fb])[0]
            else:
                times = fr["frame_time"][1]
                sel = (times >= bs[g] - 1e-9) & (times < be[g] - 1e-9)
                if not sel.any():
                    raise Fail(f"block {g} [{bs[g]:.6f}, {be[g]:.6f}) holds no frame")
                x = model.pixels(np.ascontiguousarray(fr["frames"][1][sel]))
                ref = model.units([x])[0]
            e = rel(got[g], ref.astype(np.float64))
            if not e <= err:
                err, where = e, g
    po, _ = hm.read_st(peer_path)
    prow, ps, pe = po["rows"][1].astype(np.float64), po["unit_start"][1], po["unit_end"][1]
    same_units = prow.shape == got.shape and np.allclose(ps, bs, atol=1e-6, rtol=0) and \
        np.allclose(pe, be, atol=1e-6, rtol=0)
    e2e = [rel(got[g], prow[g]) for g in range(n)] if prow.shape == got.shape else [float("nan")]
    ok = bool(err <= tol and same_units)
    res = {"model": os.path.basename(os.path.normpath(modeldir)), "row": key, "units": n,
           "peer_units": int(prow.shape[0]), "same_bounds": bool(same_units),
           "checked": len(chosen), "err": err, "worst_unit": where, "tol": tol,
           "e2e_err": max(e2e), "e2e_median": float(np.median(e2e)), "ok": ok}
    print(json.dumps(res))
    return 0 if ok else 1


# ---------------------------------------------------------------- selftest


def selftest():
    torch.set_num_threads(1)
    ok = True
    work = tempfile.mkdtemp(prefix="peer_pipeline_")
    hub = os.path.join(work, "hub")
    hm.make(hub)
    rng = np.random.default_rng(3)
    # float32 batched model against the float64 reference, and batch invariance
    frames = hm.frames_input(rng, 8, 32)
    for name in ("clip", "clip_vision", "videomae", "videomae_pt"):
        pm = PeerModel(os.path.join(hub, name))
        m = hm.Model(os.path.join(hub, name))
        if pm.family == "clip":
            units = [frames[i:i + 1] for i in range(4)]
            refs = [hm.forward_video(m, u, 1) for u in units]
            want = [r["projected"] if r["projected"] is not None else r["pooled"] for r in refs]
            xs = [pm.pixels(u) for u in units]
        else:
            units = [frames[0:4], frames[4:8], frames[2:5]]   # the last one: a partial tubelet
            want = [hm.forward_video(m, u, None)["pooled"] for u in units]
            xs = [pm.pixels(u) for u in units]
        with torch.inference_mode():
            if pm.family == "clip":
                together = pm.units(xs)
            else:
                together = np.concatenate([pm.units(xs[:2]), pm.units(xs[2:])])
            alone = np.concatenate([pm.units([x]) for x in xs])
        e = max(rel(together[i].astype(np.float64), want[i].numpy()) for i in range(len(xs)))
        eb = rel(together.astype(np.float64), alone.astype(np.float64))
        print(f"{name}: float32 batched vs float64 reference {e:.3g}, batch vs alone {eb:.3g}")
        ok &= e <= 1e-4 and eb <= 1e-5
    pm = PeerModel(os.path.join(hub, "ast"))
    m = hm.Model(os.path.join(hub, "ast"))
    t = np.arange(400 + 1021 * 160) / 16000.0
    waves = [(0.3 * np.sin(2 * math.pi * (200 + 60 * j) * t) + rng.normal(0, 0.02, t.size))
             for j in range(2)]
    waves.append(waves[0][:400 + 500 * 160])                 # a short window: 501 frames
    want = [hm.forward_audio(m, hm.kaldi_fbank64(w))["pooled"] for w in waves]
    with torch.inference_mode():
        fbs = [pm.fbank(w.astype(np.float32)) for w in waves]
        got = np.concatenate([pm.units(fbs[:2]), pm.units(fbs[2:])])
    e = max(rel(got[i].astype(np.float64), want[i].numpy()) for i in range(3))
    print(f"ast: float32 (torchaudio fbank on float32 samples) vs float64 reference {e:.3g}")
    ok &= e <= 1e-3
    # the sampler: 25 fps frames from 0.02 s, samples at 2 fps from 0: sample 0
    # (before the first frame) repeats it, 0.5 s shows frame 12 (0.5 s exactly),
    # 1.0 s is past the last frame's display (0.98 + 0.04 = 1.02 s): frame 24
    pts = [Fraction(1, 50) + Fraction(i, 25) for i in range(25)]
    got = [(t, i) for t, i in sample_stream(((p, i) for i, p in enumerate(pts)), Fraction(0),
                                            Fraction(2), Fraction(1, 25))]
    want = [(Fraction(0), 0), (Fraction(1, 2), 12), (Fraction(1), 24)]
    print(f"sampler: {[(float(a), b) for a, b in got]}")
    ok &= got == want
    none = list(sample_stream(iter(()), Fraction(0), Fraction(2), Fraction(1, 25)))
    ok &= none == []
    # check rejects a perturbed row: rel of a row against itself is 0, off by 2e-3 is not
    r = rng.normal(size=64)
    r2 = r.copy()
    r2[5] += 2e-3 * np.abs(r).max()
    ok &= rel(r, r) == 0 and rel(r2, r) > 1e-3
    print("selftest " + ("OK" if ok else "FAILED"))
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


# ---------------------------------------------------------------- main


def usage():
    print(__doc__.split("RUN (")[0].rstrip(), file=sys.stderr)
    return 2


def main(argv):
    if not argv:
        return usage()
    cmd, args = argv[0], argv[1:]
    flags = {"--fps": str, "--threads": int, "--batch": int, "--linear": str, "--tol": float,
             "--units": int}
    opts, pos, i = {}, [], 0
    try:
        while i < len(args):
            a = args[i]
            if a == "--gemm":
                opts[a] = True
                i += 1
            elif a in flags and i + 1 < len(args):
                opts[a] = flags[a](args[i + 1])
                i += 2
            elif a.startswith("--"):
                return usage()
            else:
                pos.append(a)
                i += 1
    except ValueError:
        return usage()
    threads = opts.get("--threads", os.cpu_count() or 1)
    try:
        if cmd == "run" and len(pos) == 3 and opts.get("--linear", "blas") in ("blas", "mkldnn"):
            fps = Fraction(opts["--fps"]) if "--fps" in opts else None
            return run(pos[0], pos[1], pos[2], fps, threads, opts.get("--batch"),
                       opts.get("--linear", "blas"), opts.get("--gemm", False))
        if cmd == "check" and len(pos) == 4:
            return check(pos[0], pos[1], pos[2], pos[3], opts.get("--tol", 1e-3),
                         opts.get("--units", 8), threads)
        if cmd == "blas" and not pos:
            return blas_probe(threads)
        if cmd == "selftest" and not pos:
            return selftest()
    except (Fail, hm.Fail, OSError, KeyError, ValueError) as e:
        print(f"peer_pipeline {cmd} FAILED: {e}")
        return 1
    return usage()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
