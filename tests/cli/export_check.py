#!/usr/bin/python3
"""export_check.py: checks `ringvit export` folders against the embed outputs
they came from, for tests/cli/test_export.sh. Reads the outputs by hand (json +
numpy, no safetensors package) and the shards with numpy.load.

  export_check.py rows EXPORT OUT... [--level L] [--dtype f32|f16] [--normalize]
        [--shard-rows N]
      the export holds exactly the rows of OUT... in order: the manifest's
      settings, rows and shards; every shard but the last full; each shard's
      metadata one line per row (row, input, output, level, index, t_start,
      t_end, model, model_hash) with t_start / t_end equal to the output's
      tensors; each shard the bytes numpy.save writes for its array; the rows equal the output's tensors: f32 exactly, f16 as numpy
      rounds them, --normalize within 1e-6 of the rows divided by their norm
  export_check.py equal EXPORT OUT NAME
      the export's rows are exactly OUT's tensor NAME (embed --normalize's rows)
  export_check.py faiss EXPORT [N]
      an inner-product FAISS index of the (normalised) rows returns each of N
      (default 20) sampled rows itself first
  export_check.py resumed OLD NEW
      NEW (a copy of the export OLD, resumed) kept every shard of OLD byte for
      byte, but a partial last one, whose rows and metadata lines NEW begins with
  export_check.py labels EXPORT
      the labels of each row are the top ones of its output's logits (block_logits
      or logits): softmax, or sigmoid under multi_label
  export_check.py with-logits SRC DST CLASSES [--multi] [--names a,b,...]
      DST: SRC with logits (C) and block_logits (G, C) of a fixed pattern, and the
      metadata labels (--names; none: no labels) and multi_label
  export_check.py spoil SRC DST KIND
      DST: SRC with its tensors disagreeing with its metadata: KIND dtype (says
      f16), dim (config dim + 1), times (block_start one entry short), labels
      (labels shorter than the logits)
Exit 0 when the check holds, 1 (with a message) when not, 2 on bad usage.
"""
import glob
import io
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "U8": "u1", "F16": "<f2", "BF16": "<u2"}
LEVEL_TENSORS = {"block": ("block_pooled", "block_start", "block_end", "block_logits"),
                 "segment": ("segments", "segment_start", "segment_end", None),
                 "global": ("global", None, None, "logits")}


def fail(msg):
    print("export_check: " + msg)
    sys.exit(1)


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    out = {}
    for name, t in head.items():
        b, e = t["data_offsets"]
        x = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
        if t["dtype"] == "BF16":
            x = (x.astype(np.uint32) << 16).view(np.float32)
        out[name] = (t["dtype"], x)
    return out, meta


