#!/usr/bin/python3
"""finetune_check.py: checks `ringvit finetune` logs and weight files, for
tests/cli/test_finetune.sh (json + numpy only; safetensors read by hand).

  finetune_check.py losses LOG                 prints "step loss" per step (the last
        record of each step: a resumed run appends to its log)
  finetune_check.py same-losses A B [--rtol R] [--steps N]
        the per-step losses of logs A and B agree: |a - b| <= R * max(|b|, 1e-12)
        for each step both hold (R = 0: bit-identical, as printed with 17
        digits); at least N steps (default 1) compared
  finetune_check.py same-weights A B [--rtol R] [--atol T] [--prefix P] [--no-key-bias]
        every F32 tensor of A and B (names starting with P, default all) agrees:
        max |a - b| <= R max |b| + T (R = T = 0: identical bytes); both hold the
        same tensor names. T matters for tensors that start at zero and whose
        gradient is small (Adam moves such elements by about lr whatever the
        gradient's size, so rounding differences move them too). --no-key-bias leaves out the key part
        [D, 2D) of every in_proj_bias: attention is invariant to it, so its exact
        gradient is zero and what the backward computes is rounding noise, which
        Adam's normalisation turns into steps of about lr with arbitrary signs;
        runs that round differently (another rank count) differ there by design
  finetune_check.py val-acc LOG MIN             the last evaluation's accuracy >= MIN
  finetune_check.py loss-drop LOG FRAC [K0 [K1]]  the mean loss of the last K1 steps
        (default 5) is at most (1 - FRAC) times the mean of the first K0 (default 2)
  finetune_check.py classes FILE NAME...        the file's ringvit.classes metadata
        is exactly these names
Exit 0 when the check holds, 1 (with a message) when not, 2 on bad usage.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U8": np.uint8,
          "I32": np.int32, "F16": np.float16}


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    for name, t in head.items():
        b, e = t["data_offsets"]
        dt = np.dtype(DTYPES[t["dtype"]]).newbyteorder("<")
        tensors[name] = np.frombuffer(data[b:e], dtype=dt).reshape(t["shape"])
    return tensors, meta


def fail(msg):
    print("finetune_check: " + msg)
    sys.exit(1)


def step_losses(path):
    out = {}
    evals = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "eval" in r:
                evals.append(r)
            elif "step" in r and "loss" in r:
                out[int(r["step"])] = float(r["loss"])
    return out, evals


def opt(args, name, default, conv=float):
    if name in args:
        i = args.index(name)
        v = conv(args[i + 1])
        del args[i:i + 2]
        return v
    return default


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    cmd, args = argv[1], list(argv[2:])
    if cmd == "losses":
        losses, _ = step_losses(args[0])
        for s in sorted(losses):
            print(s, repr(losses[s]))
        return 0
    if cmd == "same-losses":
        rtol = opt(args, "--rtol", 0.0)
        need = opt(args, "--steps", 1, int)
        a, _ = step_losses(args[0])
        b, _ = step_losses(args[1])
        common = sorted(set(a) & set(b))
        if len(common) < need:
            fail(f"only {len(common)} common steps ({sorted(a)} vs {sorted(b)}), want {need}")
        worst = 0.0
        for s in common:
            d = abs(a[s] - b[s])
            if rtol == 0.0 and a[s] != b[s]:
                fail(f"step {s}: loss {a[s]!r} vs {b[s]!r} (want identical)")
            rel = d / max(abs(b[s]), 1e-12)
            worst = max(worst, rel)
            if rel > rtol:
                fail(f"step {s}: loss {a[s]!r} vs {b[s]!r}: relative difference {rel:.3g} > {rtol}")
        print(f"{len(common)} steps agree (worst relative difference {worst:.3g})")
        return 0
    if cmd == "same-weights":
        rtol = opt(args, "--rtol", 0.0)
        atol = opt(args, "--atol", 0.0)
        prefix = opt(args, "--prefix", "", str)
        no_kb = "--no-key-bias" in args
        if no_kb:
            args.remove("--no-key-bias")
        ta, _ = load(args[0])
        tb, _ = load(args[1])
        na = {k for k in ta if k.startswith(prefix)}
        nb = {k for k in tb if k.startswith(prefix)}
        if na != nb:
            fail(f"tensor names differ: {sorted(na ^ nb)}")
        if not na:
            fail("no tensors to compare")
        worst, wname = 0.0, ""
        for k in sorted(na):
            x, y = ta[k], tb[k]
            if x.shape != y.shape:
                fail(f"{k}: shape {x.shape} vs {y.shape}")
            if no_kb and k.endswith("self_attention.in_proj_bias"):
                d = x.shape[0] // 3
                x = np.concatenate([x[:d], x[2 * d:]])
                y = np.concatenate([y[:d], y[2 * d:]])
            if rtol == 0.0 and atol == 0.0:
                if x.tobytes() != y.tobytes():
                    i = int(np.argmax(x.reshape(-1) != y.reshape(-1)))
                    fail(f"{k}: not identical (element {i}: {x.reshape(-1)[i]!r} vs "
                         f"{y.reshape(-1)[i]!r})")
                continue
            xd, yd = x.astype(np.float64), y.astype(np.float64)
            scale = max(float(np.max(np.abs(yd))) if yd.size else 0.0, 1e-30)
            diff = float(np.max(np.abs(xd - yd))) if yd.size else 0.0
            rel = diff / scale
            if rel > worst:
                worst, wname = rel, k
            if diff > rtol * scale + atol:
                fail(f"{k}: max difference {diff:.3g} (relative {rel:.3g}) > {rtol} x "
                     f"{scale:.3g} + {atol}")
        print(f"{len(na)} tensors agree (worst {worst:.3g} in {wname or '-'})")
        return 0
    if cmd == "val-acc":
        _, evals = step_losses(args[0])
        if not evals:
            fail("no evaluation in the log")
        acc = evals[-1].get("accuracy")
        if acc is None or acc < float(args[1]):
            fail(f"last val accuracy {acc} < {args[1]} (evals: "
                 f"{[(e['step'], e.get('accuracy')) for e in evals]})")
        print(f"val accuracy {acc}")
        return 0
    if cmd == "loss-drop":
        losses, _ = step_losses(args[0])
        frac = float(args[1])
        k0 = int(args[2]) if len(args) > 2 else 2
        k1 = int(args[3]) if len(args) > 3 else 5
        steps = sorted(losses)
        if len(steps) < k0 + k1:
            fail(f"{len(steps)} steps, want at least {k0 + k1}")
        first = sum(losses[s] for s in steps[:k0]) / k0
        last = sum(losses[s] for s in steps[-k1:]) / k1
        if not last <= (1 - frac) * first:
            fail(f"loss fell from {first:.4g} to {last:.4g}, less than {frac:.0%}")
        print(f"loss fell from {first:.4g} to {last:.4g} ({1 - last / first:.0%})")
        return 0
    if cmd == "classes":
        _, meta = load(args[0])
        got = json.loads(meta.get("ringvit.classes", "null"))
        if got != args[1:]:
            fail(f"classes {got}, want {args[1:]}")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
