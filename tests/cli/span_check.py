#!/usr/bin/python3
"""span_check.py: checks of `ringvit embed --attention` outputs for
tests/cli/test_spans.sh (json + numpy only; outputs read with embed_compare.load).

  span_check.py blocks WHOLE PART...    WHOLE (--attention block=W --tokens) holds
        the blocks in time order; block k's per-token outputs, times and
        positions equal PART k's (the same recording cut to that block with
        --start/--duration, full attention, --tokens) within BLOCK_RTOL, and
        WHOLE's segment k equals PART k's global mean
  span_check.py blocks-matched WHOLE PART...   the same with audio: block k's
        tokens are PART k's matched by (modality, position), as a part
        interleaves its video and audio in 2 s windows where a block holds its
        video, then its audio (each token's output does not depend on the
        order under full attention)
  span_check.py golden OUT GOLDEN.npy   OUT's per-token outputs (--tokens), as
        (frames, tokens per frame, D), equal the float64 golden within
        GOLDEN_RTOL (tests/peer/frame_golden.py: the image ViT on every frame)
  span_check.py hop OUT SEG HOP         OUT's segments (--segment SEG --hop HOP
        --tokens) against the definition, in float64: segment g is the mean of
        the tokens (special tokens aside) starting in [g HOP, g HOP + SEG), the
        last also holding every later one; G = ceil(end / HOP); start g HOP, end
        min(g HOP + SEG, end)
  span_check.py meta OUT KEY=VALUE...   OUT's metadata holds these strings
  span_check.py differ A B [--min R]    A's and B's per-token outputs differ by at
        least R (default DIFFER_MIN) relative: a span that changes nothing is not applied
Exit 0 when the check holds, 1 (with a message) when not, 2 on bad usage.
"""
import math
import os
import sys

import numpy as np

# Tolerances, relative (rel: max |a - b| / max |b|):
# a block of a span against the same recording cut to it with full attention:
# different cuts of one computation, f32 (epsilon 1.2e-7) sums in another order;
BLOCK_RTOL = 1e-5
# ringvit's f32 image ViT on every frame against the float64 peer golden;
GOLDEN_RTOL = 1e-4
# segment means (f32) against the float64 definition;
HOP_RTOL = 1e-5
# token times (double) of the two runs, and segment bounds in seconds (relative
# to the time, floored at 1 s); double epsilon is 2.2e-16;
TIME_RTOL = 1e-12
# and what a span must change at least, by default.
DIFFER_MIN = 1e-3

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embed_compare import load  # noqa: E402


def fail(msg):
    print("span_check: " + msg)
    sys.exit(1)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max()) / max(float(np.abs(b).max()), 1e-30) if b.size else 0.0


def near_time(a, b):
    return abs(float(a) - float(b)) <= TIME_RTOL * max(abs(float(b)), 1.0)


def match_order(p, w, off, n, path):
    """PART p's token order that puts its tokens where WHOLE w's block has them
    (w's tokens [off, off + n)), matched by (modality, position)."""
    def key(d, i):
        return (int(d["token_modality"][i]),) + tuple(int(x) for x in d["token_pos"][i])
    where = {key(p, i): i for i in range(n)}
    if len(where) != n:
        fail(f"{path}: two tokens share a modality and position")
    order = []
    for i in range(off, off + n):
        if key(w, i) not in where:
            fail(f"{path} has no token {key(w, i)} (modality, position) of the block")
        order.append(where[key(w, i)])
    return np.array(order, dtype=np.int64)


def blocks(whole, parts, matched=False):
    w, _ = load(whole)
    off = 0
    for k, path in enumerate(parts):
        p, _ = load(path)
        n = p["tokens"].shape[0]
        if off + n > w["tokens"].shape[0]:
            fail(f"{whole}: {w['tokens'].shape[0]} tokens, fewer than the parts' (block {k})")
        if matched:
            order = match_order(p, w, off, n, path)
            p = {name: p[name][order] for name in ("token_pos", "token_modality", "token_time",
                                                    "tokens")} | {"global": p["global"]}
        for name in ("token_pos", "token_modality"):
            if not np.array_equal(w[name][off:off + n], p[name]):
                fail(f"block {k}: {name} differs from {path}")
        if rel(w["token_time"][off:off + n], p["token_time"]) > TIME_RTOL:
            fail(f"block {k}: token times differ from {path}")
        e = rel(w["tokens"][off:off + n], p["tokens"])
        if e > BLOCK_RTOL:
            fail(f"block {k}: outputs differ from {path} by {e:.3g} relative")
        e = rel(w["segments"][k], p["global"])
        if e > BLOCK_RTOL:
            fail(f"block {k}: segment {k} differs from {path}'s global mean by {e:.3g}")
        off += n
    if off != w["tokens"].shape[0]:
        fail(f"{whole}: {w['tokens'].shape[0]} tokens, the parts hold {off}")
    print(f"blocks: {len(parts)} blocks, {off} tokens equal")


