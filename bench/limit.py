"""The limit: trafilatura extraction alone, pages already in memory, one process per core."""

from __future__ import annotations

import multiprocessing
import os
import time

import trafilatura

from bench.pages import render
from worker.content.html import EXTRACT_OPTIONS

#: The service's own trafilatura options (precision, tables, no comments, no fallbacks).
OPTIONS = EXTRACT_OPTIONS
_PAGES: list[tuple[str, bytes]] = []


def _load(count: int, seed: int) -> None:
    """Pool initialiser: render the pages in this process (not timed)."""
    _PAGES.extend((f"https://127.0.0.1{p.path}", p.body) for p in map(render, range(count)))
    del seed


def _extract(index: int) -> int:
    url, body = _PAGES[index]
    return len(trafilatura.extract(body, url=url, **OPTIONS) or "")


def _ready(_: int) -> int:
    time.sleep(0.2)  # let every process pick one up, so each has rendered its pages
    return _extract(0)


def measure(pages: int, seed: int = 1, processes: int | None = None) -> tuple[float, float]:
    """Extract every page once across the pool: (retrievals per second, CPU seconds per page)."""
    processes = processes or os.cpu_count() or 1
    context = multiprocessing.get_context("fork")
    with context.Pool(processes, initializer=_load, initargs=(pages, seed)) as pool:
        pool.map(_ready, range(processes), chunksize=1)
        cpu_before = _children_cpu(pool)
        started = time.perf_counter()
        chars = pool.map(_extract, range(pages), chunksize=4)
        seconds = time.perf_counter() - started
        cpu = _children_cpu(pool) - cpu_before
    assert all(chars), "every page must yield text"
    return pages / seconds, cpu / pages


def _children_cpu(pool: multiprocessing.pool.Pool) -> float:
    from bench.procstat import cpu_seconds

    return sum(cpu_seconds(worker.pid) for worker in pool._pool)  # type: ignore[attr-defined]
