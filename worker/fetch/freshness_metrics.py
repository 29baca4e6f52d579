"""How retrievals stayed fresh, counted in Redis for the fleet (as `fleet_metrics` counts fetches).

Each settled retrieval with content adds one to `outcome|kind`: `revalidated` (every URL
answered 304), `reused` (within the client's `max-age`, no fetch), `new_revision` (a full fetch
whose content was new), `unchanged` (a full fetch whose content matched a stored revision).
The API's `/metrics` renders them as `evidence_freshness_outcomes_total`.
"""

from __future__ import annotations

import time
from typing import cast

import redis
import structlog

from worker.fetch import fleet_metrics

log = structlog.get_logger(__name__)

#: The Redis hash holding the counters.
METRICS_KEY = "evidence:metrics:freshness"
OUTCOMES = ("revalidated", "reused", "new_revision", "unchanged")

_quiet_until = 0.0


def record(outcome: str, kind: str) -> None:
    """Count one retrieval's freshness `outcome`; Redis trouble is logged, never raised."""
    global _quiet_until
    if time.monotonic() < _quiet_until:
        return
    try:
        fleet_metrics.redis_client().hincrby(METRICS_KEY, f"{outcome}|{kind}", 1)
    except (redis.RedisError, OSError) as exc:
        _quiet_until = time.monotonic() + fleet_metrics.QUIET_SECONDS
        log.warning("metrics_redis_unavailable", error=type(exc).__name__)


def read() -> dict[tuple[str, str], int] | None:
    """Counts by (outcome, kind), or None when Redis cannot be read now."""
    try:
        raw = cast(
            "dict[bytes | str, bytes | str]",
            fleet_metrics.redis_client().hgetall(METRICS_KEY),
        )
    except (redis.RedisError, OSError):
        return None
    counts: dict[tuple[str, str], int] = {}
    for key, value in raw.items():
        text = key.decode() if isinstance(key, bytes) else key
        outcome, _, kind = text.partition("|")
        if outcome in OUTCOMES and kind:
            counts[(outcome, kind)] = int(value)
    return counts
