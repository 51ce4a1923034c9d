#!/usr/bin/python3
"""convert-torchvision.py: a torchvision VisionTransformer checkpoint (.pth) to
the safetensors file `ringvit embed --model` and `ringvit finetune --model` read.

ringvit reads a file holding only torchvision's names as that image ViT: the
sizes come from the tensor shapes (encoder/rv_vit.h), so this script writes the
tensors as they are, under their own names, and no "ringvit.config" metadata.
What it does on the way:
  - loads with torch.load(weights_only=True): tensors and plain containers only.
    A whole pickled nn.Module needs --unsafe-pickle (unpickling it runs code
    named in the file);
  - finds the state dict: the file itself, or under "model", "state_dict" or
    "model_state" (one or two levels), or a module's state_dict(); strips a
    "module." (DataParallel) or "_orig_mod." (torch.compile) prefix; renames the
    MLP's legacy names (mlp.linear_1 / mlp.linear_2, torchvision 0.12's, as its
    hub checkpoints still carry) to mlp.0 / mlp.3 as torchvision does on load;
  - checks it is a torchvision VisionTransformer (conv_proj.weight 4D,
    class_token, encoder.pos_embedding, every tensor of each encoder layer,
    encoder.ln), with shapes that agree, and refuses anything else naming what
    is missing or wrong;
  - writes every tensor as F32 (--keep-dtype keeps F16 and BF16), in sorted name
    order, without the classifier heads.* unless --keep-head, to OUT.tmp.<pid>
    renamed to OUT when complete.
Exit status: 0 written, 1 the input cannot be converted or OUT cannot be
written, 2 usage error. Needs /usr/bin/python3 with torch and numpy
(python3-torch, python3-numpy); the safetensors package is not used.
"""
import argparse
import importlib
import json
import os
import pickle
import signal
import stat
import struct
import sys

PROG = "convert-torchvision.py"
WRAPPER_KEYS = ("model", "state_dict", "model_state")
PREFIXES = ("module.", "_orig_mod.")
LAYER = "encoder.layers.encoder_layer_"
# Per layer: name -> shape in terms of D (model width) and M (MLP width).
LAYER_SHAPES = {
    "ln_1.weight": ("D",), "ln_1.bias": ("D",),
    "self_attention.in_proj_weight": ("3D", "D"), "self_attention.in_proj_bias": ("3D",),
    "self_attention.out_proj.weight": ("D", "D"), "self_attention.out_proj.bias": ("D",),
    "ln_2.weight": ("D",), "ln_2.bias": ("D",),
    "mlp.0.weight": ("M", "D"), "mlp.0.bias": ("M",),
    "mlp.3.weight": ("D", "M"), "mlp.3.bias": ("D",),
}
# torchvision's architectures whose head count is not D / 64 (what ringvit assumes
# for a file without its config): (D, layers, patch, M) -> heads.
KNOWN_HEADS = {(1280, 32, 14, 5120): ("vit_h_14", 16)}

HELP_EPILOG = """\
example:
  scripts/convert-torchvision.py vit_b_16-c867db91.pth -o vit_b_16.safetensors
  build/ringvit embed talk.mp4 --model vit_b_16.safetensors -o talk.safetensors

The input is what torch hub saves (a state dict, e.g.
~/.cache/torch/hub/checkpoints/vit_b_16-c867db91.pth), or a training checkpoint
holding it under "model", "state_dict" or "model_state", with or without a
"module." prefix; --unsafe-pickle also takes a whole pickled model. The output
holds the tensors under torchvision's names (no "ringvit.config"): ringvit takes
the sizes from the shapes and the head count as D / 64, right for ViT-B and
ViT-L (64 channels per head); for another count (vit_h_14: 16 heads of 80, a D
that is not a multiple of 64) a note says so. Metadata: format "pt", source (the
input's name), converted_by.

exit status: 0 written, 1 the input is not a torchvision ViT or cannot be read
or OUT cannot be written, 2 usage error.
"""


class Fail(Exception):
    """A conversion failure: the message names the file and the problem (exit 1)."""


class Usage(Exception):
    """A usage error (exit 2)."""


class ArgParser(argparse.ArgumentParser):
    def error(self, message):
        raise Usage(message)


