"""Counters of the whole fleet, kept in Redis so that one scrape of the API sees every worker.

Workers count what they did (fetches, confined failures, freshness outcomes, webhook attempts)
into Redis hashes; the API's `/metrics` reads them at scrape time. Counting never fails the work
it counts: Redis trouble is logged, then Redis is left alone for QUIET_SECONDS.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import redis
import structlog

from worker.platform import redis_clients

log = structlog.get_logger(__name__)

#: How long counting leaves Redis alone after it failed once.
QUIET_SECONDS = 10.0


def bucket_index(buckets: tuple[float, ...], value: float) -> int:
    """Index of the first bucket whose upper bound holds `value` (len(buckets) for +Inf)."""
    for index, bound in enumerate(buckets):
        if value <= bound:
            return index
    return len(buckets)


@dataclass
class Histogram:
    """One outcome's bucket counts (not cumulative) and sum."""

    counts: list[int]
    total: float = 0.0

    def cumulative(self, buckets: tuple[float, ...]) -> list[tuple[str, float]]:
        """Prometheus buckets: (upper bound, cumulative count), ending with +Inf."""
        running, out = 0, []
        for bound, count in zip((*map(str, buckets), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


class PairCounts:
    """Counters of the fleet keyed by a pair of labels (`first|second`), in one Redis hash.

    `add` never raises: Redis trouble is logged, then Redis is left alone for QUIET_SECONDS.
    """

    def __init__(self, key: str, valid: Callable[[str, str], bool]) -> None:
        self.key, self.valid = key, valid
        self._quiet_until = 0.0

    def add(self, first: str, second: str) -> None:
        if time.monotonic() < self._quiet_until:
            return
        try:
            redis_clients.shared().hincrby(self.key, f"{first}|{second}", 1)
        except (redis.RedisError, OSError) as exc:
            self._quiet_until = time.monotonic() + QUIET_SECONDS
            log.warning("metrics_redis_unavailable", error=type(exc).__name__)

    def read(self) -> dict[tuple[str, str], int] | None:
        """The counts by pair (only pairs `valid` accepts), or None when Redis cannot be read."""
        try:
            raw = cast("dict[bytes | str, bytes | str]", redis_clients.shared().hgetall(self.key))
        except (redis.RedisError, OSError):
            return None
        counts: dict[tuple[str, str], int] = {}
        for name, value in raw.items():
            text = name.decode() if isinstance(name, bytes) else name
            first, _, second = text.partition("|")
            if self.valid(first, second):
                counts[(first, second)] = int(value)
        return counts
