"""`evidence` with CPU probes: where a worker spends its CPU, per retrieval.

Run exactly like the CLI (`python -m bench.probe worker [--pool prefork --concurrency N]`). In
the Celery worker process (`worker_init`: before a prefork pool forks, so its children inherit
the probes) it wraps the fetch (robots.txt and politeness included; Redis calls also counted
apart), the extraction, the database transactions (the WARC archive's own work also apart)
with `time.thread_time()` (the calling
thread's CPU: a threads-pool worker runs hundreds of tasks at once), and each task as a whole;
a thread writes each process's totals to $BENCH_PROBE_DIR/probe-<pid>.json every 0.2 s while
they change, and once more when the worker stops. A threads-pool worker extracts in other
processes, which the probes do not see: the bench reads their CPU from /proc. Nothing is
patched in production code.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery import signals

TOTALS: dict[str, float] = {"tasks": 0, "task": 0.0, "fetch": 0.0, "redis": 0.0}
TOTALS |= {"extract": 0.0, "db": 0.0, "archive": 0.0}
WRITE_EVERY_SECONDS = 0.2
_lock = threading.Lock()
_local = threading.local()
_flusher = 0


def _add(name: str, seconds: float) -> None:
    with _lock:
        TOTALS[name] += seconds


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap `fn` so its CPU time (this thread's) adds to TOTALS[name] (outermost call only)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_local, "depth", None)
        if depth is None:
            depth = _local.depth = {}
        if depth.get(name):
            return fn(*args, **kwargs)
        depth[name] = 1
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _add(name, time.thread_time() - started)
            depth[name] = 0

    return wrapper


@signals.worker_init.connect
def _install(**_: Any) -> None:
    """Wrap the content steps in the worker process (a prefork pool's children inherit it)."""
    from worker.fetch import fetcher, politeness
    from worker.retrieval import pipeline
    from worker.retrieval import run as runner
    from worker.store import db

    fetcher.Fetcher.fetch = timed("fetch", fetcher.Fetcher.fetch)  # type: ignore[method-assign]
    fetcher.Fetcher.revalidate = timed("fetch", fetcher.Fetcher.revalidate)  # type: ignore[method-assign]
    politeness.SharedState.call = timed("redis", politeness.SharedState.call)  # type: ignore[method-assign]
    pipeline.extract_html = timed("extract", pipeline.extract_html)
    pipeline.parse_captions = timed("extract", pipeline.parse_captions)
    db.with_transient_retry = timed("db", db.with_transient_retry)
    assert runner.db is db
    _install_archive()


def _install_archive() -> None:
    """The archive's own work (within "db": it runs in the settle's transaction): queuing an
    exchange, and writing the transaction's records as it commits (its look-ups included, not
    the index rows' executemany)."""
    from worker.archive import capture

    capture.archive = timed("archive", capture.archive)  # type: ignore[assignment]
    if hasattr(capture, "write_queued"):  # written at commit (since 13f8792)
        capture.write_queued = timed("archive", capture.write_queued)  # type: ignore[assignment]


@signals.task_prerun.connect
def _before(**_: Any) -> None:
    _local.task_started = time.thread_time()


@signals.task_postrun.connect
def _after(**_: Any) -> None:
    global _flusher
    with _lock:
        TOTALS["task"] += time.thread_time() - _local.task_started
        TOTALS["tasks"] += 1
        if _flusher != os.getpid():  # one per process (a forked child starts its own)
            _flusher = os.getpid()
            threading.Thread(target=_flush_forever, daemon=True).start()


def _flush_forever() -> None:
    last = -1.0
    while True:
        time.sleep(WRITE_EVERY_SECONDS)
        if TOTALS["tasks"] != last:
            last = TOTALS["tasks"]
            _write()


@signals.worker_shutdown.connect
def _write(**_: Any) -> None:
    directory = os.environ.get("BENCH_PROBE_DIR")
    if not directory:
        return
    with _lock:
        data = json.dumps(TOTALS)
    path = Path(directory) / f"probe-{os.getpid()}.json"
    tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
    tmp.write_text(data)
    tmp.replace(path)


def read_totals(directory: Path) -> dict[str, float]:
    """Sum the totals every process wrote."""
    out: dict[str, float] = {}
    for path in directory.glob("probe-*.json"):
        for key, value in json.loads(path.read_text()).items():
            out[key] = out.get(key, 0.0) + value
    return out


if __name__ == "__main__":
    from api.cli.main import app

    app(prog_name="evidence")