def parse_args(argv):
    p = ArgParser(
        prog=PROG, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Converts a torchvision VisionTransformer checkpoint (.pth) to a\n"
                    "safetensors weights file for `ringvit embed --model` and\n"
                    "`ringvit finetune --model`.",
        epilog=HELP_EPILOG)
    p.add_argument("input", metavar="INPUT.pth", help="the torchvision checkpoint")
    p.add_argument("-o", "--output", metavar="OUT", required=True,
                   help="the safetensors file to write (replaced if it is a regular file)")
    p.add_argument("--keep-head", action="store_true",
                   help="keep the classifier (heads.*); ringvit does not use it and warns "
                        "about it when loading")
    p.add_argument("--keep-dtype", action="store_true",
                   help="keep F16 and BF16 tensors as they are (default: every tensor F32; "
                        "F64 becomes F32 either way)")
    p.add_argument("--unsafe-pickle", action="store_true",
                   help="if the file is not plain tensors and containers (e.g. a whole "
                        "pickled nn.Module), load it with weights_only=False. Unpickling "
                        "runs any code the file names: use it only for files you trust")
    p.add_argument("--quiet", action="store_true", help="no summary line")
    return p.parse_args(argv)


# ---- loading -----------------------------------------------------------------------

def load_checkpoint(torch, path, unsafe):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "Weights only load failed" not in str(e) and "weights_only" not in str(e):
            raise Fail("%s: not a readable PyTorch checkpoint: truncated, damaged or not "
                       "written by torch.save (%s)" % (path, one_line(e)))
        if not unsafe:
            detail = one_line(Exception(str(e).split("error:")[-1]))
            what = ("pickled Python objects, not only tensors and plain containers"
                    if "class" in detail or "global" in detail.lower() else
                    "something this torch's weights_only loader cannot read (older ones "
                    "refuse even floats in a training checkpoint)")
            raise Fail("%s holds %s (%s); loading it otherwise runs code the file may name: "
                       "if you trust it, rerun with --unsafe-pickle" % (path, what, detail))
    except Exception as e:  # a truncated zip, not a pickle at all, ...
        raise Fail("%s: not a readable PyTorch checkpoint: truncated, damaged or not written "
                   "by torch.save (%s: %s)" % (path, type(e).__name__, one_line(e)))
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        raise Fail("%s: could not be unpickled even with --unsafe-pickle (%s: %s)"
                   % (path, type(e).__name__, one_line(e)))


