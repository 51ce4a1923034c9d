"""_call.py: runs one flat call so that Ctrl-C stops it cleanly.

ctypes releases the GIL during every C call, so other Python threads run while
it works. Called from the main thread, the call runs on one long-lived worker
thread while the main thread waits in short timed waits (where Python delivers
KeyboardInterrupt); on Ctrl-C it calls rv_flat_interrupt() (again every 50 ms)
until the call returns (soon, with "interrupted"), frees whatever the call
produced anyway, and re-raises KeyboardInterrupt. The worker is one thread for the process's
life (not one per call): the C allocator then serves every call from the same
arena, and the resident set stays flat over many calls. From any other thread
(no signals arrive there) the call runs directly. The message of a failure is
read on the thread that failed (rv_last_error() is thread-local)."""

import ctypes
import os
import queue
import threading

from . import _lib
from .errors import Error


def check(status):
    """Raises ringvit.Error with this thread's last library message when status < 0."""
    if status != 0:
        msg = _lib.load().rv_last_error()
        msg = msg.decode("utf-8", "replace") if msg else ""
        raise Error(msg or f"ringvit: call failed with status {status}", status)


def out_call(fn, *args):
    """fn(*args, &out) -> the handle in out (a void * value) or raises Error."""
    out = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(out)))
    return out.value


class _Job:
    __slots__ = ("work", "done", "value", "error", "cancelled")

    def __init__(self, work):
        self.work, self.done, self.value, self.error = work, threading.Event(), None, None
        self.cancelled = False


_jobs = None
_worker_lock = threading.Lock()


def _serve(jobs):
    while True:
        job = jobs.get()
        try:
            if job.cancelled:  # Ctrl-C came before it started
                raise KeyboardInterrupt
            job.value = job.work()
        except BaseException as e:  # handed to the caller
            job.error = e
        job.done.set()


def _queue():
    global _jobs
    with _worker_lock:
        if _jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(jobs,), name="ringvit-call",
                             daemon=True).start()
            _jobs = jobs
        return _jobs


def _forget_worker():
    """In a forked child the worker thread does not exist: start a new one."""
    global _jobs, _worker_lock
    _jobs, _worker_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker)


def run(work, free=None):
    """Returns work(), where work makes the C call(s) and returns a handle (or any
    value); free(value) releases a value produced after an interrupt."""
    if threading.current_thread() is not threading.main_thread():
        return work()
    job = _Job(work)
    queued = False
    try:
        _queue().put(job)
        queued = True
        while not job.done.wait(0.05):
            pass
    except KeyboardInterrupt:
        if not queued:
            raise
        job.cancelled = True
        lib = _lib.load()
        # Asked again every 50 ms until the call returns: a call that took its
        # starting mark just after an interrupt is not affected by that one.
        while True:
            lib.rv_flat_interrupt()
            try:
                if job.done.wait(0.05):
                    break
            except KeyboardInterrupt:  # pressed again: still wait for the call
                pass
        if job.value is not None and free is not None:
            free(job.value)
        raise
    if job.error is not None:
        raise job.error
    return job.value
