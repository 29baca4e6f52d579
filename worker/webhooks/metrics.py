"""Webhook attempt metrics, recorded by workers into Redis like the fetch metrics.

Each attempt adds its duration to a bucket counter of one Redis hash, by outcome (`delivered`,
`http_4xx`, `http_5xx`, `redirect`, `timeout`, `refused`, `error`); the API's `/metrics` renders
it as `evidence_webhook_attempt_duration_seconds` (its `_count` is the attempt counter).
Metrics never fail a delivery: Redis trouble is swallowed, then Redis is left alone a while.
"""

from __future__ import annotations

import time
from typing import cast

import redis
import structlog

from worker.platform import fleet_counts, redis_clients

log = structlog.get_logger(__name__)

METRICS_KEY = "evidence:metrics:webhook"
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
QUIET_SECONDS = 10.0

_quiet_until = 0.0


def record_attempt(outcome: str, seconds: float) -> None:
    """Count one attempt and its duration."""
    global _quiet_until
    if time.monotonic() < _quiet_until:
        return
    try:
        pipe = redis_clients.shared().pipeline(transaction=False)
        index = fleet_counts.bucket_index(DURATION_BUCKETS, seconds)
        pipe.hincrby(METRICS_KEY, f"{outcome}|b{index}", 1)
        pipe.hincrbyfloat(METRICS_KEY, f"{outcome}|sum", seconds)
        pipe.execute()
    except (redis.RedisError, OSError) as exc:
        _quiet_until = time.monotonic() + QUIET_SECONDS
        log.warning("metrics_redis_unavailable", error=type(exc).__name__)


def parse(raw: dict[bytes | str, bytes | str]) -> dict[str, fleet_counts.Histogram]:
    """The hash's fields (`outcome|bN`, `outcome|sum`) as one histogram per outcome."""
    size = len(DURATION_BUCKETS) + 1
    out: dict[str, fleet_counts.Histogram] = {}
    for key, value in raw.items():
        text = key.decode() if isinstance(key, bytes) else key
        outcome, _, slot = text.partition("|")
        histogram = out.setdefault(outcome, fleet_counts.Histogram([0] * size))
        if slot == "sum":
            histogram.total = float(value)
        elif slot.startswith("b") and slot[1:].isdigit() and int(slot[1:]) < size:
            histogram.counts[int(slot[1:])] = int(float(value))
    return out


def read() -> dict[str, fleet_counts.Histogram] | None:
    """Every outcome's histogram, or None when Redis cannot be read now."""
    try:
        raw = redis_clients.shared().hgetall(METRICS_KEY)
    except (redis.RedisError, OSError):
        return None
    return parse(cast("dict[bytes | str, bytes | str]", raw))
