#!/usr/bin/python3
"""timeline_check.py MEDIA FRAMES TOKENS EMBED START_FRAMES START: the outputs'
times are on the container's clock (issue 22), checked against PyAV.

MEDIA is a file whose first video frame comes after its first audio (an MPEG-TS
file). FRAMES, TOKENS and EMBED are `ringvit frames`, `tokens -o` and `embed
--tokens` outputs of it with default settings; START_FRAMES is a `frames`
output with --start START (container seconds). Checks:
  - metadata time_origin of all three is PyAV's pts of the first video frame;
  - the grid starts where the recording does: frame_time[0] is the first audio
    frame's pts rounded down to the microsecond, frame k at it + k / fps;
  - each frame_source_time is PyAV's pts of the last frame shown at or before
    frame_time (the first frame before that), and the frame is that frame's
    picture (mean absolute difference under PIXEL_MAD of 255 at this size);
  - the audio before the first video frame is kept: the samples before
    time_origin are PyAV's decoded audio there (a sine, not silence);
  - tokens: audio tokens start before time_origin, video tokens at the grid;
    the token times equal embed's token_time exactly; segment_start[0] is the
    grid start;
  - with --start S: frame_time[0] == S and the same rule for the sources.
Exits 1 with a message on the first failure."""
import json
import struct
import sys
from fractions import Fraction

import av
import numpy as np

# Times in seconds, ringvit's (double) against PyAV's exact fractions: a few
# roundings of values of seconds, relative to the time, floored at 1 s (a time of
# 0 is matched within 1e-12 s); double epsilon is 2.2e-16.
TIME_RTOL = 1e-12
# A frame against PyAV's picture of the same frame: mean absolute difference, in
# levels of the 8-bit full scale (two scalers' rounding).
PIXEL_MAD = 3.0
# embed's token times and the tokens command's are the same computation (one
# layout of the same recording): compared exactly.

DT = {"F64": np.float64, "F32": np.float32, "U8": np.uint8, "I64": np.int64}


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])

    def t(k):
        o = h[k]["data_offsets"]
        return np.frombuffer(b[8 + n + o[0]:8 + n + o[1]], dtype=DT[h[k]["dtype"]]).reshape(h[k]["shape"])
    return h["__metadata__"], t


def fail(msg):
    print("timeline_check: " + msg)
    sys.exit(1)


def near(a, b):
    return abs(float(a) - float(b)) <= TIME_RTOL * max(abs(float(b)), 1.0)


def main():
    media, frames_p, tokens_p, embed_p, start_p, start_s = sys.argv[1:7]
    start_s = float(start_s)
    with av.open(media) as c:
        vpts = []
        pics = []
        for f in c.decode(video=0):
            vpts.append(Fraction(f.pts) * f.time_base)
            pics.append(f)
    with av.open(media) as c:
        a0 = None
        audio = []
        for f in c.decode(audio=0):
            if a0 is None:
                a0 = Fraction(f.pts) * f.time_base
            audio.append(f.to_ndarray().mean(axis=0))
    t0 = vpts[0]
    if not a0 < t0:
        fail("the media's audio must start before its video (%s, %s)" % (a0, t0))
    grid0 = Fraction(int(a0 * 10**6), 10**6)  # rounded down to the microsecond

    fm, ft = load(frames_p)
    for name, m in (("frames", fm), ("tokens", load(tokens_p)[0]), ("embed", load(embed_p)[0])):
        if not near(m.get("time_origin", "nan"), t0):
            fail("%s: time_origin %s, PyAV's first video pts %s" % (name, m.get("time_origin"), float(t0)))

    def check_frames(t, first, what):
        times, src, pix = t("frame_time"), t("frame_source_time"), t("frames")
        if not near(times[0], first):
            fail("%s: frame_time[0] %r, want %r" % (what, times[0], float(first)))
        fps = json.loads(fm["ingest"])["fps_rational"].split("/")
        step = Fraction(int(fps[1]), int(fps[0]))
        size = pix.shape[1]
        for k, tk in enumerate(times):
            if not near(tk, first + k * step):
                fail("%s: frame_time[%d] %r, want %r" % (what, k, tk, float(first + k * step)))
            exact = first + k * step
            i = max([j for j, p in enumerate(vpts) if p <= exact] or [0])
            if not near(src[k], vpts[i]):
                fail("%s: frame %d at %r uses the frame at %r; PyAV's rule gives %r" %
                     (what, k, tk, src[k], float(vpts[i])))
            ref = pics[i].to_ndarray(format="rgb24", width=size, height=size).astype(np.float64)
            mad = np.abs(ref - pix[k]).mean()
            if mad > PIXEL_MAD:
                fail("%s: frame %d differs from PyAV's frame at %r (mean |diff| %.1f)" %
                     (what, k, float(vpts[i]), mad))

    check_frames(ft, grid0, "frames")
    # the audio before the first video frame: kept, and PyAV's
    wav = ft("audio")
    pre = int((t0 - grid0) * 16000)
    if pre < 1600:
        fail("the media should have at least 0.1 s of audio before its video")
    if np.abs(wav[:pre]).max() < 0.1:
        fail("the audio before the first video frame is silence: it was dropped")
    _, st = load(start_p)
    check_frames(st, Fraction(start_s).limit_denominator(10**6), "frames --start %g" % start_s)

    tm, tt = load(tokens_p)
    tok_time, mod = tt("token_time"), tt("token_modality")
    if not (tok_time[mod == 1][:, 0].min() < float(t0)):
        fail("tokens: no audio token starts before time_origin %r" % float(t0))
    if not near(tok_time[mod == 0][0, 0], grid0):
        fail("tokens: the first video token at %r, want the grid start %r" %
             (tok_time[mod == 0][0, 0], float(grid0)))
    em, et = load(embed_p)
    emod = et("token_modality")
    etime = et("token_time")
    for m in (0, 1):
        a, b = etime[emod == m], tok_time[mod == m]
        if a.shape != b.shape or not np.array_equal(a, b):
            fail("embed's token_time (modality %d) differs from the tokens command's" % m)
    if not near(et("segment_start")[0], grid0):
        fail("embed: segment_start[0] %r, want the grid start %r" % (et("segment_start")[0], float(grid0)))
    if not near(em["start_s"], grid0):
        fail("embed: metadata start_s %s, want %r" % (em["start_s"], float(grid0)))
    print("timeline ok: time_origin %.6f, grid from %.6f, %d frames, %d pre-roll samples" %
          (float(t0), float(grid0), len(ft("frame_time")), pre))


main()
