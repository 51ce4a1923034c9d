"""test_threads.py: two Python threads decoding (and tokenizing, embedding)
different files at once get what one after the other gets; the calls release
the GIL (another thread keeps running during a long call); Ctrl-C interrupts a
long call cleanly (SIGINT to a child process)."""

import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np

from conftest import PKG_DIR, make_clip

import ringvit


def _in_threads(fns):
    results, errors = [None] * len(fns), []
    barrier = threading.Barrier(len(fns))

    def run(i):
        try:
            barrier.wait()
            results[i] = fns[i]()
        except BaseException as e:
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    return results


def test_two_threads_equal_sequential(clips):
    a, b = clips
    jobs = [lambda: ringvit.frames(a, fps=5, size=64), lambda: ringvit.frames(b, fps=4, size=48)]
    seq = [j() for j in jobs]
    for _ in range(3):
        par = _in_threads(jobs)
        for s, p in zip(seq, par):
            for x, y in zip(s, p):
                assert np.array_equal(x, y)
    tjobs = [lambda: ringvit.tokens(a), lambda: ringvit.tokens(b, fps=2)]
    seq = [j() for j in tjobs]
    par = _in_threads(tjobs)
    for s, p in zip(seq, par):
        assert s.keys() == p.keys() and all(np.array_equal(s[k], p[k]) for k in s)


def test_two_encoders_in_threads(clips):
    """The same computation in threads as one after the other: bit for bit."""
    with ringvit.Encoder("tiny", threads=1) as e1, ringvit.Encoder("tiny", threads=1) as e2:
        seq = [e1.embed(clips[0]), e2.embed(clips[1])]
        par = _in_threads([lambda: e1.embed(clips[0]), lambda: e2.embed(clips[1])])
    for s, p in zip(seq, par):
        for k in s:
            assert np.array_equal(p[k], s[k]), k


def test_gil_released(clips):
    """A Python thread counts while the main thread is inside a long C call."""
    ticks, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    try:
        with ringvit.Encoder("tiny", threads=1) as enc:
            before = ticks[0]
            t0 = time.monotonic()
            enc.embed(clips[1], fps=4)
            spent = time.monotonic() - t0
            during = ticks[0] - before
    finally:
        stop.set()
        t.join()
    # at 1 ms a tick, a thread blocked by the GIL would not tick at all
    assert spent > 0.05 and during >= 10, (spent, during)


def test_ctrl_c_interrupts(tmp_path):
    """SIGINT during a long embed, of a path (decoding, then the encoder) and of
    token arrays (the encoder alone: ~12k tokens of full attention on one thread,
    12 s unloaded, ~1 s a layer): KeyboardInterrupt within seconds each time, and
    the next call works."""
    clip = make_clip(tmp_path / "long.mp4", seconds=120, size="64x64", rate=5,
                     sample_rate=8000)
    code = textwrap.dedent(f"""
        import signal, sys, time
        # Python's own Ctrl-C handler even where SIGINT was inherited ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.path.insert(0, {str(PKG_DIR)!r})
        import ringvit
        clip = {str(clip)!r}
        kw = dict(fps=4, size=112, audio=False)
        toks = ringvit.tokens(clip, **kw)
        enc = ringvit.Encoder("tiny", threads=1)
        for what in ("path", "tokens"):
            print("start", what, flush=True)
            t0 = time.monotonic()
            try:
                enc.embed(clip, **kw) if what == "path" else enc.embed(toks)
                print("finished", what, flush=True)
            except KeyboardInterrupt:
                print("interrupted", what, "%.2f" % (time.monotonic() - t0), flush=True)
        g = enc.embed(clip, duration=2, size=32)["global"]
        print("after", g.shape, flush=True)
        """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        for what in ("path", "tokens"):
            line = p.stdout.readline().strip()
            assert line == f"start {what}", line + p.stderr.read()
            time.sleep(1.0)
            p.send_signal(signal.SIGINT)
            line = p.stdout.readline().split()
            assert line[:2] == ["interrupted", what], line
            assert float(line[2]) < 1.0 + 10, f"{what}: interrupted after {line[2]} s"
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert out.strip() == "after (192,)", out + err
    assert p.returncode == 0, err
