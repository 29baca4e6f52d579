"""`evidence` with CPU probes: where a worker child spends its CPU, per retrieval.

Run exactly like the CLI (`python -m bench.probe worker --concurrency N`). In each prefork
child, after the fork, it wraps the fetch (robots.txt and politeness included; Redis calls also
counted apart), the extraction, and the database transactions with `time.process_time()`,
and each task as a whole; after every task it writes the child's totals to
$BENCH_PROBE_DIR/probe-<pid>.json. Nothing is patched in the parent or in production code.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery import signals

TOTALS: dict[str, float] = {"tasks": 0, "task": 0.0, "fetch": 0.0, "redis": 0.0}
TOTALS |= {"extract": 0.0, "db": 0.0}
_depth: dict[str, int] = {}
_task_started = 0.0


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap `fn` so its CPU time adds to TOTALS[name] (outermost call only)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _depth.get(name):
            return fn(*args, **kwargs)
        _depth[name] = 1
        started = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            TOTALS[name] += time.process_time() - started
            _depth[name] = 0

    return wrapper


@signals.worker_process_init.connect
def _install(**_: Any) -> None:
    """Wrap the content steps in this child (imports them here, after the fork)."""
    from worker.content import pipeline
    from worker.fetch import fetcher, politeness
    from worker.jobs import runner
    from worker.store import db

    fetcher.Fetcher.fetch = timed("fetch", fetcher.Fetcher.fetch)  # type: ignore[method-assign]
    fetcher.Fetcher.revalidate = timed("fetch", fetcher.Fetcher.revalidate)  # type: ignore[method-assign]
    politeness.SharedState.call = timed("redis", politeness.SharedState.call)  # type: ignore[method-assign]
    pipeline.extract_html = timed("extract", pipeline.extract_html)
    pipeline.parse_captions = timed("extract", pipeline.parse_captions)
    db.with_transient_retry = timed("db", db.with_transient_retry)
    assert runner.db is db


@signals.task_prerun.connect
def _before(**_: Any) -> None:
    global _task_started
    _task_started = time.process_time()


@signals.task_postrun.connect
def _after(**_: Any) -> None:
    TOTALS["task"] += time.process_time() - _task_started
    TOTALS["tasks"] += 1
    directory = os.environ.get("BENCH_PROBE_DIR")
    if directory:
        path = Path(directory) / f"probe-{os.getpid()}.json"
        path.with_suffix(".tmp").write_text(json.dumps(TOTALS))
        path.with_suffix(".tmp").replace(path)


def read_totals(directory: Path) -> dict[str, float]:
    """Sum the totals every child wrote."""
    out: dict[str, float] = {}
    for path in directory.glob("probe-*.json"):
        for key, value in json.loads(path.read_text()).items():
            out[key] = out.get(key, 0.0) + value
    return out


if __name__ == "__main__":
    from api.cli import app

    app(prog_name="evidence")
