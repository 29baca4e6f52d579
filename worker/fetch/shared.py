"""The process's fetcher: one connection pool, politeness gate and robots memo per process.

A worker's hundreds of threads, and an API process fetching images, each share one; it is made
on first use, dropped without closing after a fork (its sockets are the parent's), and closed
when the process stops serving.
"""

from __future__ import annotations

import threading

from worker.fetch.fetcher import Fetcher
from worker.platform.settings import get_settings

_fetcher: Fetcher | None = None
_fetcher_lock = threading.Lock()


def get_fetcher() -> Fetcher:
    """The process's fetcher (one connection pool, politeness gate and robots memo per worker
    process: hundreds of threads start at once, and must all get the same one)."""
    global _fetcher
    with _fetcher_lock:
        if _fetcher is None:
            _fetcher = Fetcher(get_settings())
        return _fetcher


def reset_fetcher() -> None:
    """Drop the fetcher without closing it: after a fork its sockets are the parent's."""
    global _fetcher
    _fetcher = None


def close_fetcher() -> None:
    """Close the process's fetcher (its pooled connections and Redis client), if it made one.

    Called when the process stops serving; a later `get_fetcher` makes a fresh one.
    """
    global _fetcher
    fetcher, _fetcher = _fetcher, None
    if fetcher is not None:
        fetcher.close()