def one_line(e):
    text = " ".join(str(e).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def module_heads(obj):
    """The head count of a torchvision ViT module, else None."""
    try:
        return int(obj.encoder.layers[0].self_attention.num_heads)
    except Exception:
        return None


def find_state_dict(torch, obj, path):
    """(state dict {name: tensor}, heads if the file held a module) from what torch.load gave."""
    heads = None
    for _ in range(3):
        if isinstance(obj, torch.nn.Module) or (hasattr(obj, "state_dict") and
                                                callable(obj.state_dict)):
            heads = module_heads(obj)
            obj = obj.state_dict()
            continue
        if not isinstance(obj, dict):
            raise Fail("%s holds a %s, not a state dict (a dict of tensors)"
                       % (path, type(obj).__name__))
        inner = next((k for k in WRAPPER_KEYS if k in obj and not torch.is_tensor(obj[k])),
                     None)
        if inner is None and any(torch.is_tensor(v) for v in obj.values()):
            break
        if inner is None:
            keys = ", ".join(repr(k) for k in list(obj)[:8])
            raise Fail("%s holds a dict without tensors (keys %s%s) and no state dict under %s"
                       % (path, keys or "none", ", ..." if len(obj) > 8 else "",
                          " / ".join(repr(k) for k in WRAPPER_KEYS)))
        obj = obj[inner]
    else:
        raise Fail("%s: no state dict found within three levels of wrapping" % path)
    sd = {}
    for k, v in obj.items():
        if not isinstance(k, str):
            raise Fail("%s: the state dict has a key %r that is not a name" % (path, k))
        if not torch.is_tensor(v):
            raise Fail("%s: the state dict's '%s' is a %s, not a tensor"
                       % (path, k, type(v).__name__))
        sd[k] = v
    for prefix in PREFIXES:
        if sd and all(k.startswith(prefix) for k in sd):
            sd = {k[len(prefix):]: v for k, v in sd.items()}
    # torchvision < 0.13 named the MLP's layers linear_1 / linear_2 (MLPBlock version 1).
    renamed = {}
    for k, v in sd.items():
        if k.startswith(LAYER):
            for old, new in ((".mlp.linear_1.", ".mlp.0."), (".mlp.linear_2.", ".mlp.3.")):
                k = k.replace(old, new)
        if k in renamed:
            raise Fail("%s holds '%s' under both its legacy and its current name" % (path, k))
        renamed[k] = v
    return renamed, heads


# ---- checking ----------------------------------------------------------------------

def shape_text(shape):
    return "(" + ", ".join(str(s) for s in shape) + ")"


def check_vit(sd, path):
    """Checks sd is a torchvision VisionTransformer; returns its sizes."""
    need = ["conv_proj.weight", "conv_proj.bias", "class_token", "encoder.pos_embedding",
            LAYER + "0.ln_1.weight", "encoder.ln.weight", "encoder.ln.bias"]
    missing = [n for n in need if n not in sd]
    if missing:
        there = sorted(sd)
        peek = ", ".join(there[:5]) + (", ..." if len(there) > 5 else "")
        raise Fail("%s is not a torchvision VisionTransformer checkpoint: missing %s "
                   "(it holds %d tensors: %s)" % (path, ", ".join(missing), len(there), peek))
    bad = []

    def want(name, shape):
        got = tuple(sd[name].shape)
        if got != tuple(shape):
            bad.append("'%s' is %s, expected %s" % (name, shape_text(got), shape_text(shape)))

    w = sd["conv_proj.weight"]
    if w.dim() != 4 or w.shape[1] != 3 or w.shape[2] != w.shape[3]:
        raise Fail("%s: 'conv_proj.weight' is %s; a torchvision ViT's is (D, 3, P, P)"
                   % (path, shape_text(w.shape)))
    D, P = int(w.shape[0]), int(w.shape[2])
    want("conv_proj.bias", (D,))
    want("class_token", (1, 1, D))
    pos = sd["encoder.pos_embedding"]
    if pos.dim() != 3 or pos.shape[0] != 1 or pos.shape[2] != D or pos.shape[1] < 2:
        raise Fail("%s: 'encoder.pos_embedding' is %s; expected (1, 1 + grid*grid, %d)"
                   % (path, shape_text(pos.shape), D))
    n = int(pos.shape[1]) - 1
    grid = int(round(n ** 0.5))
    if grid * grid != n:
        raise Fail("%s: 'encoder.pos_embedding' holds %d positions after the class token, "
                   "not a square grid" % (path, n))
    want("encoder.ln.weight", (D,))
    want("encoder.ln.bias", (D,))
    layers = 0
    while (LAYER + "%d.ln_1.weight" % layers) in sd:
        layers += 1
    fc1 = sd.get(LAYER + "0.mlp.0.weight")
    M = int(fc1.shape[0]) if fc1 is not None and fc1.dim() == 2 else None
    missing = []
    for i in range(layers):
        for part, dims in LAYER_SHAPES.items():
            name = "%s%d.%s" % (LAYER, i, part)
            if name not in sd:
                missing.append(name)
            elif M is not None:
                want(name, [{"D": D, "3D": 3 * D, "M": M}[d] for d in dims])
    if missing:
        raise Fail("%s is not a complete torchvision VisionTransformer checkpoint: missing %s%s"
                   % (path, ", ".join(missing[:6]),
                      " and %d more" % (len(missing) - 6) if len(missing) > 6 else ""))
    stray = []
    for k in sorted(sd):
        if k.startswith(LAYER):
            index = k[len(LAYER):].split(".", 1)[0]
            if not index.isdigit() or int(index) >= layers:
                stray.append(k)
    if stray:
        bad.append("layer tensors beyond the %d consecutive layers from 0: %s"
                   % (layers, ", ".join(stray[:4])))
    if bad:
        raise Fail("%s: not the shapes of a torchvision VisionTransformer (D %d, MLP %s): %s"
                   % (path, D, M, "; ".join(bad[:6])))
    return {"D": D, "P": P, "grid": grid, "layers": layers, "M": M}


# ---- writing -----------------------------------------------------------------------

def out_dtype(torch, t, keep_dtype):
    """The safetensors dtype tensor t is written as."""
    if keep_dtype and t.dtype == torch.float16:
        return "F16"
    if keep_dtype and t.dtype == torch.bfloat16:
        return "BF16"
    return "F32"


def tensor_bytes(torch, t, code):
    """Tensor t as little-endian bytes of dtype code."""
    t = t.detach().cpu().contiguous()
    if code == "F32":
        return t.to(torch.float32).numpy().astype("<f4", copy=False).tobytes()
    return t.view(torch.int16).numpy().astype("<i2", copy=False).tobytes()


def out_problem(out):
    """Why OUT may not be written, or None."""
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return None
    except OSError as e:
        return "cannot check it (%s)" % e.strerror
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else
                "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file")
        return "it exists and is %s; refusing to replace it" % kind
    return None


