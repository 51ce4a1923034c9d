#!/usr/bin/env python3
"""prefetch_memory.py: the arithmetic and the measuring behind test_prefetch_memory.sh.

  model TEMPLATE OUT DIM LAYERS
      A narrow, shallow encoder for the test: the weights file TEMPLATE (from
      `ringvit init`) cut to width DIM (every extent of D, 3 D and the MLP's
      width becomes DIM, 3 DIM and 4 DIM: the first rows and columns, still
      random) and to its first LAYERS layers, its `ringvit.config` metadata to
      match. Few flops per byte of token slice, so a slice of tens of MB
      encodes in a fraction of a second.
  peak OUT -- COMMAND...
      Runs COMMAND with its stdout in OUT and prints "PEAK_KIB STATUS": the
      peak resident set of COMMAND and its exit status. Where COMMAND's stdout
      holds `embed --json` lines, the peak is the largest of their
      `peak_rss_mb` (the process's own getrusage peak, taken as each input's
      encode ends): the peak of the work, without the exit's teardown, where
      the libraries' destructors page in tens of MB of their code (file-backed
      pages: seen 60 MB at the exit of a CUDA build, after the last input,
      with no slice prepared ahead beside it). Otherwise the peak is
      getrusage of the children of this fresh process (only COMMAND).
  bound --json FILE --dim D --batch B --decoder PLAN,FULL --worker ALONE0,ALONE1
        --tolerance KIB N=PEAK...
      Checks the memory bound of `embed --prefetch N` (README, `embed --help`):
      N + 1 token slices per rank, each (tokens / C) x (D x 4 + 49) bytes, plus
      the decoders of the inputs being prepared. FILE holds embed's --json lines
      of a run (the tokens of every input: they must be equal); the peaks (KiB)
      are of the whole batch at each N, N=0 among them (one input after
      another: one slice, the encoder's activations, no decoder beside them).
      The allowance for the decoders is measured, not guessed:
        decoder = FULL - PLAN: what `ringvit tokens` (decode and tokenize,
                  streamed, nothing kept) holds over its plan alone, per input;
        worker  = ALONE1 - ALONE0: one input embedded at --prefetch 1 over
                  --prefetch 0 (nothing to overlap: the worker thread, its
                  malloc arena, its compute backend), once per rank;
        tolerance: the spread of one peak between runs.
      Asserts, for every N > 0:
        peak(N) - peak(0) <= N x S + N x decoder + worker + tolerance
      and that the test could see a violation: the allowance is under one slice
      (a slice more than the bound allows breaks it) and N + 1 < B (a queue
      over the whole batch would hold more than the bound); and that it sees
      the queue at all: peak(1) - peak(0) >= S / 2 (the slice prepared ahead
      shows). Prints the figures; exits 1 naming every failed check.
"""
import json
import resource
import struct
import subprocess
import sys

MIB = 1024 * 1024


def model(template, out, dim, layers):
    import numpy as np

    with open(template, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    meta = head.pop("__metadata__", {})
    if "ringvit.config" not in meta:
        sys.exit(f"{template}: no ringvit.config metadata (not a `ringvit init` file)")
    cfg = json.loads(meta["ringvit.config"])
    D, M = cfg["dim"], cfg["mlp"]
    if len({D, 3 * D, M}) != 3 or dim % cfg["heads"] or layers > cfg["layers"]:
        sys.exit(f"{template}: cannot cut D {D}, MLP {M}, {cfg['heads']} heads, "
                 f"{cfg['layers']} layers to D {dim}, {layers} layers")
    extent = {D: dim, 3 * D: 3 * dim, M: 4 * dim}
    prefix = "encoder.layers.encoder_layer_"
    out_head, blobs, off = {}, [], 0
    for name in sorted(head):
        t = head[name]
        if name.startswith(prefix) and int(name[len(prefix):].split(".")[0]) >= layers:
            continue
        if t["dtype"] != "F32":
            sys.exit(f"{template}: tensor {name} is {t['dtype']}, expected F32")
        a, b = t["data_offsets"]
        x = np.frombuffer(data[a:b], "<f4").reshape(t["shape"])
        x = x[tuple(slice(0, extent.get(s, s)) for s in x.shape)]
        raw = np.ascontiguousarray(x).tobytes()
        out_head[name] = {"dtype": "F32", "shape": list(x.shape),
                          "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    cfg.update(preset="custom", dim=dim, mlp=4 * dim, layers=layers)
    out_head["__metadata__"] = dict(meta, **{"ringvit.config": json.dumps(cfg)})
    h = json.dumps(out_head).encode()
    h += b" " * (-len(h) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)


def peak(out, cmd):
    with open(out, "wb") as f:
        rc = subprocess.run(cmd, stdout=f).returncode
    own = []
    with open(out, "rb") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("peak_rss_mb"), (int, float)):
                own.append(rec["peak_rss_mb"])
    if own:
        print(int(max(own) * 1024), rc)
        return
    # Linux: ru_maxrss in KiB, the largest of the children waited for (only cmd).
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)


