#!/usr/bin/python3
"""ingest_golden.py: the peer reference for ringvit's ingest (ingest/), written
independently with PyAV (FFmpeg's decoders through Python), numpy and the ffmpeg
command, so tests/unit/test_ingest_golden.c can check ringvit against it.

    ingest_golden.py MEDIA OUT.safetensors --fps N/D --size S [--pad]
                     [--start S] [--duration D] [--no-audio]

Writes a safetensors file (laid out by hand: 8-byte header length, JSON header,
raw little-endian data) holding
    frames            (N, S, S, 3) U8   the expected pictures
    frame_time        (N) F64           t0 + t_k, seconds on the container's clock
    frame_source_time (N) F64           t0 + (pts of the frame used - its first), same
    audio             (M) F32           the expected audio (empty without audio)
    t0                (1) F64           t0: the first frame's pts (audio only: the first
                                        audio frame's) rounded down to the microsecond,
                                        seconds (NaN: nothing to decode)
and metadata "golden" (JSON: origin, rotation, audio offset, ...).

What it does, step by step (the behaviour ringvit documents in rv_ingest.h):
  - decodes every frame of the video stream with PyAV (no fast path), in
    presentation order; the first frame's pts is the origin and t0 is it rounded
    down to the microsecond (exactly, with fractions), the grid's zero;
  - sample k is at t_k = start + k / fps after it, computed with Python fractions,
    and written on the container's clock as the float t0 plus the float t_k (the
    sum ringvit documents);
    its frame is the last decoded frame with pts <= t_k (the first frame if none);
    sampling stops before the end of the last frame's display (its pts plus its
    packet's duration, or one frame at the stream's average rate) and before
    start + duration;
  - resizes with PyAV's reformat (swscale) to rgba (alpha dropped), area
    averaging, at the scaled size in the coded orientation (shorter side to S, or
    the longer side with --pad, rounded half up), passing the stream's colour
    matrix as ffprobe reports it;
  - ROTATION: PyAV does not rotate frames by the display matrix, so this script
    reads the matrix's angle with ffprobe (side data "rotation", counter-clockwise
    degrees) and turns the RGB picture clockwise by -angle with numpy.rot90, as
    the ffmpeg command's autorotate does; then centre-crops S x S (or pads on
    black, centred);
  - audio: runs `ffmpeg -i MEDIA -map 0:A -ac 1 -ar 16000 -f f32le -` (swresample
    downmix and resampling) and places its first sample at
    j = round((first audio pts - t0 - start) * 16000), silence elsewhere, cut at
    the end of the video (or of the audio, in an audio-only file).
"""
import argparse
import json
import math
import struct
import subprocess
import sys
from fractions import Fraction

import av
import numpy as np

RATE = 16000


