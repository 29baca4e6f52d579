"""Fetch metrics recorded by workers into Redis, so one scrape of the API sees the whole fleet.

Fetches run in prefork children on any number of machines. Instead of an exporter per child
(prometheus-client's multiprocess mode) or per machine, each fetch adds its duration and body
size to bucket counters in one Redis hash (one pipelined round trip). The API's `/metrics`
reads that hash at scrape time and renders it as two Prometheus histograms. The counters only
grow; a Redis restart resets them, which Prometheus' `rate()` treats like a process restart.
Metrics never fail a fetch: Redis trouble is swallowed, then Redis is left alone for a while.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, cast

import redis
import structlog

from worker.fetch.types import FetchedResponse, FetchFailure
from worker.platform import redis_clients
from worker.platform.fleet_counts import QUIET_SECONDS, Histogram, bucket_index

log = structlog.get_logger(__name__)

#: The Redis hash holding every fetch bucket counter.
METRICS_KEY = "evidence:metrics:fetch"
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BYTES_BUCKETS = (1_024, 8_192, 32_768, 131_072, 524_288, 1_048_576, 2_097_152, 5_242_880)
HISTOGRAMS = {"duration": DURATION_BUCKETS, "bytes": BYTES_BUCKETS}

_quiet_until = 0.0


def record_fetch(outcome: str, seconds: float, nbytes: int) -> None:
    """Count one fetch: `outcome` is `ok`, `truncated` or the failure's reason."""
    global _quiet_until
    if time.monotonic() < _quiet_until:
        return
    try:
        pipe = redis_clients.shared().pipeline(transaction=False)
        for name, value in (("duration", seconds), ("bytes", float(nbytes))):
            index = bucket_index(HISTOGRAMS[name], value)
            pipe.hincrby(METRICS_KEY, f"{name}|{outcome}|b{index}", 1)
            pipe.hincrbyfloat(METRICS_KEY, f"{name}|{outcome}|sum", value)
        pipe.execute()
    except (redis.RedisError, OSError) as exc:
        _quiet_until = time.monotonic() + QUIET_SECONDS
        log.warning("metrics_redis_unavailable", error=type(exc).__name__)


class MeteredFetcher:
    """Wrap a fetcher so each fetch (with its politeness waits) is timed and sized."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def fetch(self, url: str) -> FetchedResponse:
        """Fetch through the wrapped fetcher and record the outcome."""
        start = time.perf_counter()
        try:
            response: FetchedResponse = self.inner.fetch(url)
        except FetchFailure as failure:
            record_fetch(failure.reason.value, time.perf_counter() - start, 0)
            raise
        except BaseException:
            record_fetch("interrupted", time.perf_counter() - start, 0)
            raise
        outcome = "truncated" if response.truncated else "ok"
        record_fetch(outcome, time.perf_counter() - start, len(response.body))
        return response


@dataclass
class FetchStats:
    """Everything the hash holds, by histogram name then outcome."""

    histograms: dict[str, dict[str, Histogram]] = field(default_factory=dict)


def parse_stats(raw: dict[bytes | str, bytes | str]) -> FetchStats:
    """Turn the hash's fields (`name|outcome|bN` or `name|outcome|sum`) into histograms."""
    by_name: dict[str, dict[str, Histogram]] = defaultdict(dict)
    for key, value in raw.items():
        text = key.decode() if isinstance(key, bytes) else key
        parts = text.split("|")
        if len(parts) != 3 or parts[0] not in HISTOGRAMS:
            continue
        name, outcome, slot = parts
        size = len(HISTOGRAMS[name]) + 1
        histogram = by_name[name].setdefault(outcome, Histogram([0] * size))
        number = float(value)
        if slot == "sum":
            histogram.total = number
        elif slot.startswith("b") and slot[1:].isdigit() and int(slot[1:]) < size:
            histogram.counts[int(slot[1:])] = int(number)
    return FetchStats(dict(by_name))


def read_stats() -> FetchStats | None:
    """The fleet's fetch histograms, or None when Redis cannot be read now."""
    try:
        # redis-py types its commands for the sync and async clients at once; this one is sync.
        return parse_stats(
            cast("dict[bytes | str, bytes | str]", redis_clients.shared().hgetall(METRICS_KEY))
        )
    except (redis.RedisError, OSError):
        return None
