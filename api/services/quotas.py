"""Per-workspace quotas: a write-rate token bucket in Redis, and the open-retrievals ceiling.

* **Write rate.** Each new retrieval (a single POST, an MCP call, a batch item) takes one token
  from its workspace's bucket: `rate` tokens a second, at most `burst` held. A replay of a
  known mutation_id (how clients poll) creates nothing and costs nothing: its token is given
  back, and it is answered even when the bucket is empty. The bucket lives in Redis (one Lua
  call, atomic), so it holds across API processes and machines. When Redis cannot be asked,
  the limit degrades open: the request goes on (logged as `rate_limit_unavailable`, then Redis
  is left alone for a few seconds); the open ceiling, in the database, still holds.
* **Open ceiling.** Decided in the database, in the creating transaction
  (`worker.store.retrievals.create_within_quota`), where the count is true.
* **Limits.** The settings' defaults (`EVIDENCE_QUOTA_*`) with the workspace's overrides from
  `evidence quotas set`, cached here for `OVERRIDE_CACHE_SECONDS`.

Over a limit the answer is 429 `rate_limited` with `Retry-After` (the whole request, or that
item of a batch); nothing already accepted is touched.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, TypeVar

import redis
import structlog

from api.errors import ApiError
from worker.settings import get_settings
from worker.store import db
from worker.store import quotas as quota_store

log = structlog.get_logger(__name__)
T = TypeVar("T")

#: How long a workspace's overrides are reused before the database is asked again (so
#: `evidence quotas set` takes effect within this many seconds).
OVERRIDE_CACHE_SECONDS = 5.0
OVERRIDE_CACHE_SIZE = 4096
#: Retry-After of a refusal at the open ceiling: room comes back as retrievals settle, which the
#: API cannot foresee; a few seconds keeps a waiting client's polls cheap.
CEILING_RETRY_AFTER_SECONDS = 5
#: Longest Retry-After the rate limit advises (a refused batch of burst size waits its share).
MAX_RATE_RETRY_AFTER_SECONDS = 60
REDIS_TIMEOUT_SECONDS = 0.5
REDIS_QUIET_SECONDS = 5.0
BUCKET_PREFIX = "evidence:quota:bucket:"

#: Take up to ARGV[3] tokens from the bucket KEYS[1] (rate ARGV[1]/s, size ARGV[2]), refilled
#: by Redis' own clock. Returns {granted, seconds until the refused part could be granted}.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(state[1]), tonumber(state[2])
if tokens == nil or ts == nil then tokens, ts = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local granted = math.min(want, math.floor(tokens))
tokens = tokens - granted
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
local wait = 0
if granted < want then
  wait = (math.min(want - granted, burst) - tokens) / rate
end
return {granted, tostring(wait)}
"""


#: Put back ARGV[3] tokens taken for retrievals that turned out to be replays.
_REFUND = """
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens'))
if tokens ~= nil then
  local refilled = math.min(tonumber(ARGV[2]), tokens + tonumber(ARGV[3]))
  redis.call('HSET', KEYS[1], 'tokens', tostring(refilled))
end
return 0
"""


@dataclass(frozen=True)
class Limits:
    """One workspace's quotas, defaults and overrides resolved."""

    open_retrievals: int
    write_rate: float
    write_burst: int


@dataclass(frozen=True)
class Grant:
    """What the token bucket allowed of a request for `wanted` submissions."""

    granted: int
    retry_after: int | None  # seconds, when some were refused


def rate_limited(message: str, retry_after: int) -> ApiError:
    """The contract's 429: code `rate_limited`, with `Retry-After`."""
    return ApiError(
        429,
        "rate_limited",
        message,
        details={"retry_after_seconds": retry_after},
        retry_after=retry_after,
    )


def over_ceiling(limits: Limits) -> ApiError:
    return rate_limited(
        f"this workspace has {limits.open_retrievals} open retrievals, its limit; "
        "retry once some have settled",
        CEILING_RETRY_AFTER_SECONDS,
    )


def over_rate(limits: Limits, retry_after: int) -> ApiError:
    return rate_limited(
        f"this workspace may submit {limits.write_rate:g} retrievals per second "
        f"(bursts of {limits.write_burst}); retry after {retry_after} s",
        retry_after,
    )


