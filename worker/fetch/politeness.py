"""Politeness shared by all workers through Redis: per-host back-off and concurrency slots.

After a 429 from a host, every worker answers `rate_limited` for that host until its
Retry-After passes, without fetching. At most `per_host_limit` fetches of one host run at
once across all workers. Redis trouble never fails a fetch: the layer degrades open (logs,
then fetches anyway) and stops asking Redis for a short while.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
import structlog

from worker.domain.reasons import Reason
from worker.fetch.types import FetchFailure
from worker.platform import redis_clients
from worker.platform.ranked_gate import RankedGate
from worker.platform.settings import DEFAULT_FETCH_PER_HOST_LIMIT

log = structlog.get_logger(__name__)

#: How long a slot survives a crashed holder, in seconds.
DEFAULT_SLOT_LEASE_SECONDS = 120.0
#: Poll interval while waiting for a slot, in seconds.
SLOT_POLL_SECONDS = 0.05
#: Retry-After given when no slot freed up in time, in seconds.
SLOT_RETRY_AFTER_SECONDS = 5
#: After a Redis error, Redis is left alone for this long, in seconds.
REDIS_QUIET_SECONDS = 5.0
#: Socket timeouts for Redis calls, in seconds (politeness must never stall a fetch).

#: A slot of KEYS[1] for token ARGV[1] (at most ARGV[2] held, each for ARGV[3] ms): 1 taken,
#: 0 all held; while the origin backs off (KEYS[2] alive), minus the milliseconds left.
_ACQUIRE = """
local backoff = redis.call('PTTL', KEYS[2])
if backoff > 0 then
  return -backoff
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[3]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
  return 1
end
return 0
"""


class SharedState:
    """Redis access that degrades open: every call returns a fallback instead of raising."""

    def __init__(self, url: str, *, prefix: str = "evidence:", client: Any = None) -> None:
        self.prefix = prefix
        #: A client passed in belongs to the caller; one made here is closed by `close`.
        self._owns_client = client is None
        self.client = client or redis_clients.connect(url)
        self._quiet_until = 0.0

    def close(self) -> None:
        """Disconnect the Redis client made here (a client passed in is left to its owner)."""
        if self._owns_client:
            self.client.close()

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def script(self, source: str) -> Any:
        """A Lua script run by its SHA (EVALSHA; loaded again when Redis forgot it): run it
        with `run`."""
        return self.client.register_script(source)

    def call(self, fallback: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        """`client.method(*args)`, or `fallback` if Redis is failing (logged, then skipped)."""
        return self._guarded(
            fallback, method, lambda: getattr(self.client, method)(*args, **kwargs)
        )

    def run(self, fallback: Any, script: Any, keys: list[str], args: list[Any]) -> Any:
        """Run a `script`, or `fallback` if Redis is failing, as `call` does."""
        return self._guarded(fallback, "evalsha", lambda: script(keys=keys, args=args))

    def _guarded(self, fallback: Any, method: str, ask: Callable[[], Any]) -> Any:
        if time.monotonic() < self._quiet_until:
            return fallback
        try:
            return ask()
        except (redis.RedisError, OSError) as exc:
            self._quiet_until = time.monotonic() + REDIS_QUIET_SECONDS
            log.warning("politeness_redis_unavailable", method=method, error=str(exc))
            return fallback


class LocalGate:
    """This process's share of the per-host limit: its fetches of one host queue here.

    A worker keeps hundreds of retrievals in flight; without this, every one waiting for a busy
    host would poll Redis 20 times a second. Waiting at a gate costs nothing, and only the
    fetches that hold one of the process's `limit` permits for a host ask Redis for a slot.
    The gate admits interactive work first (`worker.platform.ranked_gate`): an agent's single fetch
    of a host that a batch keeps busy takes the next permit. Gates exist only while someone holds
    or waits for them.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._gates: dict[str, tuple[RankedGate, int]] = {}

    @contextmanager
    def hold(self, origin: str, wait_seconds: float) -> Iterator[bool]:
        """Yield whether one of `origin`'s permits was had within `wait_seconds`."""
        with self._lock:
            gate, users = self._gates.get(origin) or (RankedGate(self.limit), 0)
            self._gates[origin] = (gate, users + 1)
        acquired = gate.acquire(max(0.0, wait_seconds))
        try:
            yield acquired
        finally:
            if acquired:
                gate.release()
            with self._lock:
                gate, users = self._gates[origin]
                if users == 1:
                    del self._gates[origin]
                else:
                    self._gates[origin] = (gate, users - 1)


