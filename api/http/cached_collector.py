"""A Prometheus collector that reads its families at most once per `cache_seconds`: fleet-wide
numbers come from the database or Redis, and a scrape every few seconds must not cost a query
each time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector


class CachedCollector(Collector):
    """Subclasses say what to read in `_read`; `collect` serves it, read anew when stale."""

    def __init__(self, cache_seconds: float) -> None:
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self.cache_seconds:
                self._cached = (now, list(self._read()))
            families = self._cached[1]
        yield from families

    def _read(self) -> Iterator[Metric]:
        raise NotImplementedError