def llround(x):
    """C's llround: halves away from zero."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def scaled_size(w, h, size, pad):
    w_is_ref = (w >= h) if pad else (w <= h)
    a, b = (h, w) if w_is_ref else (w, h)
    other = max(1, (2 * a * size + b) // (2 * b))
    return (size, other) if w_is_ref else (other, size)


def ffprobe_stream(path, index):
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_streams", "-of", "json", path],
        check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout
    for s in json.loads(out)["streams"]:
        if s["index"] == index:
            return s
    return {}


def rotation_cw(info):
    for sd in info.get("side_data_list", []):
        if "rotation" in sd:
            cw = (-int(round(float(sd["rotation"])))) % 360
            return cw if cw % 90 == 0 else 0
    return 0


COLORSPACES = {"bt709": "ITU709", "fcc": "FCC", "smpte170m": "SMPTE170M",
               "smpte240m": "SMPTE240M"}


def pick(streams, kind):
    """Like ringvit: the largest picture / the most channels, first one on ties."""
    best, score = None, -1
    for s in streams:
        if s.type != kind:
            continue
        cc = s.codec_context
        sc = cc.width * cc.height if kind == "video" else cc.channels
        if sc > score:
            best, score = s, sc
    return best


def to_rgb(frame, sw, sh, cs, rot, size, pad, dw, dh):
    kw = {}
    if cs:
        kw["src_colorspace"] = cs
    img = frame.reformat(width=sw, height=sh, format="rgba", interpolation="AREA",
                         **kw).to_ndarray()[:, :, :3]
    k = {0: 0, 90: -1, 180: 2, 270: 1}[rot]
    img = np.rot90(img, k)
    assert img.shape[:2] == (dh, dw), (img.shape, dw, dh)
    if pad:
        out = np.zeros((size, size, 3), np.uint8)
        py, px = (size - dh) // 2, (size - dw) // 2
        out[py:py + dh, px:px + dw] = img
        return out
    oy, ox = (dh - size) // 2, (dw - size) // 2
    return np.ascontiguousarray(img[oy:oy + size, ox:ox + size])


def stream_by_index(container, index):
    return next(s for s in container.streams if s.index == index)


def video_golden(path, vindex, fps, size, pad, start_us, k_end):
    """Frames, times and source times; returns also t0 and the end (seconds)."""
    container = av.open(path)
    vs = stream_by_index(container, vindex)
    tb = Fraction(vs.time_base.numerator, vs.time_base.denominator)
    rate = vs.average_rate or vs.base_rate
    fallback = 1  # one frame at the average rate, in tb units, rounded half up
    if rate:
        fallback = max(1, math.floor(1 / (Fraction(rate) * tb) + Fraction(1, 2)))
    info = ffprobe_stream(path, vs.index)
    rot = rotation_cw(info)
    cs = COLORSPACES.get(info.get("color_space", ""))
    quarter = rot in (90, 270)

    start = Fraction(start_us, 10**6)

    def floor_pts(origin, k):
        return origin + math.floor((start + k / fps) / tb)

    durations = {}  # packet duration by pts: the display duration of its frame
    frames, times, src = [], [], []
    origin = None
    cur = None  # [frame, pts, duration, rgb or None]: the frame that answers
    k = 0

    def emit(c):
        nonlocal k
        if c[3] is None:
            fw, fh = c[0].width, c[0].height
            dw, dh = scaled_size(fh if quarter else fw, fw if quarter else fh, size, pad)
            sw, sh = (dh, dw) if quarter else (dw, dh)
            c[3] = to_rgb(c[0], sw, sh, cs, rot, size, pad, dw, dh)
        frames.append(c[3])
        times.append(float(start + Fraction(k) / fps))
        src.append(float((c[1] - origin) * tb))
        k += 1

    def on_frame(fr):
        nonlocal origin, cur
        pts = fr.pts
        if origin is None:
            origin = pts if pts is not None else 0
        if pts is None:
            pts = cur[1] + cur[2] if cur is not None else origin
        dur = durations.get(pts, 0) or fallback
        if cur is not None:
            while k < k_end and floor_pts(origin, k) < pts:
                emit(cur)
        cur = [fr, pts, dur, None]

    for pkt in container.demux(vs):
        if pkt.pts is not None and pkt.duration:
            durations[pkt.pts] = pkt.duration
        for fr in pkt.decode():
            on_frame(fr)
    end = cur[1] + cur[2]
    while k < k_end and floor_pts(origin, k) < end:
        emit(cur)
    container.close()
    t0 = origin * (tb.numerator / tb.denominator)  # as C: pts * av_q2d(tb)
    end_rel = float((end - origin) * tb)
    grid0 = math.floor(origin * tb * 10**6) / 1e6  # the grid's zero: whole microseconds
    times = [grid0 + t for t in times]
    src = [grid0 + t for t in src]
    return frames, times, src, t0, grid0, end_rel, rot


def first_audio_time(path, index):
    """The first audio frame's pts as C takes it (pts * av_q2d(tb)), and exactly."""
    container = av.open(path)
    stream = stream_by_index(container, index)
    for pkt in container.demux(stream):
        for fr in pkt.decode():
            t = fr.pts if fr.pts is not None else (stream.start_time or 0)
            tb = stream.time_base
            container.close()
            return t * (tb.numerator / tb.denominator), Fraction(t) * tb
    container.close()
    return None, None