def write_st(path, tensors, meta):
    """tensors: name -> (dtype name, array); written in name order, header padded."""
    head, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, x = tensors[name]
        b = np.ascontiguousarray(x, dtype=DTYPES[dt]).tobytes()
        head[name] = {"dtype": dt, "shape": list(x.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    head["__metadata__"] = meta
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def manifest(export):
    return json.load(open(os.path.join(export, "export.json")))


def shards(export):
    """[(rows array, metadata lines)] of the shards the manifest lists."""
    m = manifest(export)
    out = []
    for s in m["shards"]:
        x = np.load(os.path.join(export, s["emb"]))
        lines = open(os.path.join(export, s["metadata"]), encoding="utf-8").read().splitlines()
        out.append((x, [json.loads(l) for l in lines]))
    return m, out


def expected_rows(out, level, dtype, normalize):
    t, meta = read_st(out)
    emb, s, e, _ = LEVEL_TENSORS[level]
    if emb not in t:
        fail(f"{out} has no {emb}")
    x = t[emb][1].astype(np.float32).reshape(-1, int(json.loads(meta["config"])["dim"]))
    if level == "global":
        t0 = float(meta["start_s"])
        times = [(t0, t0 + float(meta["recording_s"]))]
    else:
        times = list(zip(t[s][1].tolist(), t[e][1].tolist()))
    if normalize:
        n = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
        x = np.where(n > 0, x / np.where(n > 0, n, 1), x).astype(np.float32)
    if dtype == "f16":
        x = x.astype(np.float16)
    return x, times, meta


def rows(args):
    export, outs = args[0], []
    level, dtype, normalize, shard_rows = "block", "f32", False, None
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("--level", "--dtype", "--shard-rows"):
            v = args[i + 1]
            i += 2
            if a == "--level":
                level = v
            elif a == "--dtype":
                dtype = v
            else:
                shard_rows = int(v)
            continue
        if a == "--normalize":
            normalize = True
        else:
            outs.append(a)
        i += 1
    m, sh = shards(export)
    want = {"format": "ringvit-export", "version": 1, "level": level, "dtype": dtype,
            "normalize": normalize}
    if shard_rows is not None:
        want["shard_rows"] = shard_rows
    for k, v in want.items():
        if m.get(k) != v:
            fail(f"manifest {k} is {m.get(k)!r}, want {v!r}")
    np_dtype = np.float16 if dtype == "f16" else np.float32
    for k, (x, lines) in enumerate(sh):
        if x.dtype != np_dtype or x.ndim != 2 or x.shape[1] != m["dim"]:
            fail(f"shard {k}: {x.dtype} {x.shape}, want {np.dtype(np_dtype)} (N, {m['dim']})")
        if len(lines) != x.shape[0] or m["shards"][k]["rows"] != x.shape[0]:
            fail(f"shard {k}: {x.shape[0]} rows, {len(lines)} metadata lines, manifest "
                 f"{m['shards'][k]['rows']}")
        if k + 1 < len(sh) and x.shape[0] != m["shard_rows"]:
            fail(f"shard {k} of {len(sh)} holds {x.shape[0]} rows, not {m['shard_rows']}")
        if not 0 < x.shape[0] <= m["shard_rows"]:
            fail(f"shard {k} holds {x.shape[0]} rows")
        saved = io.BytesIO()
        np.save(saved, x)
        if open(os.path.join(export, m["shards"][k]["emb"]), "rb").read() != saved.getvalue():
            fail(f"shard {k} is not the bytes numpy.save writes for its array")
    allx = np.concatenate([x for x, _ in sh]) if sh else np.zeros((0, m["dim"]))
    lines = [l for _, ls in sh for l in ls]
    r = 0
    for j, out in enumerate(outs):
        x, times, meta = expected_rows(out, level, dtype, normalize)
        got = allx[r:r + len(x)]
        if len(got) != len(x):
            fail(f"{out}: {len(x)} rows, the export has {len(got)} from row {r}")
        if normalize and dtype == "f32":
            bad = np.abs(got.astype(np.float64) - x).max() if len(x) else 0
            if bad > 1e-6:
                fail(f"{out}: normalised rows differ by {bad}")
        elif normalize:
            bad = np.abs(got.astype(np.float64) - x.astype(np.float64)).max() if len(x) else 0
            if bad > 1e-3:
                fail(f"{out}: normalised f16 rows differ by {bad}")
        elif not np.array_equal(got.view(np.uint16 if dtype == "f16" else np.uint32),
                                x.view(np.uint16 if dtype == "f16" else np.uint32)):
            fail(f"{out}: the rows {r} .. {r + len(x)} are not its tensor's ({dtype})")
        mo = m["outputs"][j]
        if mo["output"] != out or (mo["row_start"], mo["row_end"]) != (r, r + len(x)):
            fail(f"manifest output {j} is {mo['output']} rows {mo['row_start']} .. "
                 f"{mo['row_end']}, want {out} rows {r} .. {r + len(x)}")
        for g in range(len(x)):
            l = lines[r + g]
            want = {"row": r + g, "input": meta["source"], "output": out, "level": level,
                    "index": g, "t_start": times[g][0], "t_end": times[g][1],
                    "model": meta["model"], "model_hash": meta["model_hash"]}
            for k, v in want.items():
                if l.get(k) != v:
                    fail(f"metadata of row {r + g}: {k} is {l.get(k)!r}, want {v!r}")
        r += len(x)
    if r != len(allx) or m["rows"] != r or len(m["outputs"]) != len(outs):
        fail(f"the export holds {len(allx)} rows (manifest {m['rows']}, {len(m['outputs'])} "
             f"outputs), the outputs {r} ({len(outs)})")
    print(f"{r} rows in {len(sh)} shards match {len(outs)} outputs")


def equal(args):
    export, out, name = args
    _, sh = shards(export)
    got = np.concatenate([x for x, _ in sh])
    t, _ = read_st(out)
    want = t[name][1].reshape(got.shape)
    if got.dtype != want.dtype or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        fail(f"the export's rows are not {out}'s {name} bit for bit")
    print(f"{len(got)} rows equal {name}")


def faiss_check(args):
    import faiss
    export, n = args[0], int(args[1]) if len(args) > 1 else 20
    x = np.concatenate([np.load(f) for f in sorted(glob.glob(os.path.join(export, "emb", "*.npy")))])
    x = np.ascontiguousarray(x.astype(np.float32))
    faiss.normalize_L2(x)
    g = x @ x.T
    np.fill_diagonal(g, -1)
    if g.max() > 0.9999:
        fail(f"two rows are near duplicates (cosine {g.max()}): the check would mean nothing")
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    picks = np.random.default_rng(5).choice(len(x), size=min(n, len(x)), replace=False)
    d, ids = index.search(x[picks], 2)
    wrong = [int(p) for p, i in zip(picks, ids[:, 0]) if i != p]
    if wrong or not np.allclose(d[:, 0], 1, atol=1e-5):
        fail(f"rows {wrong} did not find themselves first (scores {d[:, 0].tolist()})")
    print(f"{len(picks)} of {len(x)} rows find themselves first (next best cosine "
          f"{float(d[:, 1].max()):.4f})")


def resumed(args):
    old, new = args
    mo, mn = manifest(old), manifest(new)
    so = mo["shards"]
    for k, s in enumerate(so):
        a = open(os.path.join(old, s["emb"]), "rb").read()
        b = open(os.path.join(new, s["emb"]), "rb").read()
        am = open(os.path.join(old, s["metadata"]), "rb").read()
        bm = open(os.path.join(new, s["metadata"]), "rb").read()
        if s["rows"] == mo["shard_rows"] or k + 1 < len(so):
            if a != b or am != bm:
                fail(f"shard {k} changed, though it was full")
            continue
        xa, xb = np.load(os.path.join(old, s["emb"])), np.load(os.path.join(new, s["emb"]))
        if not np.array_equal(xb[:len(xa)].view(np.uint8), xa.view(np.uint8)) or \
                not bm.startswith(am):
            fail(f"the partial shard {k}'s first {len(xa)} rows or metadata lines changed")
        if len(xb) == len(xa):
            fail(f"the partial shard {k} was not completed")
    if mn["outputs"][:len(mo["outputs"])] != mo["outputs"]:
        fail("the outputs exported before changed in the manifest")
    print(f"{len(so)} earlier shards kept; {mn['rows'] - mo['rows']} rows added")


def labels(args):
    export = args[0]
    m, sh = shards(export)
    cache, checked = {}, 0
    for _, lines in sh:
        for l in lines:
            if l["output"] not in cache:
                cache[l["output"]] = read_st(l["output"])
            t, meta = cache[l["output"]]
            name = LEVEL_TENSORS[l["level"]][3]
            if name is None or name not in t:
                if "labels" in l:
                    fail(f"row {l['row']} has labels but its output no {name}")
                continue
            z = t[name][1].astype(np.float64)
            z = z[l["index"]] if z.ndim == 2 else z
            if meta.get("multi_label") == "true":
                p = 1 / (1 + np.exp(-z))
            else:
                p = np.exp(z - z.max())
                p /= p.sum()
            order = sorted(range(len(z)), key=lambda c: (-z[c], c))[:min(m["top_k"], len(z))]
            names = json.loads(meta["labels"]) if "labels" in meta else [f"LABEL_{c}" for c in
                                                                         range(len(z))]
            want = [(names[c], c) for c in order]
            got = [(e["label"], e["id"]) for e in l.get("labels", [])]
            if got != want:
                fail(f"row {l['row']}: labels {got}, want {want}")
            ps = [e["p"] for e in l["labels"]]
            if not np.allclose(ps, p[order], rtol=1e-12, atol=0):
                fail(f"row {l['row']}: probabilities {ps}, want {p[order].tolist()}")
            checked += 1
    if not checked:
        fail("no row has labels")
    print(f"{checked} rows' labels checked")


def with_logits(args):
    src, dst, classes = args[0], args[1], int(args[2])
    multi = "--multi" in args
    names = args[args.index("--names") + 1].split(",") if "--names" in args else None
    t, meta = read_st(src)
    g = t["block_pooled"][1].shape[0]
    # Row g's logits peak at class g % C, with a second and a third below it.
    bl = np.array([[np.sin(1.7 * c + 0.3 * r) + (3.0 if c == r % classes else 0)
                    for c in range(classes)] for r in range(g)], dtype=np.float32)
    t["block_logits"] = ("F32", bl)
    t["logits"] = ("F32", bl.mean(axis=0).astype(np.float32))
    meta["multi_label"] = "true" if multi else "false"
    if names:
        meta["labels"] = json.dumps(names)
    write_st(dst, t, meta)


def spoil(args):
    src, dst, kind = args
    t, meta = read_st(src)
    if kind == "dtype":
        meta["dtype"] = "f16"
    elif kind == "dim":
        cfg = json.loads(meta["config"])
        cfg["dim"] += 1
        meta["config"] = json.dumps(cfg)
    elif kind == "times":
        t["block_start"] = ("F64", t["block_start"][1][:-1])
    elif kind == "labels":
        t["block_logits"] = ("F32", np.zeros((t["block_pooled"][1].shape[0], 3), np.float32))
        meta["labels"] = json.dumps(["a", "b"])
    else:
        sys.exit(2)
    write_st(dst, t, meta)


def main():
    cmds = {"rows": rows, "equal": equal, "faiss": faiss_check, "resumed": resumed,
            "labels": labels, "with-logits": with_logits, "spoil": spoil}
    if len(sys.argv) < 3 or sys.argv[1] not in cmds:
        print(__doc__)
        sys.exit(2)
    cmds[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
