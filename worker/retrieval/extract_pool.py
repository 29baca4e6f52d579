"""The extraction processes of a threads-pool worker: bounded, niced, killed when they overrun.

A worker process keeps hundreds of retrievals in flight on threads, which mostly wait on the
network; the CPU work (decoding, parsing, trafilatura, captions, images) runs here, in one
process per core, so it neither holds the fetching threads' GIL nor stalls them. Pebble's
`ProcessPool` does what `concurrent.futures` does not: a task that overruns its timeout has its
process killed and replaced, and the caller gets `TimeoutError` while the other tasks go on.

The processes come from a fork server (a clean interpreter that has imported the pipeline once),
not from a fork of the threaded worker, which could copy a lock some other thread held.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import structlog
from pebble import ProcessExpired, ProcessPool

from worker.platform import cpu_pin
from worker.platform.ranked_gate import RankedGate

log = structlog.get_logger(__name__)

#: What the fork server imports once, so each extraction process starts with it loaded.
PRELOAD = ["worker.retrieval.split_pipeline", "worker.retrieval.pipeline"]


class ExtractionTimeout(Exception):
    """The step overran its budget; its process was killed (and replaced)."""


class ExtractionCrashed(Exception):
    """The step's process died under it (a crash in a C extension, the OOM killer)."""


def _start_process(nice: int, cpus: set[int] | None = None) -> None:
    """Initializer of each extraction process: every CPU the worker was allowed (it keeps to
    one itself: `cpu_pin`), a lower priority, the pipeline imported."""
    if cpus:
        with contextlib.suppress(OSError):
            cpu_pin.release(cpus)
    if nice:
        with contextlib.suppress(OSError):
            os.nice(nice)
    import worker.retrieval.split_pipeline  # noqa: F401  (already imported by the fork server)


def _ready() -> int:
    return os.getpid()


class ExtractPool:
    """A bounded pool of extraction processes with per-task timeouts."""

    def __init__(self, processes: int, nice: int = 0, cpus: set[int] | None = None) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        self.processes = processes
        # Steps handed to pebble at once: one running and one ready per process, so a process
        # never idles between steps; the rest wait at the gate, in lane order.
        self._gate = RankedGate(2 * processes)
        self._pool = ProcessPool(
            max_workers=processes,
            initializer=_start_process,
            initargs=(nice, cpus),
            context=context,
        )

    def run(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        budget: float,
        wait: float,
    ) -> Any:
        """`fn(*args)` in an extraction process, killed after `budget` seconds of running.

        `wait` bounds the whole call, the time queued for a free process included: past it
        the step is cancelled (a running one has its process killed) and the call gives up.
        Steps queue by the thread's rank (`worker.platform.ranked_gate`: the interactive lane
        before the batch lane), then in arrival order.
        """
        started = time.monotonic()
        if not self._gate.acquire(wait):
            raise ExtractionTimeout(f"no extraction process came free within {wait:.1f} s")
        try:
            left = wait - (time.monotonic() - started)
            future = self._pool.schedule(fn, args=args, timeout=budget)
            try:
                return future.result(timeout=max(left, 0.0))
            except FutureTimeout as exc:
                # Pebble raises its own TimeoutError once it killed a step that ran past
                # `budget`; ours fires when `wait` ran out first: cancelling stops it either way.
                future.cancel()  # type: ignore[no-untyped-call]  # pebble's future is untyped
                raise ExtractionTimeout(f"extraction exceeded its bound ({budget:.1f} s)") from exc
            except CancelledError as exc:
                raise ExtractionTimeout("extraction cancelled") from exc
            except ProcessExpired as exc:
                code = exc.exitcode
                raise ExtractionCrashed(f"extraction process died (exit code {code})") from exc
        finally:
            self._gate.release()

    def warm(self, timeout: float = 120.0) -> None:
        """Start every process and wait until each has run a step (the fork server's start and
        its imports take seconds; no retrieval should pay for them against its budget)."""
        futures = [self._pool.schedule(_ready) for _ in range(self.processes)]
        for future in futures:
            future.result(timeout=timeout)

    def pids(self) -> list[int]:
        """The extraction processes alive now."""
        workers = self._pool._pool_manager.worker_manager.workers
        return [pid for pid, process in list(workers.items()) if process.is_alive()]

    def close(self) -> None:
        """Stop the processes (running steps are killed: their retrievals are re-run)."""
        self._pool.stop()  # type: ignore[no-untyped-call]
        with contextlib.suppress(Exception):
            self._pool.join(timeout=5)


_pool: ExtractPool | None = None
_lock = threading.Lock()


def start(processes: int, nice: int = 0, cpus: set[int] | None = None) -> ExtractPool:
    """Start this process's pool (once); its processes may use `cpus` (default: as this one)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ExtractPool(processes, nice, cpus)
            log.info("extract_pool_started", processes=processes, nice=nice)
        return _pool


def get() -> ExtractPool | None:
    """This process's pool, or None where extraction runs in the task itself (prefork)."""
    return _pool


def stop() -> None:
    """Stop this process's pool, if it has one."""
    global _pool
    with _lock:
        if _pool is not None:
            _pool.close()
            _pool = None
