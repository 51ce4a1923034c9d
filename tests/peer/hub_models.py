#!/usr/bin/python3
"""hub_models.py: tiny Hugging Face hub checkpoints for `ringvit ... --model DIR`
and the independent float64 reference its tests compare against (no
transformers, no safetensors package: safetensors are read and written by hand,
8-byte little-endian header length, JSON header, raw little-endian data).

    hub_models.py make OUTDIR
    hub_models.py make-base OUTDIR     (videomae-base/, ast-base/, clip-vit-base-patch16/:
                                       the published base sizes, random weights, for
                                       benchmarks only)
    hub_models.py check MODELDIR KIND RINGVIT_OUT INPUTS [--tol 1e-4] [--wav W.wav]
    hub_models.py ref MODELDIR KIND INPUTS OUT.safetensors [--tubelet T]
    hub_models.py selftest [WORKDIR]

Exit status: 0 ok, 1 failed (one line saying why), 2 bad usage.

MAKE
----
Writes one folder per checkpoint, each in the hub layout: config.json (keys as
transformers' save_pretrained writes them: json indent 2, sorted keys,
"model_type", "architectures", "torch_dtype", "transformers_version"),
model.safetensors (header "__metadata__": {"format": "pt"}, tensors in the real
transformers names and shapes, F32 unless said otherwise, data laid out by
dtype alignment then name as the safetensors library does) and
preprocessor_config.json as the hub has it. Seeded: identical bytes every run;
prints nothing but errors. Sizes: D 64, 2 heads, 2 layers, MLP 128.
Every weight is random; LayerNorm weights are 1 + noise, their biases, all
other biases, CLS / distillation tokens, position tables and layer-scale
gammas are noise (never exactly 0 or 1); matrices are scaled by 1/sqrt(fan_in)
so activations stay O(1) while the blocks are far from the identity.
  vit/          ViTModel (with pooler). image 32, patch 8 (stored grid G 4),
                hidden_act "gelu", layer_norm_eps 1e-12, qkv_bias true.
                Tensors: embeddings.cls_token (1,1,D),
                embeddings.position_embeddings (1,1+G*G,D),
                embeddings.patch_embeddings.projection.{weight (D,3,P,P),bias},
                encoder.layer.{i}.layernorm_before.{weight,bias},
                encoder.layer.{i}.attention.attention.{query,key,value}.{weight,bias},
                encoder.layer.{i}.attention.output.dense.{weight,bias},
                encoder.layer.{i}.layernorm_after.{weight,bias},
                encoder.layer.{i}.intermediate.dense.{weight,bias} (128,D),
                encoder.layer.{i}.output.dense.{weight,bias} (D,128),
                layernorm.{weight,bias}, pooler.dense.{weight,bias}.
                Preprocessor ViTImageProcessor: mean = std = [0.5]*3, size
                {"height":32,"width":32}, resample 2, rescale 1/255.
  vit_cls/      ViTForImageClassification: the same under "vit." without the
                pooler, plus classifier.{weight (5,D),bias}; hidden_act
                "gelu_new" (tanh GELU).
  dinov2/       Dinov2Model: embeddings.{cls_token (1,1,D), mask_token (1,D),
                position_embeddings (1,1+5*5,D), patch_embeddings.projection.*},
                encoder.layer.{i}.norm1.*, .attention.attention.{query,key,value}.*,
                .attention.output.dense.*, .layer_scale1.lambda1 (D), .norm2.*,
                .mlp.fc1.* (256,D), .mlp.fc2.* (D,256), .layer_scale2.lambda1,
                layernorm.*. image 40, patch 8 (stored grid 5), mlp_ratio 4,
                layer_norm_eps 1e-6, use_swiglu_ffn false. Preprocessor
                BitImageProcessor: ImageNet mean/std, crop {"height":32,
                "width":32}, size {"shortest_edge":36}, resample 3.
  dinov2_cls/   Dinov2ForImageClassification: the same sizes under "dinov2.", plus
                classifier.{weight (6,2D),bias}; id2label of six labels beyond
                ASCII (DINO_LABELS: UTF-8, quotes, a comma).
  videomae/     VideoMAEForVideoClassification: videomae.embeddings.
                patch_embeddings.projection.{weight (D,3,2,8,8),bias},
                videomae.encoder.layer.{i}.layernorm_before.*,
                .attention.attention.{query,key,value}.weight (no bias tensors),
                .attention.attention.q_bias, .attention.attention.v_bias,
                .attention.output.dense.*, .layernorm_after.*,
                .intermediate.dense.*, .output.dense.*; fc_norm.*,
                classifier.{weight (5,D),bias}; no videomae.layernorm
                (use_mean_pooling true). image 32, patch 8, tubelet_size 2,
                num_frames 4. Preprocessor VideoMAEImageProcessor (ImageNet).
  videomae_pt/  VideoMAEForPreTraining: videomae.* as above plus
                videomae.layernorm.* (use_mean_pooling false), and tensors the
                loader must ignore: encoder_to_decoder.weight (32,D),
                mask_token (1,1,32), decoder.decoder_layers.0.* (one whole
                VideoMAE layer of width 32), decoder.norm.*, decoder.head.*.
  ast/          ASTForAudioClassification: audio_spectrogram_transformer.
                embeddings.{cls_token, distillation_token} (1,1,D),
                .embeddings.position_embeddings (1,2+12*101,D),
                .embeddings.patch_embeddings.projection.{weight (D,1,16,16),bias},
                .encoder.layer.{i}.* (as ViT), .layernorm.*; then
                classifier.layernorm.*, classifier.dense.{weight (7,D),bias}.
                num_mel_bins 128, max_length 1024, patch 16, strides 10/10;
                problem_type "multi_label_classification" (as AudioSet's),
                id2label AST_LABELS.
                Preprocessor ASTFeatureExtractor (mean -4.2677393, std 4.5689974).
  clip/         CLIPModel: vision_model.embeddings.class_embedding (D),
                .patch_embedding.weight (D,3,8,8) (no bias),
                .position_embedding.weight (1+16,D), .position_ids (1,17) I64,
                vision_model.pre_layrnorm.*, vision_model.encoder.layers.{i}.
                {layer_norm1, self_attn.{q,k,v,out}_proj, layer_norm2, mlp.fc1,
                mlp.fc2}.*, vision_model.post_layernorm.*,
                visual_projection.weight (32,D); a small text tower
                text_model.* (width 32, one layer), text_projection.weight,
                logit_scale (scalar). config "clip" with vision_config and
                text_config. Preprocessor CLIPImageProcessor (CLIP mean/std,
                crop {"height":32,"width":32}, size {"shortest_edge":32}).
  clip_vision/  CLIPVisionModel: model_type "clip_vision_model", flat config,
                only vision_model.* (no position_ids), and the older
                preprocessor form (CLIPFeatureExtractor, crop_size 32, size 32).
  Hostile variants (of vit/): bad_noconfig/ (no config.json), bad_type/
  (model_type "llama"), bad_shape/ (config hidden_size 96, tensors 64),
  bad_missing/ (encoder.layer.1.attention.attention.key.weight removed),
  bad_labels/ (vit_cls/ whose id2label names classes 0, 1, 3, 4, 5: no 2),
  vit_extra/ (plus an unknown tensor "foo.bar", F32 (4,)), vit_f16/ and
  vit_bf16/ (every tensor stored as F16 / BF16, rounded to nearest even; the
  reference then uses the rounded values).

CHECK
-----
Recomputes in float64 (weights cast to float64 after any F16/BF16 rounding)
from ringvit's own decoded inputs and compares with ringvit's output:
  KIND video: INPUTS from `ringvit frames ... -o F`: tensor frames (N,S,S,3) U8.
  KIND audio: INPUTS from `ringvit tokens ... -o F`: tensor audio_fbank
      (frames,128) F32, Kaldi log-mel before normalisation. With --wav W.wav
      (16 kHz mono 16-bit PCM, read as int16 / 32768) that fbank is first
      compared with torchaudio.compliance.kaldi.fbank(w, htk_compat=True,
      window_type='hanning', num_mel_bins=128, dither=0.0, frame_shift=10,
      use_energy=False, sample_frequency=16000) in float64: max abs <= 1e-3.
  RINGVIT_OUT (`ringvit embed INPUT --model MODELDIR --tokens -o OUT`):
      tokens (S,D) F32, token_modality (S) U8 (0 video, 1 audio, 2 special),
      token_pos (S,3) I64 (video (tubelet g, row, col); audio (step p, band f,
      0); special (i,0,0), i 0 CLS, 1 AST's distillation token), pooled (D)
      F32, projected (Pj) F32 (CLIP with visual_projection only), logits (C)
      F32 (exactly the models with a classifier ringvit applies), string
      metadata "config" (JSON; its "tubelet" is the T used, default 1 for the
      image families, tubelet_size for VideoMAE, which must agree), and with
      logits "labels" (JSON: config.json's id2label in id order, LABEL_i where
      it has none) and "multi_label" ("true" when problem_type is
      "multi_label_classification", else "false").
  Tokens are matched by (modality, token_pos), so the order does not matter
  (attention is full); both sides must hold exactly the same set. Error: per
  token row |ringvit - ref|.max / |ref row|.max, the max over tokens; pooled,
  projected and logits the same way. Prints one line; exit 0 when all <= tol.

Reference semantics (transformers' models; this is the spec the C side follows)
  pixels: x = (u8 / 255 - mean[c]) / std[c], the preprocessor's image_mean/std.
  Image families (vit, vit_cls, dinov2, clip, clip_vision), frames (N,H,W,3),
    tubelet T (1 unless the output's config says 2): grid G' = H/P x W/P;
    tubelet g covers frames gT..gT+T-1, a trailing partial tubelet repeating
    the last frame; token (g,r,c) = sum over its T frames of conv2d(frame,
    W / T) (+ bias once), i.e. conv(a)/2 + conv(b)/2 for T 2, plus the
    position of (r,c); sequence = [CLS + pos[0], tokens in (g,r,c) order].
    Position table: when the stored grid G differs from G' (or H != W) the
    patch part, as (1,D,G,G), goes through F.interpolate(size=(G'h,G'w),
    mode="bicubic", align_corners=False) (transformers' interpolate_pos_encoding
    in current releases; DINOv2 does that interpolation in float32 and casts
    back, as transformers does; earlier transformers releases (and DINOv2's
    own code) used scale_factor = (G' + 0.1) / G instead of size: slightly
    different values). One frame with T 1 = exactly the transformers model
    with interpolate_pos_encoding=True.
    ViT: layer = x + attn(LN_before(x)) (q,k,v with biases, scale hd^-0.5,
      output dense); x + fc2(act(fc1(LN_after(x)))); all LN eps layer_norm_eps;
      final layernorm on all tokens; pooled = pooler_act(pooler.dense(CLS))
      (pooler_act default "tanh") with a pooler, else the final-normed CLS.
      act: "gelu" erf form; "gelu_new", "gelu_pytorch_tanh", "gelu_fast"
      tanh form; "quick_gelu" x*sigmoid(1.702x).
    DINOv2: ViT layer with norm1/norm2 and layer scale: x + lambda1 * attn,
      x + lambda2 * mlp; final layernorm; pooled = final-normed CLS.
    CLIP: [class_embedding, conv patches (no bias)] + position_embedding;
      pre_layrnorm on all tokens; layers x + out_proj(attn(layer_norm1(x))),
      x + fc2(act(fc1(layer_norm2(x)))); tokens = last_hidden_state (no final
      norm); pooled = post_layernorm(CLS); projected = visual_projection(pooled).
  VideoMAE: frames in tubelets of tubelet_size (partial last one repeats the
    last frame), Conv3d (D,3,T,P,P) + bias; position = the sinusoid table value
    (angle pos / 10000^(2*(j//2)/D), sin on even j, cos on odd, computed in
    float64, rounded to float32) at flat index g*G'h*G'w + r*G'w + c, for as
    many tubelets as the clip has; no CLS; attention biases q_bias, 0, v_bias;
    ViT layers. use_mean_pooling: no final norm, tokens = last_hidden_state,
    pooled = fc_norm(mean of tokens) with eps 1e-5 (nn.LayerNorm default), or
    the plain mean without fc_norm. Else: final layernorm (layer_norm_eps) on
    the tokens, pooled = mean of the normed tokens (ringvit's choice:
    transformers' VideoMAEModel has no pooled output, and its classifier
    without fc_norm would take token 0).
  AST: x = (fbank - mean) / (2 * std) (do_normalize false: x = fbank), laid out
    (freq 128, time frames); Conv2d(1,D,16x16, stride (frequency_stride,
    time_stride)) over (freq, time): Fd = (128-16)//10+1 = 12 bands, steps =
    (frames-16)//10+1; token (p,f) = conv output at (band f, step p); the
    learned table's patch part viewed as (1,D,Fd,Td), Td = (max_length-16)//10+1
    = 101: steps <= Td uses columns 0..steps-1, steps > Td resamples with
    F.interpolate(size=(Fd,steps), mode="bilinear", align_corners=False);
    token (p,f) gets entry (f,p); CLS + pos[0], distillation + pos[1];
    sequence [CLS, dist, patches band-major]; ViT layers; final layernorm on
    all tokens; pooled = (CLS + dist) / 2 after the final norm. (1022 frames
    -> 101 steps = Td: exactly transformers on the 1024-frame padded input,
    which no patch reaches past frame 1015; 2498 frames -> 249 steps:
    resampled, ringvit's extension, as is steps < Td: transformers pads or
    cuts the fbank to max_length frames (zeros before normalising) and so
    always has Td steps.)
  Logits (the task models' heads, on the outputs above):
    ViTForImageClassification       classifier(final-normed CLS)
    Dinov2ForImageClassification    classifier(cat(CLS, mean of the patch tokens))
    VideoMAEForVideoClassification  classifier(fc_norm(mean of the tokens)); without
                                    fc_norm transformers reads token 0, which ringvit
                                    does not load: no logits expected
    ASTForAudioClassification       classifier.dense(classifier.layernorm(pooled),
                                    eps layer_norm_eps)

REF writes what `check` compares against, in the same file layout as ringvit's
output (float32), for looking at by hand. SELFTEST makes the models into a
temporary folder (twice, checking the bytes are identical), writes small
inputs and a fake "ringvit output" from this reference for every family, and
shows that check passes on it and fails when one weight, one position-table
entry, one token_pos, one token value or the pooled vector is perturbed.

How the tests call it:
    /usr/bin/python3 tests/peer/hub_models.py make $TMP/hub
    ringvit frames clip.mp4 --size 48 ... -o $TMP/f.safetensors
    ringvit embed clip.mp4 --model $TMP/hub/vit --tokens -o $TMP/o.safetensors
    /usr/bin/python3 tests/peer/hub_models.py check $TMP/hub/vit video \\
        $TMP/o.safetensors $TMP/f.safetensors --tol 1e-4
    (audio: `ringvit tokens a.wav -o $TMP/t.safetensors`, then
     check $TMP/hub/ast audio $TMP/o.safetensors $TMP/t.safetensors --wav a.wav)
"""
import json
import math
import os
import re
import shutil
import struct
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