def write_safetensors(torch, sd, out, meta, keep_dtype, tmp_box):
    """Writes sd to OUT.tmp.<pid>, then renames it to OUT; returns the file size."""
    names = sorted(sd)
    header = {"__metadata__": meta}
    codes = {}
    off = 0
    for name in names:
        t = sd[name]
        codes[name] = out_dtype(torch, t, keep_dtype)
        n = int(t.numel()) * (4 if codes[name] == "F32" else 2)
        header[name] = {"dtype": codes[name], "shape": [int(s) for s in t.shape],
                        "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    tmp = "%s.tmp.%d" % (out, os.getpid())
    if os.path.lexists(tmp):  # left by a dead process that had this pid
        os.unlink(tmp)
    tmp_box.append(tmp)
    with open(tmp, "xb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in names:  # one tensor's bytes at a time
            raw = tensor_bytes(torch, sd[name], codes[name])
            assert len(raw) == header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
            f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    why = out_problem(out)  # again: OUT may have appeared meanwhile
    if why:
        raise Fail("%s: %s" % (out, why))
    os.replace(tmp, out)
    tmp_box.remove(tmp)
    return 8 + len(h) + off


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def main(argv):
    try:
        a = parse_args(argv)
    except Usage as e:
        print("%s: %s (see --help)" % (PROG, e), file=sys.stderr)
        return 2
    if os.path.abspath(a.input) == os.path.abspath(a.output):
        print("%s: the output %s is the input; give another -o" % (PROG, a.output), file=sys.stderr)
        return 2
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    tmp_box = []
    try:
        if not os.path.exists(a.input):
            raise Fail("%s: no such file" % a.input)
        if not os.path.isfile(a.input):
            raise Fail("%s: not a regular file" % a.input)
        why = out_problem(a.output)
        if why:
            raise Fail("%s: %s" % (a.output, why))
        try:
            import torch
            importlib.import_module("numpy")  # Tensor.numpy() needs it
        except ImportError as e:
            raise Fail("needs torch and numpy in %s (%s; Debian: apt install python3-torch "
                       "python3-numpy)" % (sys.executable, e))
        sd, heads = find_state_dict(torch, load_checkpoint(torch, a.input, a.unsafe_pickle),
                                    a.input)
        size = check_vit(sd, a.input)
        for name, t in sorted(sd.items()):
            if not t.is_floating_point():
                raise Fail("%s: tensor '%s' is %s; a ViT's tensors are floating point"
                           % (a.input, name, str(t.dtype).replace("torch.", "")))
        dropped = sorted(k for k in sd if k.startswith("heads."))
        if not a.keep_head:
            sd = {k: v for k, v in sd.items() if not k.startswith("heads.")}
        bad = [k for k, v in sorted(sd.items()) if not bool(torch.isfinite(v).all())]
        if bad:
            print("%s: warning: %s holds NaN or infinite values in %s"
                  % (PROG, a.input, ", ".join(bad[:4])), file=sys.stderr)
        meta = {"format": "pt", "source": os.path.basename(a.input),
                "converted_by": "ringvit convert-torchvision"}
        nbytes = write_safetensors(torch, sd, a.output, meta, a.keep_dtype, tmp_box)
    except Fail as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 1
    except OSError as e:
        print("%s: %s: cannot write it (%s%s)" % (PROG, a.output, e.strerror or e,
                                                  ": " + e.filename if e.filename else ""),
              file=sys.stderr)
        return 1
    finally:
        for tmp in tmp_box:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    D, known = size["D"], KNOWN_HEADS.get((size["D"], size["layers"], size["P"], size["M"]))
    if heads is None and known:
        heads = known[1]
    if D % 64 != 0:
        print("%s: note: D %d is not a multiple of 64, so ringvit cannot take the head count "
              "as D / 64: pass --heads H (the model's num_heads%s) when loading %s"
              % (PROG, D, ", %d" % heads if heads else "", a.output), file=sys.stderr)
    elif heads is not None and heads != D // 64:
        print("%s: note: this model has %d heads%s, but ringvit takes D / 64 = %d for a file "
              "without its config: pass --heads %d when loading %s"
              % (PROG, heads, " (%s)" % known[0] if known else "", D // 64, heads, a.output),
              file=sys.stderr)
    if not a.quiet:
        params = sum(int(v.numel()) for v in sd.values())
        head = ("" if not dropped else " (heads.* kept)" if a.keep_head else
                " (heads.* dropped)")
        print("%s: %d tensors, %d parameters, D %d, %d layers, patch %d, grid %d (%d px), "
              "%.1f MB%s -> %s" % (os.path.basename(a.input), len(sd), params, D,
                                   size["layers"], size["P"], size["grid"],
                                   size["grid"] * size["P"], nbytes / 1e6, head, a.output))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
