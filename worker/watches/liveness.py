"""The scheduler's liveness: when the last tick finished, kept in the shared-state Redis.

A scheduler that stopped is the failure watches must not hide (the issue's 134 watches left
unchecked for 23 days): every finished tick records its time here, and `/metrics` and `/readyz`
show its age. Redis, not the database: the API reads it on every scrape and probe.
"""

from __future__ import annotations

import contextlib
from typing import Any

import redis

from worker.platform import redis_clients

#: The key holding the last finished tick, as Unix seconds.
TICK_KEY = "evidence:watches:last_tick"


def record_tick(at_unix: float) -> None:
    """Note a finished tick (best effort: a Redis hiccup shows as an older tick, not an error)."""
    with contextlib.suppress(redis.RedisError):
        redis_clients.shared().set(TICK_KEY, repr(at_unix))


def last_tick() -> float | None:
    """The last finished tick's Unix time; None if none was recorded or Redis does not answer."""
    try:
        value: Any = redis_clients.shared().get(TICK_KEY)
    except redis.RedisError:
        return None
    return None if value is None else float(value)