def golden(out, path):
    t, _ = load(out)
    g = np.load(path)
    y = t["tokens"]
    if y.shape[0] != g.shape[0] * g.shape[1] or y.shape[1] != g.shape[2]:
        fail(f"{out}: tokens {list(y.shape)}, want {g.shape[0]} x {g.shape[1]} rows of {g.shape[2]}")
    e = rel(y.reshape(g.shape), g)
    if e > GOLDEN_RTOL:
        fail(f"{out}: outputs differ from the golden by {e:.3g} relative")
    print(f"golden: {g.shape[0]} frames, relative error {e:.3g}")


def hop(out, seg, hop_s):
    t, meta = load(out)
    end = float(meta["recording_s"])
    G = max(1, math.ceil(end / hop_s))
    if t["segments"].shape[0] != G:
        fail(f"{out}: {t['segments'].shape[0]} segments, want {G}")
    keep = t["token_modality"] != 2
    y = t["tokens"][keep].astype(np.float64)
    ts = t["token_time"][keep, 0]
    worst = 0.0
    for g in range(G):
        sel = (ts >= g * hop_s) & (ts < g * hop_s + seg)
        if g == G - 1:
            sel |= ts >= g * hop_s
        if int(t["segment_tokens"][g]) != int(sel.sum()):
            fail(f"segment {g}: {int(t['segment_tokens'][g])} tokens, want {int(sel.sum())}")
        want = y[sel].mean(0) if sel.any() else np.zeros(y.shape[1])
        worst = max(worst, rel(t["segments"][g], want) if sel.any() else
                    float(np.abs(t["segments"][g]).max()))
        if not near_time(t["segment_start"][g], g * hop_s) or \
                not near_time(t["segment_end"][g], min(g * hop_s + seg, end)):
            fail(f"segment {g}: [{t['segment_start'][g]}, {t['segment_end'][g]}), want "
                 f"[{g * hop_s}, {min(g * hop_s + seg, end)})")
    if worst > HOP_RTOL:
        fail(f"{out}: segment means differ by {worst:.3g} relative")
    print(f"hop: {G} segments of {seg} s every {hop_s} s, worst {worst:.3g}")


def meta_check(out, pairs):
    _, meta = load(out)
    for kv in pairs:
        k, v = kv.split("=", 1)
        if meta.get(k) != v:
            fail(f"{out}: metadata {k} is {meta.get(k)!r}, want {v!r}")
    print("meta: ok")


def differ(a, b, least):
    x, _ = load(a)
    y, _ = load(b)
    e = rel(x["tokens"], y["tokens"])
    if e < least:
        fail(f"{a} and {b} differ by only {e:.3g} relative")
    print(f"differ: {e:.3g}")


def main(argv):
    try:
        if len(argv) >= 3 and argv[0] in ("blocks", "blocks-matched"):
            blocks(argv[1], argv[2:], argv[0] == "blocks-matched")
        elif len(argv) == 3 and argv[0] == "golden":
            golden(argv[1], argv[2])
        elif len(argv) == 4 and argv[0] == "hop":
            hop(argv[1], float(argv[2]), float(argv[3]))
        elif len(argv) >= 2 and argv[0] == "meta":
            meta_check(argv[1], argv[2:])
        elif len(argv) in (3, 5) and argv[0] == "differ":
            differ(argv[1], argv[2], float(argv[4]) if len(argv) == 5 else DIFFER_MIN)
        else:
            print(__doc__, file=sys.stderr)
            sys.exit(2)
    except (OSError, ValueError, KeyError) as e:
        fail(str(e))


if __name__ == "__main__":
    main(sys.argv[1:])