class Politeness:
    """Per-host back-off after 429 and a fleet-wide per-host concurrency limit."""

    def __init__(
        self,
        state: SharedState,
        *,
        per_host_limit: int = DEFAULT_FETCH_PER_HOST_LIMIT,
        slot_lease_seconds: float = DEFAULT_SLOT_LEASE_SECONDS,
    ) -> None:
        self.state = state
        self.per_host_limit = per_host_limit
        self.slot_lease_ms = int(slot_lease_seconds * 1000)
        self.local = LocalGate(per_host_limit)
        self._acquire_script = state.script(_ACQUIRE)

    def backoff_remaining(self, origin: str) -> int | None:
        """Whole seconds left of a back-off on `origin` (None when there is none)."""
        pttl = self.state.call(-2, "pttl", self.state.key("backoff", origin))
        if not isinstance(pttl, int) or pttl <= 0:
            return None
        return max(1, math.ceil(pttl / 1000))

    def check_backoff(self, origin: str, url: str) -> None:
        """Raise rate_limited, without fetching, while `origin` is backing off (`slot` checks
        it too: this is for a request that does not take a slot first, robots.txt's)."""
        seconds = self.backoff_remaining(origin)
        if seconds is not None:
            raise _backing_off(seconds)

    def record_backoff(self, origin: str, seconds: int) -> None:
        """Make every worker leave `origin` alone for `seconds` (never shortens a longer one)."""
        key = self.state.key("backoff", origin)
        current = self.backoff_remaining(origin) or 0
        if seconds > current:
            self.state.call(None, "set", key, str(seconds), px=seconds * 1000)

    def _acquire(self, origin: str, token: str) -> bool:
        """Take one of `origin`'s slots; False when all are held; rate_limited while the
        origin backs off: one round trip for both questions."""
        keys = [self.state.key("slots", origin), self.state.key("backoff", origin)]
        argv = [token, self.per_host_limit, self.slot_lease_ms]
        result = self.state.run(True, self._acquire_script, keys, argv)
        if isinstance(result, int) and result < 0:
            raise _backing_off(max(1, math.ceil(-result / 1000)))
        return bool(result)

    @contextmanager
    def slot(self, origin: str, wait_seconds: float) -> Iterator[None]:
        """Hold one of `origin`'s slots; wait up to `wait_seconds`, then rate_limited (at once,
        without fetching, while the origin backs off after a 429)."""
        give_up = time.monotonic() + max(0.0, wait_seconds)
        with self.local.hold(origin, wait_seconds) as acquired:
            if not acquired:
                raise self._busy()
            with self._fleet_slot(origin, give_up):
                yield

    def _busy(self) -> FetchFailure:
        return FetchFailure(
            Reason.RATE_LIMITED,
            f"{self.per_host_limit} fetches of this host already running",
            retry_after_seconds=SLOT_RETRY_AFTER_SECONDS,
        )

    @contextmanager
    def _fleet_slot(self, origin: str, give_up: float) -> Iterator[None]:
        """Hold one of `origin`'s slots in Redis, shared by every worker process."""
        key = self.state.key("slots", origin)
        token = uuid.uuid4().hex
        while not self._acquire(origin, token):
            if time.monotonic() >= give_up:
                raise self._busy()
            time.sleep(SLOT_POLL_SECONDS)
        try:
            yield
        finally:
            self.state.call(None, "zrem", key, token)


def _backing_off(seconds: int) -> FetchFailure:
    return FetchFailure(
        Reason.RATE_LIMITED,
        f"host is backing off after 429 ({seconds}s left)",
        None,
        retry_after_seconds=seconds,
    )