TRANSFORMERS_VERSION = "4.46.3"
D, HEADS, LAYERS, MLP = 64, 2, 2, 128
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
RESCALE = 0.00392156862745098  # 1 / 255 as the hub's JSON spells it


class Fail(Exception):
    pass


# ---------------------------------------------------------------- safetensors

NP_OF = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
         "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
         "U8": np.uint8, "BOOL": np.bool_}


def bf16_bits(a):
    """float32 array -> bfloat16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def encode(arr, dtype):
    """arr (float or int numpy) -> bytes of the stored tensor in dtype."""
    if dtype == "BF16":
        raw = bf16_bits(arr.astype(np.float32))
    else:
        raw = np.asarray(arr).astype(NP_OF[dtype])
    return np.ascontiguousarray(raw).astype(raw.dtype.newbyteorder("<")).tobytes()


def write_st(path, tensors, metadata=None):
    """tensors: list of (name, array, dtype string). Data in the safetensors
    library's order: larger dtype first, then by name; header keys sorted."""
    size = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2,
            "U8": 1, "I8": 1, "BOOL": 1}
    order = sorted(tensors, key=lambda t: (-size[t[2]], t[0]))
    header, blobs, off = {}, [], 0
    for name, arr, dt in order:
        raw = encode(arr, dt)
        header[name] = {"dtype": dt, "shape": [int(s) for s in np.shape(arr)],
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    head = {}
    if metadata is not None:
        head["__metadata__"] = metadata
    for k in sorted(header):
        head[k] = header[k]
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_st(path):
    """-> ({name: (dtype string, numpy array)}, metadata). BF16 comes back as
    its exact float32 value, F16 as float16; nothing else is converted."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise Fail(f"{path}: shorter than a safetensors header")
    n = struct.unpack("<Q", raw[:8])[0]
    if 8 + n > len(raw):
        raise Fail(f"{path}: header length {n} runs past the file")
    try:
        head = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise Fail(f"{path}: bad header JSON ({e})")
    meta = head.pop("__metadata__", {}) or {}
    data = raw[8 + n:]
    out = {}
    for name, t in head.items():
        dt = t["dtype"]
        if dt not in NP_OF:
            raise Fail(f"{path}: tensor {name}: dtype {dt} not handled")
        b, e = t["data_offsets"]
        npd = np.dtype(NP_OF[dt]).newbyteorder("<")
        count = int(np.prod(t["shape"], dtype=np.int64)) if t["shape"] else 1
        if e - b != count * npd.itemsize or e > len(data) or b < 0:
            raise Fail(f"{path}: tensor {name}: {e - b} bytes for shape {t['shape']}")
        a = np.frombuffer(data[b:e], dtype=npd).reshape(t["shape"]).astype(npd.newbyteorder("="))
        if dt == "BF16":
            a = bf16_value(a)
        out[name] = (dt, a)
    return out, meta


def write_json(path, obj):
    with open(path, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------- make


class Gen:
    """Seeded random tensors, all float32."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.t = {}

    def n(self, shape, std):
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def put(self, name, arr):
        arr = np.asarray(arr)
        self.t[name] = arr if arr.dtype == np.int64 else arr.astype(np.float32)

    def lin(self, name, out, inp, bias=True, gain=1.0):
        self.put(name + ".weight", self.n((out, inp), gain / math.sqrt(inp)))
        if bias:
            self.put(name + ".bias", self.n((out,), 0.1))

    def ln(self, name, d):
        self.put(name + ".weight", 1.0 + self.n((d,), 0.2))
        self.put(name + ".bias", self.n((d,), 0.1))

    def vec(self, name, shape, std):
        self.put(name, self.n(shape, std))

    def conv(self, name, shape, bias=True):
        fan = int(np.prod(shape[1:]))
        self.put(name + ".weight", self.n(shape, 1.0 / math.sqrt(fan)))
        if bias:
            self.put(name + ".bias", self.n((shape[0],), 0.1))


def vit_layer(g, p, d=D, mlp=MLP):
    g.ln(p + "layernorm_before", d)
    for k in ("query", "key", "value"):
        g.lin(p + "attention.attention." + k, d, d)
    g.lin(p + "attention.output.dense", d, d)
    g.ln(p + "layernorm_after", d)
    g.lin(p + "intermediate.dense", mlp, d)
    g.lin(p + "output.dense", d, mlp)


def videomae_layer(g, p, d=D, mlp=MLP):
    g.ln(p + "layernorm_before", d)
    for k in ("query", "key", "value"):
        g.lin(p + "attention.attention." + k, d, d, bias=False)
    g.vec(p + "attention.attention.q_bias", (d,), 0.1)
    g.vec(p + "attention.attention.v_bias", (d,), 0.1)
    g.lin(p + "attention.output.dense", d, d)
    g.ln(p + "layernorm_after", d)
    g.lin(p + "intermediate.dense", mlp, d)
    g.lin(p + "output.dense", d, mlp)


def clip_layer(g, p, d, mlp):
    g.ln(p + "layer_norm1", d)
    for k in ("q_proj", "k_proj", "v_proj", "out_proj"):
        g.lin(p + "self_attn." + k, d, d)
    g.ln(p + "layer_norm2", d)
    g.lin(p + "mlp.fc1", mlp, d)
    g.lin(p + "mlp.fc2", d, mlp)


def labels(n):
    return ({str(i): f"LABEL_{i}" for i in range(n)}, {f"LABEL_{i}": i for i in range(n)})


def common_cfg(arch, model_type, dtype="float32"):
    return {"architectures": [arch], "model_type": model_type, "torch_dtype": dtype,
            "transformers_version": TRANSFORMERS_VERSION}


def vit_cfg(arch, act):
    c = common_cfg(arch, "vit")
    c.update({"attention_probs_dropout_prob": 0.0, "encoder_stride": 8, "hidden_act": act,
              "hidden_dropout_prob": 0.0, "hidden_size": D, "image_size": 32,
              "initializer_range": 0.02, "intermediate_size": MLP, "layer_norm_eps": 1e-12,
              "num_attention_heads": HEADS, "num_channels": 3, "num_hidden_layers": LAYERS,
              "patch_size": 8, "pooler_act": "tanh", "pooler_output_size": D, "qkv_bias": True})
    return c


VIT_PP = {"do_normalize": True, "do_rescale": True, "do_resize": True,
          "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "ViTImageProcessor",
          "image_std": [0.5, 0.5, 0.5], "resample": 2, "rescale_factor": RESCALE,
          "size": {"height": 32, "width": 32}}


def make_vit(seed, prefix, pooler):
    g = Gen(seed)
    G, P = 4, 8
    g.vec(prefix + "embeddings.cls_token", (1, 1, D), 0.5)
    g.vec(prefix + "embeddings.position_embeddings", (1, 1 + G * G, D), 0.5)
    g.conv(prefix + "embeddings.patch_embeddings.projection", (D, 3, P, P))
    for i in range(LAYERS):
        vit_layer(g, f"{prefix}encoder.layer.{i}.")
    g.ln(prefix + "layernorm", D)
    if pooler:
        g.lin("pooler.dense", D, D)
    return g.t


# Labels of the classification checkpoints that are not LABEL_i: UTF-8 beyond
# ASCII, spaces, quotes, a comma (AudioSet's own names have commas).
DINO_LABELS = ["tabby cat", "Löwe", "犬", "\"quoted\" bird", "café, terrace", "🦉 owl"]
AST_LABELS = ["Speech", "Music", "Dog", "Rain", "Guitar", "Siren", "Bird vocalization, bird call"]


def make_dinov2(seed, prefix, arch):
    """-> (tensors, config) of a Dinov2Model under prefix."""
    g = Gen(seed)
    G, P, M = 5, 8, 4 * D
    g.vec(prefix + "embeddings.cls_token", (1, 1, D), 0.5)
    g.vec(prefix + "embeddings.mask_token", (1, D), 0.5)
    g.vec(prefix + "embeddings.position_embeddings", (1, 1 + G * G, D), 0.5)
    g.conv(prefix + "embeddings.patch_embeddings.projection", (D, 3, P, P))
    for i in range(LAYERS):
        p = f"{prefix}encoder.layer.{i}."
        g.ln(p + "norm1", D)
        for k in ("query", "key", "value"):
            g.lin(p + "attention.attention." + k, D, D)
        g.lin(p + "attention.output.dense", D, D)
        g.put(p + "layer_scale1.lambda1", 0.7 + g.n((D,), 0.2))
        g.ln(p + "norm2", D)
        g.lin(p + "mlp.fc1", M, D)
        g.lin(p + "mlp.fc2", D, M)
        g.put(p + "layer_scale2.lambda1", 0.7 + g.n((D,), 0.2))
    g.ln(prefix + "layernorm", D)
    c = common_cfg(arch, "dinov2")
    c.update({"attention_probs_dropout_prob": 0.0, "drop_path_rate": 0.0, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.0, "hidden_size": D, "image_size": 40,
              "initializer_range": 0.02, "layer_norm_eps": 1e-6, "layerscale_value": 1.0,
              "mlp_ratio": 4, "num_attention_heads": HEADS, "num_channels": 3,
              "num_hidden_layers": LAYERS, "patch_size": 8, "qkv_bias": True,
              "use_swiglu_ffn": False})
    return g.t, c


def make_all():
    """-> {folder: (tensors {name: array}, dtypes {name: dtype} or None,
    config or None, preprocessor or None)}"""
    out = {}
    vit = make_vit(101, "", True)
    out["vit"] = (vit, None, vit_cfg("ViTModel", "gelu"), VIT_PP)

    t = make_vit(102, "vit.", False)
    g = Gen(1102)
    g.lin("classifier", 5, D)
    t.update(g.t)
    c = vit_cfg("ViTForImageClassification", "gelu_new")
    c["id2label"], c["label2id"] = labels(5)
    out["vit_cls"] = (t, None, c, VIT_PP)

    # DINOv2, and Dinov2ForImageClassification (classifier on [CLS, mean of the
    # patch tokens]; labels that are not ASCII)
    pp = {"crop_size": {"height": 32, "width": 32}, "do_center_crop": True,
          "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
          "image_mean": IMAGENET_MEAN, "image_processor_type": "BitImageProcessor",
          "image_std": IMAGENET_STD, "resample": 3, "rescale_factor": RESCALE,
          "size": {"shortest_edge": 36}}
    t, c = make_dinov2(103, "", "Dinov2Model")
    out["dinov2"] = (t, None, c, pp)
    t, c = make_dinov2(109, "dinov2.", "Dinov2ForImageClassification")
    g = Gen(1109)
    g.lin("classifier", len(DINO_LABELS), 2 * D)
    t.update(g.t)
    c["id2label"] = {str(i): v for i, v in enumerate(DINO_LABELS)}
    c["label2id"] = {v: i for i, v in enumerate(DINO_LABELS)}
    out["dinov2_cls"] = (t, None, c, pp)

    # VideoMAE
    vpp = {"crop_size": {"height": 32, "width": 32}, "do_center_crop": True,
           "do_normalize": True, "do_rescale": True, "do_resize": True,
           "image_mean": IMAGENET_MEAN, "image_processor_type": "VideoMAEImageProcessor",
           "image_std": IMAGENET_STD, "resample": 2, "rescale_factor": RESCALE,
           "size": {"shortest_edge": 32}}
    DD = 32

    def vmae_cfg(arch, mean_pool):
        c = common_cfg(arch, "videomae")
        c.update({"attention_probs_dropout_prob": 0.0, "decoder_hidden_size": DD,
                  "decoder_intermediate_size": 2 * DD, "decoder_num_attention_heads": 2,
                  "decoder_num_hidden_layers": 1, "hidden_act": "gelu",
                  "hidden_dropout_prob": 0.0, "hidden_size": D, "image_size": 32,
                  "initializer_range": 0.02, "intermediate_size": MLP, "layer_norm_eps": 1e-12,
                  "norm_pix_loss": True, "num_attention_heads": HEADS, "num_channels": 3,
                  "num_frames": 4, "num_hidden_layers": LAYERS, "patch_size": 8,
                  "qkv_bias": True, "tubelet_size": 2, "use_mean_pooling": mean_pool})
        return c

    for name, seed, cls in (("videomae", 104, True), ("videomae_pt", 105, False)):
        g = Gen(seed)
        g.conv("videomae.embeddings.patch_embeddings.projection", (D, 3, 2, 8, 8))
        for i in range(LAYERS):
            videomae_layer(g, f"videomae.encoder.layer.{i}.")
        if cls:
            g.ln("fc_norm", D)
            g.lin("classifier", 5, D)
            c = vmae_cfg("VideoMAEForVideoClassification", True)
            c["id2label"], c["label2id"] = labels(5)
        else:
            g.ln("videomae.layernorm", D)
            g.lin("encoder_to_decoder", DD, D, bias=False)
            g.vec("mask_token", (1, 1, DD), 0.5)
            videomae_layer(g, "decoder.decoder_layers.0.", DD, 2 * DD)
            g.ln("decoder.norm", DD)
            g.lin("decoder.head", 3 * 2 * 8 * 8, DD)
            c = vmae_cfg("VideoMAEForPreTraining", False)
        out[name] = (g.t, None, c, vpp)

    # AST
    g = Gen(106)
    p = "audio_spectrogram_transformer."
    Fd, Td = 12, 101
    g.vec(p + "embeddings.cls_token", (1, 1, D), 0.5)
    g.vec(p + "embeddings.distillation_token", (1, 1, D), 0.5)
    g.vec(p + "embeddings.position_embeddings", (1, 2 + Fd * Td, D), 0.5)
    g.conv(p + "embeddings.patch_embeddings.projection", (D, 1, 16, 16))
    for i in range(LAYERS):
        vit_layer(g, f"{p}encoder.layer.{i}.")
    g.ln(p + "layernorm", D)
    g.ln("classifier.layernorm", D)
    g.lin("classifier.dense", 7, D)
    c = common_cfg("ASTForAudioClassification", "audio-spectrogram-transformer")
    c.update({"attention_probs_dropout_prob": 0.0, "frequency_stride": 10, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.0, "hidden_size": D, "initializer_range": 0.02,
              "intermediate_size": MLP, "layer_norm_eps": 1e-12, "max_length": 1024,
              "num_attention_heads": HEADS, "num_hidden_layers": LAYERS, "num_mel_bins": 128,
              "patch_size": 16, "qkv_bias": True, "time_stride": 10,
              "problem_type": "multi_label_classification"})
    c["id2label"] = {str(i): v for i, v in enumerate(AST_LABELS)}
    c["label2id"] = {v: i for i, v in enumerate(AST_LABELS)}
    pp = {"do_normalize": True, "feature_extractor_type": "ASTFeatureExtractor",
          "feature_size": 1, "max_length": 1024, "mean": -4.2677393, "num_mel_bins": 128,
          "padding_side": "right", "padding_value": 0.0, "return_attention_mask": False,
          "sampling_rate": 16000, "std": 4.5689974}
    out["ast"] = (g.t, None, c, pp)

    # CLIP
    PJ, DT = 32, 32
    vis = {"attention_dropout": 0.0, "dropout": 0.0, "hidden_act": "quick_gelu",
           "hidden_size": D, "image_size": 32, "initializer_factor": 1.0,
           "initializer_range": 0.02, "intermediate_size": MLP, "layer_norm_eps": 1e-5,
           "model_type": "clip_vision_model", "num_attention_heads": HEADS, "num_channels": 3,
           "num_hidden_layers": LAYERS, "patch_size": 8, "projection_dim": PJ}

    def clip_vision(g, ids):
        G = 4
        q = "vision_model."
        g.vec(q + "embeddings.class_embedding", (D,), 0.5)
        g.conv(q + "embeddings.patch_embedding", (D, 3, 8, 8), bias=False)
        g.vec(q + "embeddings.position_embedding.weight", (1 + G * G, D), 0.5)
        if ids:
            g.put(q + "embeddings.position_ids", np.arange(1 + G * G, dtype=np.int64)[None])
        g.ln(q + "pre_layrnorm", D)
        for i in range(LAYERS):
            clip_layer(g, f"{q}encoder.layers.{i}.", D, MLP)
        g.ln(q + "post_layernorm", D)

    g = Gen(107)
    clip_vision(g, True)
    g.lin("visual_projection", PJ, D, bias=False)
    g.vec("text_model.embeddings.token_embedding.weight", (99, DT), 0.5)
    g.vec("text_model.embeddings.position_embedding.weight", (16, DT), 0.5)
    g.put("text_model.embeddings.position_ids", np.arange(16, dtype=np.int64)[None])
    clip_layer(g, "text_model.encoder.layers.0.", DT, 2 * DT)
    g.ln("text_model.final_layer_norm", DT)
    g.lin("text_projection", PJ, DT, bias=False)
    g.put("logit_scale", np.array(2.6592, dtype=np.float32))
    c = common_cfg("CLIPModel", "clip")
    c.update({"initializer_factor": 1.0, "logit_scale_init_value": 2.6592,
              "projection_dim": PJ, "vision_config": vis,
              "text_config": {"attention_dropout": 0.0, "bos_token_id": 97, "dropout": 0.0,
                              "eos_token_id": 98, "hidden_act": "quick_gelu",
                              "hidden_size": DT, "initializer_factor": 1.0,
                              "initializer_range": 0.02, "intermediate_size": 2 * DT,
                              "layer_norm_eps": 1e-5, "max_position_embeddings": 16,
                              "model_type": "clip_text_model", "num_attention_heads": 2,
                              "num_hidden_layers": 1, "pad_token_id": 1,
                              "projection_dim": PJ, "vocab_size": 99}})
    pp = {"crop_size": {"height": 32, "width": 32}, "do_center_crop": True,
          "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
          "image_mean": CLIP_MEAN, "image_processor_type": "CLIPImageProcessor",
          "image_std": CLIP_STD, "resample": 3, "rescale_factor": RESCALE,
          "size": {"shortest_edge": 32}}
    out["clip"] = (g.t, None, c, pp)

    g = Gen(108)
    clip_vision(g, False)
    c = common_cfg("CLIPVisionModel", "clip_vision_model")
    c.update({k: v for k, v in vis.items() if k != "model_type"})
    pp = {"crop_size": 32, "do_center_crop": True, "do_normalize": True, "do_resize": True,
          "feature_extractor_type": "CLIPFeatureExtractor", "image_mean": CLIP_MEAN,
          "image_std": CLIP_STD, "resample": 3, "size": 32}
    out["clip_vision"] = (g.t, None, c, pp)

    # hostile variants of vit/
    vcfg = vit_cfg("ViTModel", "gelu")
    out["bad_noconfig"] = (vit, None, None, VIT_PP)
    c = common_cfg("LlamaForCausalLM", "llama")
    c.update({"hidden_size": D, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
              "intermediate_size": MLP, "vocab_size": 99, "rms_norm_eps": 1e-6})
    out["bad_type"] = (vit, None, c, VIT_PP)
    c = dict(vcfg)
    c["hidden_size"] = 96
    out["bad_shape"] = (vit, None, c, VIT_PP)
    out["bad_missing"] = ({k: v for k, v in vit.items()
                           if k != "encoder.layer.1.attention.attention.key.weight"},
                          None, vcfg, VIT_PP)
    t = dict(vit)
    t["foo.bar"] = np.array([0.25, -1.5, 3.0, 0.125], dtype=np.float32)
    out["vit_extra"] = (t, None, vcfg, VIT_PP)
    # a classifier whose id2label lacks class 2 (it names 0, 1, 3, 4, 5)
    t, _, c, _ = out["vit_cls"]
    c = dict(c)
    c["id2label"] = {k: v for k, v in labels(6)[0].items() if k != "2"}
    out["bad_labels"] = (t, None, c, VIT_PP)
    for name, dt, tdt in (("vit_f16", "F16", "float16"), ("vit_bf16", "BF16", "bfloat16")):
        c = dict(vcfg)
        c["torch_dtype"] = tdt
        out[name] = (vit, {k: dt for k in vit}, c, VIT_PP)
    return out


def make(outdir):
    for folder, (tensors, dtypes, cfg, pp) in make_all().items():
        d = os.path.join(outdir, folder)
        os.makedirs(d, exist_ok=True)
        lst = []
        for name, arr in tensors.items():
            if arr.dtype == np.int64:
                dt = "I64"
            else:
                dt = (dtypes or {}).get(name, "F32")
            lst.append((name, arr, dt))
        write_st(os.path.join(d, "model.safetensors"), lst, {"format": "pt"})
        if cfg is not None:
            write_json(os.path.join(d, "config.json"), cfg)
        if pp is not None:
            write_json(os.path.join(d, "preprocessor_config.json"), pp)


def make_base(outdir):
    """Random checkpoints of the published base sizes (D 768, 12 layers, 12 heads,
    MLP 3072): videomae-base/ (as MCG-NJU/videomae-base-finetuned-kinetics: patch
    16, tubelet 2, 224 px, mean pooling through fc_norm), ast-base/ (as
    MIT/ast-finetuned-audioset-10-10-0.4593: 12 x 101 grid) and
    clip-vit-base-patch16/ (CLIP's ViT-B/16 vision tower with its projection), for
    `ringvit bench encoder --model DIR` and scripts/bench-frames.sh. Weights are
    noise: for timing only."""
    Db, Lb, Hb, Mb = 768, 12, 12, 3072
    folders = {}
    g = Gen(201)
    g.conv("videomae.embeddings.patch_embeddings.projection", (Db, 3, 2, 16, 16))
    for i in range(Lb):
        videomae_layer(g, f"videomae.encoder.layer.{i}.", Db, Mb)
    g.ln("fc_norm", Db)
    g.lin("classifier", 400, Db)
    c = common_cfg("VideoMAEForVideoClassification", "videomae")
    c.update({"hidden_act": "gelu", "hidden_size": Db, "image_size": 224,
              "intermediate_size": Mb, "layer_norm_eps": 1e-12, "num_attention_heads": Hb,
              "num_channels": 3, "num_frames": 16, "num_hidden_layers": Lb, "patch_size": 16,
              "qkv_bias": True, "tubelet_size": 2, "use_mean_pooling": True})
    pp = {"crop_size": {"height": 224, "width": 224}, "do_center_crop": True,
          "do_normalize": True, "do_rescale": True, "do_resize": True,
          "image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD, "resample": 2,
          "rescale_factor": RESCALE, "size": {"shortest_edge": 224}}
    folders["videomae-base"] = (g.t, c, pp)
    g = Gen(202)
    p = "audio_spectrogram_transformer."
    g.vec(p + "embeddings.cls_token", (1, 1, Db), 0.5)
    g.vec(p + "embeddings.distillation_token", (1, 1, Db), 0.5)
    g.vec(p + "embeddings.position_embeddings", (1, 2 + 12 * 101, Db), 0.5)
    g.conv(p + "embeddings.patch_embeddings.projection", (Db, 1, 16, 16))
    for i in range(Lb):
        vit_layer(g, f"{p}encoder.layer.{i}.", Db, Mb)
    g.ln(p + "layernorm", Db)
    c = common_cfg("ASTModel", "audio-spectrogram-transformer")
    c.update({"frequency_stride": 10, "hidden_act": "gelu", "hidden_size": Db,
              "intermediate_size": Mb, "layer_norm_eps": 1e-12, "max_length": 1024,
              "num_attention_heads": Hb, "num_hidden_layers": Lb, "num_mel_bins": 128,
              "patch_size": 16, "qkv_bias": True, "time_stride": 10})
    pp = {"feature_extractor_type": "ASTFeatureExtractor", "max_length": 1024,
          "mean": -4.2677393, "num_mel_bins": 128, "sampling_rate": 16000, "std": 4.5689974}
    folders["ast-base"] = (g.t, c, pp)
    # clip-vit-base-patch16/ (as openai/clip-vit-base-patch16, the vision tower with
    # its visual_projection (512, 768): CLIPVisionModelWithProjection's layout).
    g = Gen(203)
    q = "vision_model."
    g.vec(q + "embeddings.class_embedding", (Db,), 0.5)
    g.conv(q + "embeddings.patch_embedding", (Db, 3, 16, 16), bias=False)
    g.vec(q + "embeddings.position_embedding.weight", (1 + 14 * 14, Db), 0.5)
    g.ln(q + "pre_layrnorm", Db)
    for i in range(Lb):
        clip_layer(g, f"{q}encoder.layers.{i}.", Db, Mb)
    g.ln(q + "post_layernorm", Db)
    g.lin("visual_projection", 512, Db, bias=False)
    c = common_cfg("CLIPVisionModelWithProjection", "clip_vision_model")
    c.update({"attention_dropout": 0.0, "dropout": 0.0, "hidden_act": "quick_gelu",
              "hidden_size": Db, "image_size": 224, "initializer_factor": 1.0,
              "initializer_range": 0.02, "intermediate_size": Mb, "layer_norm_eps": 1e-5,
              "num_attention_heads": Hb, "num_channels": 3, "num_hidden_layers": Lb,
              "patch_size": 16, "projection_dim": 512})
    pp = {"crop_size": {"height": 224, "width": 224}, "do_center_crop": True,
          "do_normalize": True, "do_rescale": True, "do_resize": True,
          "image_mean": CLIP_MEAN, "image_std": CLIP_STD, "resample": 3,
          "rescale_factor": RESCALE, "size": {"shortest_edge": 224}}
    folders["clip-vit-base-patch16"] = (g.t, c, pp)
    for folder, (tensors, cfg, pp) in folders.items():
        d = os.path.join(outdir, folder)
        os.makedirs(d, exist_ok=True)
        write_st(os.path.join(d, "model.safetensors"),
                 [(k, v, "F32") for k, v in tensors.items()], {"format": "pt"})
        write_json(os.path.join(d, "config.json"), cfg)
        write_json(os.path.join(d, "preprocessor_config.json"), pp)


# ---------------------------------------------------------------- reference


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


ACTS = {"gelu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
        "gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh, "gelu_fast": gelu_tanh,
        "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
        "relu": torch.relu, "tanh": torch.tanh}


class Model:
    """A hub folder, read by hand. family: vit | dinov2 | videomae | ast | clip."""

    DEFAULT_EPS = {"vit": 1e-12, "dinov2": 1e-12, "videomae": 1e-12, "ast": 1e-12,
                   "clip": 1e-5}
    DEFAULT_ACT = {"vit": "gelu", "dinov2": "gelu", "videomae": "gelu", "ast": "gelu",
                   "clip": "quick_gelu"}

    def __init__(self, folder):
        cpath = os.path.join(folder, "config.json")
        wpath = os.path.join(folder, "model.safetensors")
        if not os.path.isfile(cpath):
            raise Fail(f"{folder}: no config.json")
        if not os.path.isfile(wpath):
            raise Fail(f"{folder}: no model.safetensors")
        with open(cpath) as f:
            cfg = json.load(f)
        ppath = os.path.join(folder, "preprocessor_config.json")
        self.pp = {}
        if os.path.isfile(ppath):
            with open(ppath) as f:
                self.pp = json.load(f)
        self.raw, _ = read_st(wpath)
        mt = cfg.get("model_type")
        fam = {"vit": "vit", "dinov2": "dinov2", "videomae": "videomae",
               "audio-spectrogram-transformer": "ast", "clip": "clip",
               "clip_vision_model": "clip"}.get(mt)
        if fam is None:
            raise Fail(f"{folder}: model_type {mt!r} is not one this reference knows")
        self.full_cfg = cfg
        if mt == "clip":
            cfg = cfg.get("vision_config") or {}
        self.family, self.cfg = fam, cfg
        self.dim = int(cfg.get("hidden_size", 768))
        self.heads = int(cfg.get("num_attention_heads", 12))
        self.layers = int(cfg.get("num_hidden_layers", 12))
        self.eps = float(cfg.get("layer_norm_eps", self.DEFAULT_EPS[fam]))
        act = cfg.get("hidden_act", self.DEFAULT_ACT[fam])
        if act not in ACTS:
            raise Fail(f"{folder}: hidden_act {act!r} not handled")
        self.act = ACTS[act]
        self.patch = int(cfg.get("patch_size", 16))
        key = {"vit": "embeddings.cls_token", "dinov2": "embeddings.cls_token",
               "videomae": "embeddings.patch_embeddings.projection.weight",
               "ast": "embeddings.cls_token",
               "clip": "vision_model.embeddings.class_embedding"}[fam]
        cands = {"vit": ["", "vit."], "dinov2": ["", "dinov2."], "videomae": ["videomae.", ""],
                 "ast": ["audio_spectrogram_transformer.", ""], "clip": [""]}[fam]
        self.prefix = next((p for p in cands if p + key in self.raw), None)
        if self.prefix is None:
            raise Fail(f"{folder}: no tensor {cands[0] + key}")
        self._cache = {}

    def has(self, name):
        return name in self.raw

    def w(self, name, shape=None):
        """float64 torch tensor of a stored weight (F16/BF16 already rounded)."""
        if name not in self.raw:
            raise Fail(f"model has no tensor {name}")
        if name not in self._cache:
            a = self.raw[name][1]
            if shape is not None and tuple(a.shape) != tuple(shape):
                raise Fail(f"tensor {name} has shape {list(a.shape)}, config says {list(shape)}")
            self._cache[name] = torch.from_numpy(a.astype(np.float64))
        return self._cache[name]


def classify(m, name, x):
    """name.weight @ x + name.bias (a task model's nn.Linear head), or None when
    the folder has no such head."""
    if not m.has(name + ".weight"):
        return None
    w = m.w(name + ".weight")
    if w.dim() != 2 or w.shape[1] != x.shape[0]:
        raise Fail(f"{name}.weight has shape {list(w.shape)}, its input {x.shape[0]}")
    return w @ x + m.w(name + ".bias", (w.shape[0],))


def ref_labels(m, n):
    """config.json's id2label in id order (LABEL_i where absent), and whether the
    classes are independent (problem_type multi_label_classification)."""
    ids = m.full_cfg.get("id2label") or {str(i): f"LABEL_{i}" for i in range(n)}
    if sorted(int(k) for k in ids) != list(range(n)):
        raise Fail(f"id2label names {sorted(ids)}, the classifier has {n} rows")
    return ([ids[str(i)] for i in range(n)],
            m.full_cfg.get("problem_type") == "multi_label_classification")


def lnorm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def attention(q, k, v, heads):
    """softmax(q k^T * hd^-0.5) v per head; q, k, v (S, D) -> (S, D)."""
    s, d = q.shape
    hd = d // heads
    out = []
    for h in range(heads):
        sl = slice(h * hd, (h + 1) * hd)
        a = (q[:, sl].contiguous() * hd ** -0.5) @ k[:, sl].contiguous().T
        a -= a.max(dim=1, keepdim=True).values
        a.exp_()
        a /= a.sum(dim=1, keepdim=True)
        out.append(a @ v[:, sl].contiguous())
    return torch.cat(out, dim=1)


def layer_names(m, i):
    """Per-family tensor names of layer i: (ln1, q, k, v, o, ls1, ln2, fc1, fc2, ls2)."""
    if m.family == "clip":
        p = f"vision_model.encoder.layers.{i}."
        return dict(ln1=p + "layer_norm1", q=p + "self_attn.q_proj", k=p + "self_attn.k_proj",
                    v=p + "self_attn.v_proj", o=p + "self_attn.out_proj", ln2=p + "layer_norm2",
                    fc1=p + "mlp.fc1", fc2=p + "mlp.fc2")
    p = f"{m.prefix}encoder.layer.{i}."
    n = dict(q=p + "attention.attention.query", k=p + "attention.attention.key",
             v=p + "attention.attention.value", o=p + "attention.output.dense")
    if m.family == "dinov2":
        n.update(ln1=p + "norm1", ln2=p + "norm2", fc1=p + "mlp.fc1", fc2=p + "mlp.fc2",
                 ls1=p + "layer_scale1.lambda1", ls2=p + "layer_scale2.lambda1")
    else:
        n.update(ln1=p + "layernorm_before", ln2=p + "layernorm_after",
                 fc1=p + "intermediate.dense", fc2=p + "output.dense")
    if m.family == "videomae":
        n.update(qb=p + "attention.attention.q_bias", vb=p + "attention.attention.v_bias")
    return n


def encoder(m, x):
    d = m.dim
    for i in range(m.layers):
        n = layer_names(m, i)
        W = lambda k, shape: m.w(n[k] + ".weight", shape)
        B = lambda k, shape: m.w(n[k] + ".bias", shape)
        h = lnorm(x, W("ln1", (d,)), B("ln1", (d,)), m.eps)
        if m.family == "videomae":
            qb = m.w(n["qb"], (d,)) if m.has(n["qb"]) else torch.zeros(d, dtype=x.dtype)
            vb = m.w(n["vb"], (d,)) if m.has(n["vb"]) else torch.zeros(d, dtype=x.dtype)
            bias = {"q": qb, "k": torch.zeros(d, dtype=x.dtype), "v": vb}
        else:
            bias = {k: B(k, (d,)) if m.has(n[k] + ".bias") else torch.zeros(d, dtype=x.dtype)
                    for k in ("q", "k", "v")}
        q, k, v = (h @ W(t, (d, d)).T + bias[t] for t in ("q", "k", "v"))
        a = attention(q, k, v, m.heads) @ W("o", (d, d)).T + B("o", (d,))
        if "ls1" in n:
            a = a * m.w(n["ls1"], (d,))
        x = x + a
        h = lnorm(x, W("ln2", (d,)), B("ln2", (d,)), m.eps)
        f1 = m.w(n["fc1"] + ".weight")
        if f1.shape[1] != d:
            raise Fail(f"tensor {n['fc1']}.weight has shape {list(f1.shape)}, hidden_size {d}")
        h = m.act(h @ f1.T + B("fc1", (f1.shape[0],)))
        h = h @ W("fc2", (d, f1.shape[0])).T + B("fc2", (d,))
        if "ls2" in n:
            h = h * m.w(n["ls2"], (d,))
        x = x + h
    return x


def pixels(frames, pp):
    """(N,H,W,3) u8 -> (N,3,H,W) float64 normalised."""
    if "image_mean" not in pp or "image_std" not in pp:
        raise Fail("preprocessor_config.json has no image_mean / image_std")
    mean = torch.tensor(pp["image_mean"], dtype=torch.float64).view(1, 3, 1, 1)
    std = torch.tensor(pp["image_std"], dtype=torch.float64).view(1, 3, 1, 1)
    x = torch.from_numpy(frames.astype(np.float64)).permute(0, 3, 1, 2)
    return (x / 255.0 - mean) / std


def tubelets(n, t):
    """frame indices of each tubelet, the trailing partial one repeating the last."""
    return [[min(g * t + j, n - 1) for j in range(t)] for g in range((n + t - 1) // t)]


def sinusoid(n, d):
    pos = np.arange(n, dtype=np.float64)[:, None]
    j = np.arange(d)
    ang = pos / np.power(10000, 2 * (j // 2) / d)[None, :]
    tab = np.where(j % 2 == 0, np.sin(ang), np.cos(ang))
    return torch.from_numpy(tab.astype(np.float32).astype(np.float64))


def resample_grid(table, g, gh, gw, d, in_float32):
    """table (g*g, D) -> (gh*gw, D) by bicubic interpolation (transformers)."""
    grid = table.reshape(1, g, g, d).permute(0, 3, 1, 2)
    dt = grid.dtype
    if in_float32:
        grid = grid.to(torch.float32)
    grid = F.interpolate(grid, size=(gh, gw), mode="bicubic", align_corners=False).to(dt)
    return grid.permute(0, 2, 3, 1).reshape(gh * gw, d)


def forward_video(m, frames, tubelet):
    """-> dict(tokens (S,D), modality (S,), pos (S,3), pooled, projected|None)."""
    if frames.ndim != 4 or frames.shape[3] != 3 or frames.dtype != np.uint8:
        raise Fail(f"frames must be (N,H,W,3) U8, got {frames.dtype}{list(frames.shape)}")
    if m.family == "ast":
        raise Fail("an AST model takes KIND audio")
    n, h, w_, _ = frames.shape
    P, d, pf = m.patch, m.dim, m.prefix
    gh, gw = h // P, w_ // P
    if n == 0 or gh == 0 or gw == 0:
        raise Fail(f"no patches in {n} frames of {h}x{w_} with patch {P}")
    x = pixels(frames, m.pp)
    if m.family == "videomae":
        T = int(m.cfg.get("tubelet_size", 2))
        if tubelet not in (None, T):
            raise Fail(f"ringvit used tubelet {tubelet}, the VideoMAE checkpoint has {T}")
        wt = m.w(pf + "embeddings.patch_embeddings.projection.weight", (d, 3, T, P, P))
        bt = m.w(pf + "embeddings.patch_embeddings.projection.bias", (d,))
        groups = tubelets(n, T)
        # Conv3d over (3, frames, H, W), kernel = stride = (T, P, P)
        vol = x[[i for g in groups for i in g]].permute(1, 0, 2, 3)[None]  # (1,3,ng*T,H,W)
        y = F.conv3d(vol, wt, bt, stride=(T, P, P))[0]            # (D, ng, gh, gw)
        ng = y.shape[1]
        tok = y.reshape(d, ng * gh * gw).T
        tok = tok + sinusoid(ng * gh * gw, d)
        pos = np.array([(g, r, c) for g in range(ng) for r in range(gh) for c in range(gw)],
                       dtype=np.int64)
        out = encoder(m, tok)
        if m.has(pf + "layernorm.weight"):
            out = lnorm(out, m.w(pf + "layernorm.weight", (d,)), m.w(pf + "layernorm.bias", (d,)),
                        m.eps)
            pooled = out.mean(0)
        else:
            pooled = out.mean(0)
            if m.has("fc_norm.weight"):
                pooled = lnorm(pooled, m.w("fc_norm.weight", (d,)), m.w("fc_norm.bias", (d,)), 1e-5)
        # VideoMAEForVideoClassification: classifier(fc_norm(mean)); without
        # fc_norm it reads token 0, which ringvit does not load (no logits)
        logits = classify(m, "classifier", pooled) if m.has("fc_norm.weight") else None
        return dict(tokens=out, modality=np.zeros(len(pos), np.uint8), pos=pos,
                    pooled=pooled, projected=None, logits=logits)

    T = 1 if tubelet is None else int(tubelet)
    if T < 1:
        raise Fail(f"tubelet {T}")
    if m.family == "clip":
        q = "vision_model.embeddings."
        wt = m.w(q + "patch_embedding.weight", (d, 3, P, P))
        bt = None
        cls = m.w(q + "class_embedding", (d,))
        table = m.w(q + "position_embedding.weight")
    else:
        q = pf + "embeddings."
        wt = m.w(q + "patch_embeddings.projection.weight", (d, 3, P, P))
        bt = m.w(q + "patch_embeddings.projection.bias", (d,))
        cls = m.w(q + "cls_token", (1, 1, d)).reshape(d)
        table = m.w(q + "position_embeddings")
        if table.dim() != 3 or table.shape[0] != 1:
            raise Fail(f"position table has shape {list(table.shape)}")
        table = table[0]
    if table.dim() != 2 or table.shape[1] != d:
        raise Fail(f"position table has shape {list(table.shape)}, hidden_size {d}")
    g = int(round(math.sqrt(table.shape[0] - 1)))
    if g * g != table.shape[0] - 1:
        raise Fail(f"position table of {table.shape[0]} rows is not 1 + G*G")
    patch_pos = table[1:]
    if not (g * g == gh * gw and h == w_):
        patch_pos = resample_grid(patch_pos, g, gh, gw, d, m.family == "dinov2")
    per_frame = F.conv2d(x, wt / T, None, stride=P)               # (N, D, gh, gw)
    groups = tubelets(n, T)
    tok = torch.stack([sum(per_frame[i] for i in grp) for grp in groups])  # (ng, D, gh, gw)
    if bt is not None:
        tok = tok + bt.view(1, d, 1, 1)
    ng = tok.shape[0]
    tok = tok.permute(0, 2, 3, 1).reshape(ng, gh * gw, d) + patch_pos[None]
    seq = torch.cat([(cls + table[0])[None], tok.reshape(ng * gh * gw, d)])
    pos = np.array([(0, 0, 0)] + [(g_, r, c) for g_ in range(ng) for r in range(gh)
                                  for c in range(gw)], dtype=np.int64)
    mod = np.zeros(len(pos), np.uint8)
    mod[0] = 2
    projected = None
    if m.family == "clip":
        v = "vision_model."
        seq = lnorm(seq, m.w(v + "pre_layrnorm.weight", (d,)), m.w(v + "pre_layrnorm.bias", (d,)),
                     m.eps)
        out = encoder(m, seq)
        pooled = lnorm(out[0], m.w(v + "post_layernorm.weight", (d,)),
                       m.w(v + "post_layernorm.bias", (d,)), m.eps)
        if m.has("visual_projection.weight"):
            pw = m.w("visual_projection.weight")
            if pw.dim() != 2 or pw.shape[1] != d:
                raise Fail(f"visual_projection.weight has shape {list(pw.shape)}")
            projected = pw @ pooled
    else:
        out = encoder(m, seq)
        out = lnorm(out, m.w(pf + "layernorm.weight", (d,)), m.w(pf + "layernorm.bias", (d,)),
                    m.eps)
        if m.family == "vit" and m.has("pooler.dense.weight"):
            pw = m.w("pooler.dense.weight")
            if pw.dim() != 2 or pw.shape[1] != d:
                raise Fail(f"pooler.dense.weight has shape {list(pw.shape)}")
            pact = m.cfg.get("pooler_act", "tanh")
            if pact not in ACTS:
                raise Fail(f"pooler_act {pact!r} not handled")
            pooled = ACTS[pact](pw @ out[0] + m.w("pooler.dense.bias", (pw.shape[0],)))
        else:
            pooled = out[0]
    logits = None
    if m.family == "vit":     # ViTForImageClassification: the final-normed CLS
        logits = classify(m, "classifier", out[0])
    elif m.family == "dinov2":  # Dinov2ForImageClassification: [CLS, mean of patches]
        logits = classify(m, "classifier", torch.cat([out[0], out[1:].mean(0)]))
    return dict(tokens=out, modality=mod, pos=pos, pooled=pooled, projected=projected,
                logits=logits)


def forward_audio(m, fbank):
    if m.family != "ast":
        raise Fail(f"a {m.family} model takes KIND video")
    if fbank.ndim != 2:
        raise Fail(f"audio_fbank must be (frames, bins), got {list(fbank.shape)}")
    d, pf, c = m.dim, m.prefix, m.cfg
    bins = int(c.get("num_mel_bins", 128))
    P, fs, ts = m.patch, int(c.get("frequency_stride", 10)), int(c.get("time_stride", 10))
    if fbank.shape[1] != bins:
        raise Fail(f"audio_fbank has {fbank.shape[1]} bins, the model {bins}")
    nf = fbank.shape[0]
    if nf < P:
        raise Fail(f"{nf} fbank frames: fewer than one patch ({P})")
    x = torch.from_numpy(fbank.astype(np.float64))
    if m.pp.get("do_normalize", True):
        mean = float(m.pp.get("mean", -4.2677393))
        std = float(m.pp.get("std", 4.5689974))
        x = (x - mean) / (2.0 * std)
    q = pf + "embeddings."
    wt = m.w(q + "patch_embeddings.projection.weight", (d, 1, P, P))
    bt = m.w(q + "patch_embeddings.projection.bias", (d,))
    y = F.conv2d(x.T[None, None], wt, bt, stride=(fs, ts))[0]     # (D, Fd, steps)
    Fd, steps = y.shape[1], y.shape[2]
    Td = (int(c.get("max_length", 1024)) - P) // ts + 1
    table = m.w(q + "position_embeddings", (1, 2 + Fd * Td, d))[0]
    grid = table[2:].reshape(Fd, Td, d).permute(2, 0, 1)          # (D, Fd, Td)
    if steps <= Td:
        grid = grid[:, :, :steps]
    else:
        grid = F.interpolate(grid[None], size=(Fd, steps), mode="bilinear",
                             align_corners=False)[0]
    tok = (y + grid).reshape(d, Fd * steps).T                     # band-major
    cls = m.w(q + "cls_token", (1, 1, d)).reshape(d) + table[0]
    dist = m.w(q + "distillation_token", (1, 1, d)).reshape(d) + table[1]
    seq = torch.cat([cls[None], dist[None], tok])
    out = encoder(m, seq)
    out = lnorm(out, m.w(pf + "layernorm.weight", (d,)), m.w(pf + "layernorm.bias", (d,)), m.eps)
    pos = np.array([(0, 0, 0), (1, 0, 0)] + [(p, f, 0) for f in range(Fd) for p in range(steps)],
                   dtype=np.int64)
    mod = np.ones(len(pos), np.uint8)
    mod[:2] = 2
    pooled = (out[0] + out[1]) / 2
    logits = None
    if m.has("classifier.layernorm.weight"):  # ASTMLPHead: layernorm, then dense
        x = lnorm(pooled, m.w("classifier.layernorm.weight", (d,)),
                  m.w("classifier.layernorm.bias", (d,)), m.eps)
        logits = classify(m, "classifier.dense", x)
    return dict(tokens=out, modality=mod, pos=pos, pooled=pooled, projected=None,
                logits=logits)


# ---------------------------------------------------------------- check


def read_wav(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        raise Fail(f"{path}: not a RIFF WAVE file")
    off, fmt, data = 12, None, None
    while off + 8 <= len(raw):
        cid, size = raw[off:off + 4], struct.unpack("<I", raw[off + 4:off + 8])[0]
        body = raw[off + 8:off + 8 + size]
        if cid == b"fmt ":
            fmt = struct.unpack("<HHIIHH", body[:16])
        elif cid == b"data":
            data = body
        off += 8 + size + (size & 1)
    if fmt is None or data is None:
        raise Fail(f"{path}: no fmt or data chunk")
    tag, ch, rate, _, _, bits = fmt
    if tag != 1 or ch != 1 or rate != 16000 or bits != 16:
        raise Fail(f"{path}: want 16 kHz mono 16-bit PCM, got format {tag}, {ch} channels, "
                   f"{rate} Hz, {bits} bits")
    return np.frombuffer(data[:len(data) // 2 * 2], dtype="<i2").astype(np.float64) / 32768.0


def kaldi_fbank64(wave):
    import torchaudio.compliance.kaldi as kaldi
    if wave.shape[0] < 400:
        return np.zeros((0, 128))
    w = torch.from_numpy(wave).unsqueeze(0)
    return kaldi.fbank(w, htk_compat=True, window_type="hanning", num_mel_bins=128, dither=0.0,
                       frame_shift=10, use_energy=False, sample_frequency=16000).numpy()


_REF_CACHE = {}


def reference(modeldir, kind, inputs, tubelet):
    """-> (Model, forward result); remembered per files' identity within a
    process (the selftest checks one output many times)."""
    files = [os.path.join(modeldir, f) for f in
             ("config.json", "model.safetensors", "preprocessor_config.json")] + [inputs]
    key = (kind, tubelet) + tuple(
        (os.path.abspath(f),) + ((os.stat(f).st_mtime_ns, os.stat(f).st_size)
                                 if os.path.exists(f) else ()) for f in files)
    if key not in _REF_CACHE:
        _REF_CACHE[key] = _reference(modeldir, kind, inputs, tubelet)
    return _REF_CACHE[key]


def _reference(modeldir, kind, inputs, tubelet):
    m = Model(modeldir)
    t, _ = read_st(inputs)
    if kind == "video":
        if "frames" not in t:
            raise Fail(f"{inputs}: no tensor frames")
        ref = forward_video(m, t["frames"][1], tubelet)
    else:
        if "audio_fbank" not in t:
            raise Fail(f"{inputs}: no tensor audio_fbank")
        ref = forward_audio(m, t["audio_fbank"][1])
    if ref["logits"] is not None:
        ref["labels"], ref["multi_label"] = ref_labels(m, ref["logits"].shape[0])
    return m, ref


def rel(a, ref):
    return float(np.abs(a - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def run_check(modeldir, kind, out_path, inputs, tol=1e-4, wav=None):
    """-> (exit code, one line)."""
    name = os.path.basename(os.path.normpath(modeldir))
    try:
        fb_err = None
        if wav is not None:
            if kind != "audio":
                raise Fail("--wav goes with KIND audio")
            t, _ = read_st(inputs)
            if "audio_fbank" not in t:
                raise Fail(f"{inputs}: no tensor audio_fbank")
            fb = t["audio_fbank"][1].astype(np.float64)
            ref_fb = kaldi_fbank64(read_wav(wav))
            if fb.shape != ref_fb.shape:
                raise Fail(f"audio_fbank has shape {list(fb.shape)}, torchaudio gives "
                           f"{list(ref_fb.shape)} for {wav}")
            fb_err = float(np.abs(fb - ref_fb).max()) if fb.size else 0.0
            if not fb_err <= 1e-3:
                raise Fail(f"audio_fbank differs from torchaudio's by {fb_err:.3g} (> 1e-3)")
        o, meta = read_st(out_path)
        for k in ("tokens", "token_modality", "token_pos", "pooled"):
            if k not in o:
                raise Fail(f"{out_path}: no tensor {k}")
        tubelet = None
        if "config" in meta:
            try:
                tubelet = json.loads(meta["config"]).get("tubelet")
            except (ValueError, AttributeError):
                raise Fail(f"{out_path}: metadata config is not a JSON object")
        m, ref = reference(modeldir, kind, inputs, tubelet)
        toks = o["tokens"][1].astype(np.float64)
        mods, poss = o["token_modality"][1], o["token_pos"][1]
        rt = ref["tokens"].numpy()
        s = rt.shape[0]
        if toks.ndim != 2 or toks.shape[1] != rt.shape[1]:
            raise Fail(f"tokens has shape {list(toks.shape)}, the reference ({s}, {rt.shape[1]})")
        if mods.shape != (toks.shape[0],) or poss.shape != (toks.shape[0], 3):
            raise Fail("token_modality / token_pos do not have one row per token")
        index = {(int(ref["modality"][i]),) + tuple(int(v) for v in ref["pos"][i]): i
                 for i in range(s)}
        seen = set()
        worst, where = 0.0, None
        for r in range(toks.shape[0]):
            key = (int(mods[r]),) + tuple(int(v) for v in poss[r])
            if key not in index:
                raise Fail(f"ringvit token {r} (modality {key[0]}, pos {key[1:]}) is not in "
                           f"the reference sequence")
            if key in seen:
                raise Fail(f"ringvit has token (modality {key[0]}, pos {key[1:]}) twice")
            seen.add(key)
            e = rel(toks[r], rt[index[key]])
            if not e <= worst:  # NaN counts as worst
                worst, where = e, key
        if len(seen) != s:
            missing = sorted(set(index) - seen)[:3]
            raise Fail(f"ringvit has {len(seen)} tokens, the reference {s} "
                       f"(missing e.g. {missing})")
        pooled = o["pooled"][1].astype(np.float64)
        rp = ref["pooled"].numpy()
        if pooled.shape != rp.shape:
            raise Fail(f"pooled has shape {list(pooled.shape)}, the reference {list(rp.shape)}")
        pe = rel(pooled, rp)
        je = None
        if ref["projected"] is not None:
            if "projected" not in o:
                raise Fail(f"{out_path}: no tensor projected (the model has visual_projection)")
            pj = o["projected"][1].astype(np.float64)
            rj = ref["projected"].numpy()
            if pj.shape != rj.shape:
                raise Fail(f"projected has shape {list(pj.shape)}, the reference {list(rj.shape)}")
            je = rel(pj, rj)
        elif "projected" in o:
            raise Fail(f"{out_path}: has projected, but the model has no visual_projection")
        le = None
        if ref["logits"] is not None:
            if "logits" not in o:
                raise Fail(f"{out_path}: no tensor logits (the model has a classifier)")
            lg = o["logits"][1]
            rl = ref["logits"].numpy()
            if o["logits"][0] != "F32" or lg.shape != rl.shape:
                raise Fail(f"logits is {o['logits'][0]} {list(lg.shape)}, the reference F32 "
                           f"{list(rl.shape)}")
            le = rel(lg.astype(np.float64), rl)
            want_labels, want_ml = ref_labels(m, rl.shape[0])
            try:
                got_labels = json.loads(meta.get("labels", "null"))
            except ValueError:
                raise Fail(f"{out_path}: metadata labels is not JSON")
            if got_labels != want_labels:
                raise Fail(f"metadata labels {str(got_labels)[:80]}, config.json's id2label "
                           f"{str(want_labels)[:80]}")
            if meta.get("multi_label") != ("true" if want_ml else "false"):
                raise Fail(f"metadata multi_label {meta.get('multi_label')!r}, the config's "
                           f"problem_type says {want_ml}")
        elif "logits" in o:
            raise Fail(f"{out_path}: has logits, but the reference model has no classifier")
        line = (f"{name} {kind}: {s} tokens, tokens max rel err {worst:.3g}"
                f" (modality {where[0]}, pos {where[1:]}), pooled {pe:.3g}"
                + (f", projected {je:.3g}" if je is not None else "")
                + (f", logits {le:.3g}" if le is not None else "")
                + (f", fbank max abs err {fb_err:.3g}" if fb_err is not None else ""))
        bad = [k for k, e in (("tokens", worst), ("pooled", pe), ("projected", je),
                              ("logits", le))
               if e is not None and not e <= tol]
        if bad:
            return 1, f"hub_models check FAILED (tol {tol:g}: {', '.join(bad)}): {line}"
        return 0, f"hub_models check ok (tol {tol:g}): {line}"
    except Fail as e:
        return 1, f"hub_models check FAILED: {name} {kind}: {e}"
    except OSError as e:
        return 1, f"hub_models check FAILED: {name} {kind}: {e}"


def write_output(path, ref, tubelet, perm=None):
    """Writes ref in the layout of ringvit's embed --tokens output (float32)."""
    s = ref["tokens"].shape[0]
    perm = np.arange(s) if perm is None else perm
    ts = [("tokens", ref["tokens"].numpy()[perm], "F32"),
          ("token_modality", ref["modality"][perm], "U8"),
          ("token_pos", ref["pos"][perm], "I64"),
          ("pooled", ref["pooled"].numpy(), "F32")]
    if ref["projected"] is not None:
        ts.append(("projected", ref["projected"].numpy(), "F32"))
    cfg = {"tubelet": tubelet} if tubelet is not None else {}
    meta = {"format": "ringvit-embed", "config": json.dumps(cfg), "tokens": str(s)}
    if ref["logits"] is not None:
        ts.append(("logits", ref["logits"].numpy(), "F32"))
        meta["labels"] = json.dumps(ref["labels"])
        meta["multi_label"] = "true" if ref["multi_label"] else "false"
    write_st(path, ts, meta)


# ---------------------------------------------------------------- selftest


def write_wav(path, samples):
    pcm = np.clip(np.rint(samples * 32767), -32768, 32767).astype("<i2").tobytes()
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVE")
        f.write(b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16))
        f.write(b"data" + struct.pack("<I", len(pcm)) + pcm)


def frames_input(rng, n, s):
    y, x = np.mgrid[0:s, 0:s] / (s - 1)
    f = []
    for k in range(n):
        img = np.stack([255 * x, 255 * y, 128 + 100 * np.sin(6 * x + k)], -1)
        img = img + rng.normal(0, 30, img.shape)
        f.append(np.clip(np.rint(img), 0, 255))
    return np.array(f, dtype=np.uint8)


def perturbed_model(src, dst, name, index, delta):
    shutil.copytree(src, dst)
    t, meta = read_st(os.path.join(src, "model.safetensors"))
    lst = []
    for k, (dt, a) in t.items():
        if k == name:
            a = a.astype(np.float64).copy()
            a[index] += delta * float(np.abs(a).max())
        lst.append((k, a, dt))
    write_st(os.path.join(dst, "model.safetensors"), lst, meta)


def selftest(work):
    torch.set_num_threads(1)
    hub = os.path.join(work, "hub")
    make(hub)
    make(os.path.join(work, "hub2"))
    ok = True
    for folder in sorted(os.listdir(hub)):
        for fn in sorted(os.listdir(os.path.join(hub, folder))):
            a = open(os.path.join(hub, folder, fn), "rb").read()
            b = open(os.path.join(work, "hub2", folder, fn), "rb").read()
            if a != b:
                print(f"selftest: {folder}/{fn} differs between two runs of make")
                ok = False
    print(f"make: {len(os.listdir(hub))} folders, identical bytes on a second run: {ok}")

    # The reference's attention and layer against torch's own modules.
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(D, HEADS, batch_first=True).double()
    xx = torch.randn(1, 9, D, dtype=torch.float64)
    want = mha(xx, xx, xx, need_weights=False)[0][0]
    wq, wk, wv = mha.in_proj_weight.detach().chunk(3)
    bq, bk, bv = mha.in_proj_bias.detach().chunk(3)
    got = attention(xx[0] @ wq.T + bq, xx[0] @ wk.T + bk, xx[0] @ wv.T + bv, HEADS) \
        @ mha.out_proj.weight.detach().T + mha.out_proj.bias.detach()
    e = float((got - want).abs().max())
    xg = torch.linspace(-6, 6, 1001, dtype=torch.float64)
    e2 = float((ACTS["gelu"](xg) - F.gelu(xg)).abs().max())
    print(f"attention vs torch.nn.MultiheadAttention: max abs diff {e:.3g}; "
          f"gelu vs F.gelu {e2:.3g}")
    ok &= e < 1e-12 and e2 < 1e-14

    rng = np.random.default_rng(7)
    inp = os.path.join(work, "inputs")
    os.makedirs(inp)
    f48 = os.path.join(inp, "f48.safetensors")
    write_st(f48, [("frames", frames_input(rng, 3, 48), "U8")])
    f32 = os.path.join(inp, "f32.safetensors")
    write_st(f32, [("frames", frames_input(rng, 3, 32), "U8")])
    v40 = os.path.join(inp, "v40.safetensors")
    write_st(v40, [("frames", frames_input(rng, 40, 32), "U8")])
    v9 = os.path.join(inp, "v9.safetensors")
    write_st(v9, [("frames", frames_input(rng, 9, 32), "U8")])
    # audio: a WAV of 1022 fbank frames (400 + 1021 * 160 samples) and its fbank
    n = 400 + 1021 * 160
    tt = np.arange(n) / 16000.0
    sig = 0.4 * np.sin(2 * math.pi * (200 * tt + 150 * tt * tt)) + rng.normal(0, 0.02, n)
    wav = os.path.join(inp, "a1022.wav")
    write_wav(wav, sig)
    fb = kaldi_fbank64(read_wav(wav))
    a1022 = os.path.join(inp, "a1022.safetensors")
    write_st(a1022, [("audio_fbank", fb, "F32")])
    a1022bad = os.path.join(inp, "a1022bad.safetensors")
    fbb = fb.copy()
    fbb[500, 40] += 0.01
    write_st(a1022bad, [("audio_fbank", fbb, "F32")])
    a1502 = os.path.join(inp, "a1502.safetensors")
    write_st(a1502, [("audio_fbank", rng.normal(-4.27, 4.57, (1502, 128)), "F32")])

    # (model, kind, inputs, tubelet, position-table tensor and row)
    vit_pos = ("embeddings.position_embeddings", (0, 2, 5))
    clip_pos = ("vision_model.embeddings.position_embedding.weight", (2, 5))
    ast_pos = ("audio_spectrogram_transformer.embeddings.position_embeddings",
               (0, 2 + 5 * 101 + 7, 3))                  # band 5, step 7
    cases = [("vit", "video", f48, 1, vit_pos), ("vit", "video", f48, 2, vit_pos),
             ("vit_cls", "video", f32, 1, ("vit.embeddings.position_embeddings", (0, 2, 5))),
             ("dinov2", "video", f48, 1, vit_pos), ("dinov2", "video", f48, 2, vit_pos),
             ("dinov2_cls", "video", f48, 1, ("dinov2.embeddings.position_embeddings",
                                              (0, 2, 5))),
             ("clip", "video", f48, 1, clip_pos), ("clip_vision", "video", f32, 2, clip_pos),
             ("vit_f16", "video", f48, 1, vit_pos), ("vit_bf16", "video", f48, 1, vit_pos),
             ("vit_extra", "video", f48, 1, vit_pos),
             ("videomae", "video", v40, 2, None), ("videomae_pt", "video", v9, 2, None),
             ("ast", "audio", a1022, None, ast_pos), ("ast", "audio", a1502, None, ast_pos)]
    weight_of = {"vit": "encoder.layer.1.intermediate.dense.weight",
                 "vit_cls": "vit.encoder.layer.0.attention.attention.key.weight",
                 "dinov2": "encoder.layer.1.layer_scale2.lambda1",
                 "dinov2_cls": "classifier.weight",  # only the logits see it
                 "clip": "vision_model.encoder.layers.0.self_attn.k_proj.weight",
                 "clip_vision": "vision_model.pre_layrnorm.bias",
                 "videomae": "videomae.encoder.layer.0.attention.attention.q_bias",
                 "videomae_pt": "videomae.layernorm.weight",
                 "ast": "audio_spectrogram_transformer.encoder.layer.1.output.dense.weight"}
    for k in ("vit_f16", "vit_bf16", "vit_extra"):
        weight_of[k] = weight_of["vit"]
    counter = [0]

    def expect(want, rc_line, what):
        nonlocal ok
        rc, line = rc_line
        good = (rc == 0) == want
        ok &= good
        if not good:
            print(f"  UNEXPECTED ({what}): rc {rc}: {line}")
        return good

    for model, kind, inputs, tub, postab in cases:
        md = os.path.join(hub, model)
        m, ref = reference(md, kind, inputs, tub)
        counter[0] += 1
        tag = f"{counter[0]:02d}"
        out = os.path.join(work, f"out{tag}.safetensors")
        s = ref["tokens"].shape[0]
        perm = np.random.default_rng(counter[0]).permutation(s)
        write_output(out, ref, tub, perm)
        wavarg = wav if inputs == a1022 else None
        rc, line = run_check(md, kind, out, inputs, 1e-4, wavarg)
        expect(True, (rc, line), "clean")
        caught, tries, how = 0, 0, []

        def neg(rc_line, what):
            nonlocal caught, tries
            tries += 1
            caught += expect(False, rc_line, what)
            # what the failing check said: the errors it saw, or why it stopped
            said = rc_line[1].split(": ", 2)[-1]
            errs = re.findall(r"(tokens max rel err|pooled|projected|logits|fbank max abs err) "
                              r"([0-9.e+-]+)", said)
            how.append(what + ": " + (", ".join(f"{k.split()[0]} {v}" for k, v in errs
                                                if float(v) > 1e-4) or said))

        # one weight (the long AST case only perturbs its resampled positions)
        if inputs != a1502:
            wname = weight_of[model]
            shape = m.raw[wname][1].shape
            idx = tuple(min(1, s_ - 1) for s_ in shape)
            pd = os.path.join(work, f"pw{tag}")
            perturbed_model(md, pd, wname, idx, 0.3)
            neg(run_check(pd, kind, out, inputs, 1e-4), "weight")
        # one position-table entry
        if postab is not None:
            pd = os.path.join(work, f"pp{tag}")
            perturbed_model(md, pd, postab[0], postab[1], 0.3)
            neg(run_check(pd, kind, out, inputs, 1e-4), "position table")
        # one token_pos (two tokens' positions swapped), one token value, pooled
        bodies = [i for i in range(s) if ref["modality"][i] != 2]
        r2 = dict(ref)
        p2 = ref["pos"].copy()
        a, b = bodies[3], bodies[len(bodies) // 2]
        p2[[a, b]] = p2[[b, a]]
        r2["pos"] = p2
        po = os.path.join(work, f"o{tag}p.safetensors")
        write_output(po, r2, tub, perm)
        neg(run_check(md, kind, po, inputs, 1e-4), "token_pos swap")
        r2 = dict(ref)
        t2 = ref["tokens"].clone()
        t2[bodies[-1], 7] += 2e-3 * float(t2[bodies[-1]].abs().max())
        r2["tokens"] = t2
        write_output(po, r2, tub, perm)
        neg(run_check(md, kind, po, inputs, 1e-4), "token value")
        r2 = dict(ref)
        r2["pooled"] = ref["pooled"].clone()
        r2["pooled"][3] += 2e-3 * float(ref["pooled"].abs().max())
        write_output(po, r2, tub, perm)
        neg(run_check(md, kind, po, inputs, 1e-4), "pooled")
        if ref["projected"] is not None:
            r2 = dict(ref)
            r2["projected"] = ref["projected"].clone()
            r2["projected"][0] += 2e-3 * float(ref["projected"].abs().max())
            write_output(po, r2, tub, perm)
            neg(run_check(md, kind, po, inputs, 1e-4), "projected")
        if ref["logits"] is not None:
            r2 = dict(ref)
            r2["logits"] = ref["logits"].clone()
            r2["logits"][1] += 2e-3 * float(ref["logits"].abs().max())
            write_output(po, r2, tub, perm)
            neg(run_check(md, kind, po, inputs, 1e-4), "logits")
            r2 = dict(ref)
            r2["labels"] = list(reversed(ref["labels"]))
            write_output(po, r2, tub, perm)
            neg(run_check(md, kind, po, inputs, 1e-4), "labels order")
            r2 = dict(ref)
            r2["multi_label"] = not ref["multi_label"]
            write_output(po, r2, tub, perm)
            neg(run_check(md, kind, po, inputs, 1e-4), "multi_label")
        if wavarg is not None:
            neg(run_check(md, kind, out, a1022bad, 1e-4, wav), "fbank vs wav")
        if kind == "video" and model.startswith("vit") and tub == 1 and model != "vit_extra":
            # a wrong tubelet in the metadata changes the sequence
            write_output(po, ref, 2, perm)
            neg(run_check(md, kind, po, inputs, 1e-4), "tubelet 2 claimed")
        print(f"{line}\n    perturbations caught {caught}/{tries}:")
        for h_ in how:
            print(f"      {h_}")

    # F16 / BF16 rounding matters at this tolerance: each rounded model's
    # output fails against the F32 model.
    for var in ("vit_f16", "vit_bf16"):
        _, ref = reference(os.path.join(hub, var), "video", f48, 1)
        out = os.path.join(work, f"{var}.safetensors")
        write_output(out, ref, 1)
        rc, line = run_check(os.path.join(hub, "vit"), "video", out, f48, 1e-4)
        expect(False, (rc, line), f"{var} output against vit")
        print(f"{var} output checked against vit/ (must fail): rc {rc}: "
              f"{line.split(': ', 2)[-1]}")
    # hostile folders and wrong kinds fail cleanly
    out = os.path.join(work, "out01.safetensors")
    for bad in ("bad_noconfig", "bad_type", "bad_shape", "bad_missing"):
        rc, line = run_check(os.path.join(hub, bad), "video", out, f48, 1e-4)
        expect(False, (rc, line), bad)
        print(f"  {line}")
    rc, line = run_check(os.path.join(hub, "ast"), "video", out, f48, 1e-4)
    expect(False, (rc, line), "ast video")
    print(f"  {line}")
    print("selftest " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


# ---------------------------------------------------------------- main


def usage():
    print(__doc__.split("MAKE\n")[0].rstrip(), file=sys.stderr)
    return 2


def main(argv):
    if not argv:
        return usage()
    cmd, args = argv[0], argv[1:]
    if cmd == "make" and len(args) == 1:
        make(args[0])
        return 0
    if cmd == "make-base" and len(args) == 1:
        make_base(args[0])
        return 0
    if cmd == "selftest" and len(args) <= 1:
        if args:
            os.makedirs(args[0], exist_ok=True)
            return selftest(tempfile.mkdtemp(dir=args[0]))
        work = tempfile.mkdtemp(prefix="hub_models_")
        try:
            return selftest(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    opts, pos = {}, []
    i = 0
    while i < len(args):
        if args[i] in ("--tol", "--wav", "--tubelet"):
            if i + 1 >= len(args):
                return usage()
            opts[args[i]] = args[i + 1]
            i += 2
        elif args[i].startswith("--"):
            return usage()
        else:
            pos.append(args[i])
            i += 1
    if cmd == "check" and len(pos) == 4 and pos[1] in ("video", "audio") \
            and "--tubelet" not in opts:
        try:
            tol = float(opts.get("--tol", "1e-4"))
        except ValueError:
            return usage()
        rc, line = run_check(pos[0], pos[1], pos[2], pos[3], tol, opts.get("--wav"))
        print(line)
        return rc
    if cmd == "check-batch" and len(pos) == 1 and not opts:
        # One process for many checks (torch is imported once, each reference
        # computed once): lines of NAME, MODEL, KIND, OUT, INPUTS, WAV, TOL
        # separated by tabs ("-" for no WAV, the default TOL); prints
        # "NAME<TAB>exit code<TAB>line" for each; exits 1 if any failed.
        worst = 0
        with open(pos[0]) as f:
            for raw in f:
                fields = raw.rstrip("\n").split("\t")
                if len(fields) != 7 or fields[2] not in ("video", "audio"):
                    print(f"{fields[0]}\t1\thub_models check-batch: bad line {raw!r}")
                    worst = 1
                    continue
                name, model, kind, out, inputs, wav, tol = fields
                rc, line = run_check(model, kind, out, inputs,
                                     1e-4 if tol == "-" else float(tol),
                                     None if wav == "-" else wav)
                print(f"{name}\t{rc}\t{line}", flush=True)
                worst = max(worst, rc)
        return 1 if worst else 0
    if cmd == "ref" and len(pos) == 4 and pos[1] in ("video", "audio") \
            and set(opts) <= {"--tubelet"}:
        tub = int(opts["--tubelet"]) if "--tubelet" in opts else None
        try:
            _, ref = reference(pos[0], pos[1], pos[2], tub)
        except Fail as e:
            print(f"hub_models ref: {e}")
            return 1
        write_output(pos[3], ref, tub)
        return 0
    return usage()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