def bound(argv):
    args, peaks = {}, {}
    it = iter(argv)
    for a in it:
        if a.startswith("--"):
            args[a[2:]] = next(it)
        else:
            n, kib = a.split("=")
            peaks[int(n)] = int(kib) * 1024
    dim, batch = int(args["dim"]), int(args["batch"])
    plan_kib, full_kib = (int(v) for v in args["decoder"].split(","))
    tokens = {json.loads(line)["tokens"] for line in open(args["json"]) if line.strip()}
    if len(tokens) != 1:
        sys.exit(f"FAILED: the inputs are meant to be equal, their token counts are {sorted(tokens)}")
    T = tokens.pop()
    S = T * (dim * 4 + 49)
    alone0, alone1 = (int(v) for v in args["worker"].split(","))
    dec = max(full_kib - plan_kib, 0) * 1024
    worker = max(alone1 - alone0, 0) * 1024
    tol = int(args["tolerance"]) * 1024
    print(f"slice S = {T} tokens x ({dim} x 4 + 49) B = {S / MIB:.1f} MiB; batch {batch}")
    print(f"decoder = tokens {full_kib / 1024:.1f} MiB - its plan {plan_kib / 1024:.1f} MiB = "
          f"{dec / MIB:.1f} MiB; worker = one input at prefetch 1 {alone1 / 1024:.1f} MiB - at "
          f"prefetch 0 {alone0 / 1024:.1f} MiB = {worker / MIB:.1f} MiB; tolerance {tol / MIB:.1f} MiB")
    print("bound: peak(N) - peak(0) <= N x S + allow, allow = N x decoder + worker + tolerance")
    print(f"a queue over the whole batch: (B - 1) x S = {(batch - 1) * S / MIB:.1f} MiB over peak(0)")
    print(f"{'prefetch':>8} {'peak MiB':>9} {'-peak(0)':>9} {'slices':>6} {'N x S':>7} "
          f"{'allow':>6} {'bound':>7} {'margin':>7}")
    p0 = peaks[0]
    print(f"{0:>8} {p0 / MIB:>9.1f}")
    bad = []
    for n in sorted(k for k in peaks if k > 0):
        d = peaks[n] - p0
        allow = n * dec + worker + tol
        lim = n * S + allow
        print(f"{n:>8} {peaks[n] / MIB:>9.1f} {d / MIB:>9.1f} {d / S:>6.2f} {n * S / MIB:>7.1f} "
              f"{allow / MIB:>6.1f} {lim / MIB:>7.1f} {(lim - d) / MIB:>7.1f}")
        if d > lim:
            bad.append(f"prefetch {n}: peak(N) - peak(0) = {d / MIB:.1f} MiB > N x S + allow "
                       f"= {lim / MIB:.1f} MiB ({d / S:.2f} slices)")
        if allow >= S:
            bad.append(f"prefetch {n}: the allowance {allow / MIB:.1f} MiB is not under "
                       f"one slice ({S / MIB:.1f} MiB): a slice too many would not show")
        if n + 1 >= batch:
            bad.append(f"prefetch {n}: a batch of {batch} cannot show a queue over the batch")
    if 1 in peaks and peaks[1] - p0 < S / 2:
        bad.append(f"prefetch 1: peak(1) - peak(0) = {(peaks[1] - p0) / MIB:.1f} MiB, under half "
                   f"a slice: the measure does not see the slice prepared ahead")
    for b in bad:
        print("FAILED:", b)
    sys.exit(1 if bad else 0)


def main():
    if len(sys.argv) >= 6 and sys.argv[1] == "model":
        model(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) >= 5 and sys.argv[1] == "peak" and sys.argv[3] == "--":
        peak(sys.argv[2], sys.argv[4:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "bound":
        bound(sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
