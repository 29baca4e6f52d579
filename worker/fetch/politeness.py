"""Politeness shared by all workers through Redis: per-host back-off and concurrency slots.

After a 429 from a host, every worker answers `rate_limited` for that host until its
Retry-After passes, without fetching. At most `per_host_limit` fetches of one host run at
once across all workers. Redis trouble never fails a fetch: the layer degrades open (logs,
then fetches anyway) and stops asking Redis for a short while.

A host's slots are shared between the workspaces waiting for it, not first come, first
served: when one frees, it goes to the waiting workspace that holds fewest of that host's
slots (interactive work first, then the one served longest ago), decided in Redis across
every worker process. A workspace that queued a hundred slow URLs of one host does not make
another workspace's fetch of that host wait for them: it waits for one slot's turn. An
uncontended host costs what it did: one round trip to take a slot, one to give it back.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import redis
import structlog

from worker.domain.reasons import Reason
from worker.fetch.types import FetchFailure
from worker.platform import redis_clients
from worker.platform.ranked_gate import RankedGate, current_rank
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

#: How long a waiter's place in a host's queue lasts without a poll, in milliseconds (a
#: waiter polls every SLOT_POLL_SECONDS; one that died leaves the queue this soon).
WAITER_TTL_MS = 1_000

#: The workspace whose work this thread fetches for (the runner sets it per retrieval; ""
#: for work of no workspace). Slots are shared fairly between workspaces by it.
current_workspace: ContextVar[str] = ContextVar("current_workspace", default="")


@contextmanager
def for_workspace(workspace: str) -> Iterator[None]:
    """Fetch inside for `workspace` (its turn at a busy host's slots is its own)."""
    token = current_workspace.set(workspace)
    try:
        yield
    finally:
        current_workspace.reset(token)


#: Take a slot of KEYS[1] (holders `workspace|token`, at most ARGV[3], each for ARGV[4] ms) for
#: workspace ARGV[1], token ARGV[2], rank ARGV[5]: 1 taken, 0 not (it then waits in KEYS[3],
#: members `rank|workspace|token` living ARGV[6] ms); while the origin backs off (KEYS[2]
#: alive), minus the milliseconds left. A free slot goes to the waiter with the best (rank,
#: slots its workspace holds, when its workspace was last served (KEYS[4], a sequence kept
#: in its field `#`; none = never):
#: the taker must have no waiter strictly better than itself. No waiters: one ZCARD, as before.
_ACQUIRE = """
local backoff = redis.call('PTTL', KEYS[2])
if backoff > 0 then
  return -backoff
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ws, rank, lease = ARGV[1], tonumber(ARGV[5]), tonumber(ARGV[4])
local me = ARGV[5] .. '|' .. ws .. '|' .. ARGV[2]
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ms)
local take = redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3])
if take and redis.call('ZCARD', KEYS[3]) > 0 then
  local held = {}
  for _, holder in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local w = string.sub(holder, 1, string.find(holder, '|', 1, true) - 1)
    held[w] = (held[w] or 0) + 1
  end
  local function served(w)
    return tonumber(redis.call('HGET', KEYS[4], w) or '0')
  end
  local mine_held, mine_served = held[ws] or 0, served(ws)
  for _, waiter in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local r, w = string.match(waiter, '^(%d+)|([^|]*)|')
    r = tonumber(r)
    if w ~= ws and (r < rank or (r == rank and ((held[w] or 0) < mine_held or
        ((held[w] or 0) == mine_held and served(w) < mine_served)))) then
      take = false
      break
    end
  end
end
if take then
  redis.call('ZADD', KEYS[1], ms + lease, ws .. '|' .. ARGV[2])
  redis.call('PEXPIRE', KEYS[1], lease)
  redis.call('ZREM', KEYS[3], me)
  redis.call('HSET', KEYS[4], ws, redis.call('HINCRBY', KEYS[4], '#', 1))
  redis.call('PEXPIRE', KEYS[4], lease)
  return 1
end
redis.call('ZADD', KEYS[3], ms + tonumber(ARGV[6]), me)
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[6]))
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
    """This process's share of the per-host limit: its fetches of one host queue here, each
    workspace's apart.

    A worker keeps hundreds of retrievals in flight; without this, every one waiting for a busy
    host would poll Redis 20 times a second. Waiting at a gate costs nothing, and only the
    fetches that hold one of the process's `limit` permits for a (host, workspace) ask Redis
    for a slot. A gate per workspace, because one gate per host made another workspace's fetch
    queue behind every fetch the first had queued before it reached Redis, where the turns are
    shared fairly. The gate admits interactive work first (`worker.platform.ranked_gate`): an
    agent's single fetch of a host that a batch keeps busy takes the next permit. Gates exist
    only while someone holds or waits for them.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._gates: dict[tuple[str, str], tuple[RankedGate, int]] = {}

    @contextmanager
    def hold(self, origin: str, wait_seconds: float, workspace: str = "") -> Iterator[bool]:
        """Yield whether one of `origin`'s permits for `workspace` was had within
        `wait_seconds`."""
        key = (origin, workspace)
        with self._lock:
            gate, users = self._gates.get(key) or (RankedGate(self.limit), 0)
            self._gates[key] = (gate, users + 1)
        acquired = gate.acquire(max(0.0, wait_seconds))
        try:
            yield acquired
        finally:
            if acquired:
                gate.release()
            with self._lock:
                gate, users = self._gates[key]
                if users == 1:
                    del self._gates[key]
                else:
                    self._gates[key] = (gate, users - 1)


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

    def _keys(self, origin: str) -> list[str]:
        return [
            self.state.key("slots", origin),
            self.state.key("backoff", origin),
            self.state.key("waiting", origin),
            self.state.key("served", origin),
        ]

    def _acquire(
        self, origin: str, token: str, workspace: str = "", rank: int | None = None
    ) -> bool:
        """Take one of `origin`'s slots for `workspace`; False when all are held or another
        workspace's waiter has the better claim to the free one (this one then waits in line);
        rate_limited while the origin backs off: one round trip for all three questions."""
        rank = current_rank.get() if rank is None else rank
        argv = [workspace, token, self.per_host_limit, self.slot_lease_ms, rank, WAITER_TTL_MS]
        result = self.state.run(True, self._acquire_script, self._keys(origin), argv)
        if isinstance(result, int) and result < 0:
            raise _backing_off(max(1, math.ceil(-result / 1000)))
        return bool(result)

    @contextmanager
    def slot(self, origin: str, wait_seconds: float) -> Iterator[None]:
        """Hold one of `origin`'s slots; wait up to `wait_seconds`, then rate_limited (at once,
        without fetching, while the origin backs off after a 429). The thread's
        `current_workspace` and `current_rank` say whose turn it waits for."""
        give_up = time.monotonic() + max(0.0, wait_seconds)
        workspace = current_workspace.get()
        with self.local.hold(origin, wait_seconds, workspace) as acquired:
            if not acquired:
                raise self._busy()
            with self._fleet_slot(origin, workspace, give_up):
                yield

    def _busy(self) -> FetchFailure:
        return FetchFailure(
            Reason.RATE_LIMITED,
            f"{self.per_host_limit} fetches of this host already running",
            retry_after_seconds=SLOT_RETRY_AFTER_SECONDS,
        )

    @contextmanager
    def _fleet_slot(self, origin: str, workspace: str, give_up: float) -> Iterator[None]:
        """Hold one of `origin`'s slots in Redis, shared by every worker process."""
        token = uuid.uuid4().hex
        rank = current_rank.get()
        try:
            while not self._acquire(origin, token, workspace, rank):
                if time.monotonic() >= give_up:
                    raise self._busy()
                time.sleep(SLOT_POLL_SECONDS)
        except FetchFailure:
            # Out of the line now, so that nobody's turn waits for a waiter who left.
            waiting = self.state.key("waiting", origin)
            self.state.call(None, "zrem", waiting, f"{rank}|{workspace}|{token}")
            raise
        try:
            yield
        finally:
            self.state.call(None, "zrem", self.state.key("slots", origin), f"{workspace}|{token}")


def _backing_off(seconds: int) -> FetchFailure:
    return FetchFailure(
        Reason.RATE_LIMITED,
        f"host is backing off after 429 ({seconds}s left)",
        None,
        retry_after_seconds=seconds,
    )
