"""The CPU of a diff, in processes of the API process's own.

A diff of two large revisions is tens to hundreds of milliseconds of pure-Python CPU. In a
thread of the API process it held the GIL that the event loop needs: with 40 diffs running,
/healthz waited p50 286 ms although no request thread was taken. Here the diff and its JSON run
in a small pool of processes (`EVIDENCE_DIFF_CONCURRENCY`, started at the first diff, from a
fork server so that they share nothing with the server's sockets), niced so that the API's own
requests come first on a busy machine; the thread that asked only waits for the answer.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pebble import ProcessPool

T = TypeVar("T")

#: Added to a diff process's nice value: a diff may wait, the API's other requests should not.
DIFF_NICE = 5
#: Longest one diff may run in its process before it is killed (its request then fails).
DIFF_TIMEOUT_SECONDS = 30.0
#: Imported by the fork server, so that each new diff process starts with them.
PRELOAD = ["api.services.diff_render"]

_lock = threading.Lock()
_pool: tuple[int, int, ProcessPool] | None = None


def _start_process(nice: int) -> None:
    if nice:
        with contextlib.suppress(OSError):
            os.nice(nice)


def pool(processes: int) -> ProcessPool:
    """This process's diff pool of `processes` (a forked child, or a new size, makes its own)."""
    global _pool
    with _lock:
        if _pool is None or _pool[:2] != (os.getpid(), processes):
            if _pool is not None and _pool[0] == os.getpid():
                _pool[2].stop()  # type: ignore[no-untyped-call]  # pebble is untyped
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            started = ProcessPool(
                max_workers=processes,
                initializer=_start_process,
                initargs=(DIFF_NICE,),
                context=context,
            )
            _pool = (os.getpid(), processes, started)
        return _pool[2]


def run(processes: int, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a diff process, waited for in the calling thread (which holds no GIL
    meanwhile). A process that dies or overruns fails only this call."""
    future = pool(processes).schedule(fn, args=args, timeout=DIFF_TIMEOUT_SECONDS)
    result: T = future.result()
    return result


def stop() -> None:
    """Stop this process's diff pool (tests; the processes end with the server otherwise)."""
    global _pool
    with _lock:
        if _pool is not None and _pool[0] == os.getpid():
            _pool[2].stop()  # type: ignore[no-untyped-call]  # pebble is untyped
            _pool[2].join()
        _pool = None