def ffmpeg_audio(path, index):
    raw = subprocess.run(
        ["ffmpeg", "-nostdin", "-v", "error", "-i", path, "-map", f"0:{index}", "-ac", "1",
         "-ar", str(RATE), "-f", "f32le", "-"],
        check=True, capture_output=True, stdin=subprocess.DEVNULL).stdout
    return np.frombuffer(raw, dtype="<f4")


def write_safetensors(path, tensors, meta):
    header, blobs, off = {}, [], 0
    for name, dtype, shape, arr in tensors:
        b = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("media")
    ap.add_argument("out")
    ap.add_argument("--fps", default="1/1")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--pad", action="store_true")
    ap.add_argument("--start", type=float, default=0.0)
    ap.add_argument("--duration", type=float, default=0.0)
    ap.add_argument("--no-audio", action="store_true")
    a = ap.parse_args()

    fps = Fraction(a.fps)
    start_us = llround(a.start * 1e6)
    start_s = start_us / 1e6
    k_end = math.inf
    if a.duration > 0:  # k / fps < duration
        dur_us = llround(a.duration * 1e6)
        k_end = math.ceil(Fraction(dur_us, 10**6) * fps)

    container = av.open(a.media)
    vs = pick(container.streams, "video")
    ast = None if a.no_audio else pick(container.streams, "audio")
    vindex = vs.index if vs is not None else None
    aindex = ast.index if ast is not None else None
    container.close()

    S = a.size
    frames, times, src, rot = [], [], [], 0
    grid0 = math.nan
    if vindex is not None:
        frames, times, src, t0, grid0, end_rel, rot = video_golden(
            a.media, vindex, fps, S, a.pad, start_us, k_end)

    audio = np.zeros(0, np.float32)
    offset = None
    if aindex is not None:
        a0, a0_exact = first_audio_time(a.media, aindex)
        ref = ffmpeg_audio(a.media, aindex)
        if vindex is None:
            t0 = a0
            grid0 = math.floor(a0_exact * 10**6) / 1e6
            end_rel = (len(ref) / RATE)  # the stream's own length from t0
        origin = t0 + start_s
        offset = llround((a0 - origin) * RATE)
        j_end = llround((end_rel - start_s) * RATE) if vindex is not None else offset + len(ref)
        if a.duration > 0:
            j_end = min(j_end, llround(a.duration * RATE))
        if k_end != math.inf:
            kd = (2 * k_end * RATE * fps.denominator + fps.numerator) // (2 * fps.numerator)
            j_end = min(j_end, kd)
        j_end = max(j_end, 0)
        audio = np.zeros(j_end, np.float32)
        lo, hi = max(0, offset), min(j_end, offset + len(ref))
        if hi > lo:
            audio[lo:hi] = ref[lo - offset:hi - offset]

    n = len(frames)
    fr = np.stack(frames) if n else np.zeros((0, S, S, 3), np.uint8)
    meta = {"golden": json.dumps({
        "frames": n, "rotation": rot, "audio_offset": offset,
        "has_video": vindex is not None, "has_audio": aindex is not None,
        "time_origin": t0 if (vindex is not None or aindex is not None) else None})}
    write_safetensors(a.out, [
        ("frame_time", "F64", (n,), np.asarray(times, "<f8")),
        ("frame_source_time", "F64", (n,), np.asarray(src, "<f8")),
        ("audio", "F32", (len(audio),), audio.astype("<f4")),
        ("frames", "U8", (n, S, S, 3), fr),
        ("t0", "F64", (1,), np.asarray([grid0], "<f8")),
    ], meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