def retry_seconds(wait: float) -> int:
    """Whole seconds to advise for a wait of `wait` seconds (at least 1, capped)."""
    return min(MAX_RATE_RETRY_AFTER_SECONDS, max(1, math.ceil(wait)))


class _Overrides:
    """Workspace overrides read from the database, each reused for OVERRIDE_CACHE_SECONDS."""

    def __init__(self) -> None:
        self._entries: dict[uuid.UUID, tuple[float, quota_store.Override | None]] = {}
        self._lock = threading.Lock()

    def get(self, workspace_id: uuid.UUID) -> quota_store.Override | None:
        entry = self._entries.get(workspace_id)
        if entry is not None and entry[0] > time.monotonic():
            return entry[1]
        with db.session_scope(readonly=True) as session:
            override = quota_store.get_override(session, workspace_id)
        with self._lock:
            if len(self._entries) >= OVERRIDE_CACHE_SIZE:
                self._entries.clear()
            self._entries[workspace_id] = (time.monotonic() + OVERRIDE_CACHE_SECONDS, override)
        return override

    def clear(self) -> None:
        self._entries.clear()


overrides = _Overrides()


def limits_for(workspace_id: uuid.UUID) -> Limits:
    """The workspace's quotas: its overrides over the settings' defaults."""
    settings = get_settings()
    override = overrides.get(workspace_id)
    if override is None:
        return Limits(
            settings.quota_open_retrievals, settings.quota_write_rate, settings.quota_write_burst
        )
    return Limits(
        _or(override.open_retrievals, settings.quota_open_retrievals),
        _or(override.write_rate, settings.quota_write_rate),
        _or(override.write_burst, settings.quota_write_burst),
    )


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


class RateLimiter:
    """Token buckets in Redis, one per workspace; degrades open when Redis cannot be asked."""

    def __init__(self) -> None:
        self._client: tuple[int, str, redis.Redis] | None = None
        self._scripts: dict[str, Any] = {}
        self._quiet_until = 0.0

    def _redis(self) -> redis.Redis:
        url = get_settings().politeness_redis_url
        if self._client is None or self._client[:2] != (os.getpid(), url):
            client = redis.Redis.from_url(
                url,
                socket_timeout=REDIS_TIMEOUT_SECONDS,
                socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            )
            self._client = (os.getpid(), url, client)
            self._scripts = {
                "take": client.register_script(_TAKE),
                "refund": client.register_script(_REFUND),
            }
        return self._client[2]

    def _run(self, script: str, workspace_id: uuid.UUID, limits: Limits, n: int) -> Any:
        """Run a bucket script; None when Redis cannot be asked (then left alone a while)."""
        if time.monotonic() < self._quiet_until:
            return None
        try:
            self._redis()
            return self._scripts[script](
                keys=[f"{BUCKET_PREFIX}{workspace_id}"],
                args=[limits.write_rate, limits.write_burst, n],
            )
        except (redis.RedisError, OSError) as exc:
            self._quiet_until = time.monotonic() + REDIS_QUIET_SECONDS
            log.warning("rate_limit_unavailable", error=type(exc).__name__, degraded="open")
            return None

    def take(self, workspace_id: uuid.UUID, wanted: int, limits: Limits) -> Grant:
        """Take up to `wanted` tokens from the workspace's bucket (all of them if Redis is down)."""
        if wanted <= 0:
            return Grant(0, None)
        answer = self._run("take", workspace_id, limits, wanted)
        if answer is None:
            return Grant(wanted, None)
        granted, wait = int(answer[0]), float(answer[1])
        return Grant(granted, None if granted >= wanted else retry_seconds(wait))

    def refund(self, workspace_id: uuid.UUID, unused: int, limits: Limits) -> None:
        """Give back tokens taken for submissions that created nothing (replays, refusals)."""
        if unused > 0:
            self._run("refund", workspace_id, limits, unused)

    def reset(self) -> None:
        """Forget the client and any quiet period (tests that move Redis)."""
        self._client, self._scripts, self._quiet_until = None, {}, 0.0


limiter = RateLimiter()
