#!/usr/bin/python3
"""block_check.py: the per-block outputs of `ringvit embed --attention frame` or
`--attention block=S` (block_pooled, block_projected, block_logits, block_start,
block_end) against the float64 reference of tests/peer/hub_models.py run on each
block alone: the frames whose times fall in the block (video), or the block's own
samples of a 16 kHz mono WAV through torchaudio's Kaldi fbank (audio).

    block_check.py MODELDIR video OUT.safetensors FRAMES.safetensors [--tol 1e-4]
    block_check.py MODELDIR audio OUT.safetensors AUDIO.wav [--tol 1e-4]
    block_check.py batch LIST     (one process for many: lines NAME<TAB>MODELDIR<TAB>
                                  KIND<TAB>OUT<TAB>INPUT; prints "NAME<TAB>rc<TAB>line")

FRAMES is `ringvit frames` of the same recording at the same fps and size
(frames, frame_time on the container's clock); OUT holds the block bounds on the
same clock. A block's pooled output is the reference's pooled output of that
block as a recording of its own (CLIP: post_layernorm(CLS), projected: its
visual_projection, i.e. get_image_features of the frame; VideoMAE: fc_norm of the
mean; ViT: its pooled output; DINOv2: the final-norm CLS; AST: (CLS + dist) / 2);
logits, where the model has a head and the reference gives them, likewise.
Error: per block |ringvit - ref|.max / |ref|.max, the max over blocks. Prints one
line; exit 0 when every error <= tol, 1 otherwise, 2 on bad usage."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hub_models as hm  # noqa: E402


def per_block_refs(m, kind, out, inputs, tubelet):
    """The reference result of each block alone, with the block count."""
    starts, ends = out["block_start"][1], out["block_end"][1]
    refs = []
    if kind == "video":
        t, _ = hm.read_st(inputs)
        frames, times = t["frames"][1], t["frame_time"][1]
        for g in range(len(starts)):
            sel = (times >= starts[g] - 1e-9) & (times < ends[g] - 1e-9)
            if not sel.any():
                raise hm.Fail(f"block {g} [{starts[g]:.6f}, {ends[g]:.6f}) holds no frame")
            refs.append(hm.forward_video(m, frames[sel], tubelet))
    else:
        wave = hm.read_wav(inputs)
        # The block's samples: from its start to its end on the recording's own
        # clock (a WAV starts at 0), none past its end.
        for g in range(len(starts)):
            a = int(round(starts[g] * 16000))
            b = min(int(round(ends[g] * 16000)), wave.shape[0])
            refs.append(hm.forward_audio(m, hm.kaldi_fbank64(wave[a:b])))
    return refs


def check(modeldir, kind, out_path, inputs, tol):
    """-> (exit code, one line)."""
    name = os.path.basename(os.path.normpath(modeldir))
    try:
        out, meta = hm.read_st(out_path)
        for k in ("block_pooled", "block_start", "block_end"):
            if k not in out:
                raise hm.Fail(f"{out_path}: no tensor {k}")
        tubelet = json.loads(meta.get("config", "{}")).get("tubelet")
        m = hm.Model(modeldir)
        refs = per_block_refs(m, kind, out, inputs, tubelet)
        G = len(refs)
        errs = {}
        for key, ref_key in (("block_pooled", "pooled"), ("block_projected", "projected"),
                             ("block_logits", "logits")):
            have = out.get(key)
            want = [r.get(ref_key) for r in refs]
            if all(w is None for w in want):
                if have is not None:
                    raise hm.Fail(f"{out_path}: has {key}, the reference has no {ref_key}")
                continue
            if have is None:
                raise hm.Fail(f"{out_path}: no tensor {key} (the reference has {ref_key})")
            got = have[1].astype(np.float64)
            if got.shape[0] != G:
                raise hm.Fail(f"{key} has {got.shape[0]} rows, the recording {G} blocks")
            errs[key] = max(hm.rel(got[g], np.asarray(want[g], dtype=np.float64))
                            for g in range(G))
        line = f"{name} {kind}: {G} blocks, " + ", ".join(f"{k} {e:.3g}" for k, e in errs.items())
        bad = [k for k, e in errs.items() if not e <= tol]
        if bad:
            return 1, f"block_check FAILED (tol {tol:g}: {', '.join(bad)}): {line}"
        return 0, f"block_check ok (tol {tol:g}): {line}"
    except (hm.Fail, OSError, KeyError, ValueError) as e:
        return 1, f"block_check FAILED: {name} {kind}: {e}"


def main(argv):
    if len(argv) == 2 and argv[0] == "batch":
        worst = 0
        with open(argv[1]) as f:
            for raw in f:
                fields = raw.rstrip("\n").split("\t")
                if len(fields) != 5 or fields[2] not in ("video", "audio"):
                    print(f"{fields[0]}\t1\tblock_check batch: bad line {raw!r}")
                    worst = 1
                    continue
                rc, line = check(fields[1], fields[2], fields[3], fields[4], 1e-4)
                print(f"{fields[0]}\t{rc}\t{line}", flush=True)
                worst = max(worst, rc)
        return worst
    tol, pos, i = 1e-4, [], 0
    while i < len(argv):
        if argv[i] == "--tol" and i + 1 < len(argv):
            tol = float(argv[i + 1])
            i += 2
        elif argv[i].startswith("--"):
            print(__doc__, file=sys.stderr)
            return 2
        else:
            pos.append(argv[i])
            i += 1
    if len(pos) != 4 or pos[1] not in ("video", "audio"):
        print(__doc__, file=sys.stderr)
        return 2
    rc, line = check(*pos, tol)
    print(line)
    return rc

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
