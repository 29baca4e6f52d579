"""Per-workspace quotas: a write-rate token bucket in Redis, and the open-retrievals ceiling.

* **Write rate.** Each new retrieval (a single POST, an MCP call, a batch item) takes one token
  from its workspace's bucket: `rate` tokens a second, at most `burst` held. A replay of a
  known mutation_id (how clients poll) creates nothing and costs nothing: its token is given
  back, and it is answered even when the bucket is empty. The bucket lives in Redis (one Lua
  call, atomic), so it holds across API processes and machines. Each process takes a busy
  workspace's tokens for singles ahead, in leases of a tenth of a second's worth of its rate
  (`RateLimiter`): most of its POSTs, and replays, then need no round trip to Redis. When
  Redis cannot be asked, the limit degrades open: the request goes on (logged as
  `rate_limit_unavailable`, then Redis is left alone for a few seconds); the open ceiling, in
  the database, still holds.
* **Open ceiling.** Decided in the database, in the creating transaction
  (`worker.retrieval.records.create_within_quota`), where the count is true.
* **Read rate.** The same kind of bucket, apart (`READ_BUCKET_PREFIX`), for polls and reads
  (`api.services.read_admission` says what each costs); `limiter` and `readers` are the two.
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
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
import structlog

from api.errors import ApiError
from worker.lanes import quota_overrides as quota_store
from worker.platform import redis_clients
from worker.platform.settings import get_settings
from worker.store import db

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
REDIS_QUIET_SECONDS = 5.0
#: How far ahead an API process takes tokens for a workspace's singles (RateLimiter).
LEASE_SECONDS = 0.1
MAX_LEASE_TOKENS = 32
#: Workspaces an API process keeps leases for; past it, it starts afresh.
MAX_LEASED_WORKSPACES = 4096
BUCKET_PREFIX = "evidence:quota:bucket:"
READ_BUCKET_PREFIX = "evidence:quota:read:"

#: Put back ARGV[4] unused tokens, then take up to ARGV[3] from the bucket KEYS[1] (rate
#: ARGV[1]/s, size ARGV[2]), refilled by Redis' own clock. Returns {granted, tokens left}. The
#: clock is kept in whole microseconds: `tostring` keeps 14 digits, so a time in seconds would
#: keep only 100 µs, and each take would gain or lose that much refill.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local want, returned = tonumber(ARGV[3]), tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts_us')
local tokens, ts = tonumber(state[1]), tonumber(state[2])
if tokens == nil or ts == nil then tokens, ts = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000000 + returned)
local granted = math.min(want, math.floor(tokens))
tokens = tokens - granted
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts_us', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {granted, tostring(tokens)}
"""


@dataclass(frozen=True)
class Limits:
    """One workspace's quotas, defaults and overrides resolved."""

    open_retrievals: int
    write_rate: float
    write_burst: int
    #: Reads: `limits_for` always sets them (EVIDENCE_QUOTA_READ_*); the defaults here only keep
    #: a write-only Limits short to write.
    read_rate: float = 100.0
    read_burst: int = 1_000

    def reads(self) -> Limits:
        """The read bucket in the shape a RateLimiter takes (its rate and burst in `write_*`)."""
        return Limits(self.open_retrievals, self.read_rate, self.read_burst)


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


def over_read_rate(limits: Limits, retry_after: int) -> ApiError:
    return rate_limited(
        f"this workspace may make {limits.read_rate:g} reads per second "
        f"(bursts of {limits.read_burst}); retry after {retry_after} s",
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
            settings.quota_open_retrievals,
            settings.quota_write_rate,
            settings.quota_write_burst,
            settings.quota_read_rate,
            settings.quota_read_burst,
        )
    return Limits(
        _or(override.open_retrievals, settings.quota_open_retrievals),
        _or(override.write_rate, settings.quota_write_rate),
        _or(override.write_burst, settings.quota_write_burst),
        _or(override.read_rate, settings.quota_read_rate),
        _or(override.read_burst, settings.quota_read_burst),
    )


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


def lease_size(used: int, ran_out: bool, limits: Limits) -> int:
    """Tokens to take from the bucket for a process's next lease: as many as it used of its last
    one, twice that if it ran out before its time; at least 1, at most a lease's worth of the
    workspace's rate (and MAX_LEASE_TOKENS)."""
    ceiling = min(MAX_LEASE_TOKENS, math.floor(limits.write_rate * LEASE_SECONDS))
    return max(1, min(used * 2 if ran_out else used, ceiling))


def shortfall_wait(short: int, tokens_left: float, limits: Limits) -> float:
    """Seconds until the bucket, holding `tokens_left`, could grant `short` more tokens."""
    return (min(short, limits.write_burst) - tokens_left) / limits.write_rate


@dataclass
class _Lease:
    """Tokens this process took from a workspace's bucket ahead of its singles."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    tokens: int = 0
    until: float = 0.0  # monotonic; unused tokens go back with the next take after it
    used: int = 0  # taken from this lease so far
    #: Monotonic time before which the bucket, found empty, cannot grant a token: singles
    #: until then are refused here, without asking Redis again.
    dry_until: float = 0.0


class RateLimiter:
    """Token buckets in Redis, one per workspace; degrades open when Redis cannot be asked.

    A single (one token) is served from a short lease the process takes from the bucket ahead
    of it: as many tokens as the process used in its last lease, never more than LEASE_SECONDS
    of the workspace's rate. So a busy workspace's POSTs ask Redis once every few requests, and
    a replay's token (taken, then given back) costs no round trip at all. What a lease does not
    use within LEASE_SECONDS goes back to the bucket with the process's next take; the bucket
    never grants more than its rate, and another process can find it short by at most what
    the leases hold, for at most LEASE_SECONDS. A single refused for want of a token notes
    when the bucket will hold one again; the singles before then are refused without Redis.

    The bucket's rate and size are the `write_rate` and `write_burst` of the Limits given (the
    read limiter is given `Limits.reads()`), its key `prefix` + the workspace.
    """

    def __init__(self, prefix: str = BUCKET_PREFIX) -> None:
        self._prefix = prefix
        self._client: tuple[int, str, redis.Redis] | None = None
        self._script: Any = None
        self._quiet_until = 0.0
        self._leases: dict[uuid.UUID, _Lease] = {}
        self._leases_pid = os.getpid()
        self._leases_lock = threading.Lock()

    def _redis(self) -> redis.Redis:
        url = get_settings().politeness_redis_url
        if self._client is None or self._client[:2] != (os.getpid(), url):
            client = redis_clients.connect(url)
            self._client = (os.getpid(), url, client)
            self._script = client.register_script(_TAKE)
        return self._client[2]

    def _take(
        self, workspace_id: uuid.UUID, limits: Limits, want: int, returned: int = 0
    ) -> tuple[int, float] | None:
        """Give back `returned`, take up to `want`: (granted, tokens left in the bucket); None
        when Redis cannot be asked (then it is left alone a while)."""
        if time.monotonic() < self._quiet_until:
            return None
        try:
            self._redis()
            granted, left = self._script(
                keys=[f"{self._prefix}{workspace_id}"],
                args=[limits.write_rate, limits.write_burst, want, returned],
            )
        except (redis.RedisError, OSError) as exc:
            self._quiet_until = time.monotonic() + REDIS_QUIET_SECONDS
            log.warning("rate_limit_unavailable", error=type(exc).__name__, degraded="open")
            return None
        return int(granted), float(left)

    def _lease(self, workspace_id: uuid.UUID) -> _Lease:
        lease = self._leases.get(workspace_id)
        if lease is None or self._leases_pid != os.getpid():
            with self._leases_lock:
                # A forked child must not spend its parent's tokens; past the cap, the tokens
                # dropped leases held come back as the buckets refill.
                if self._leases_pid != os.getpid() or len(self._leases) >= MAX_LEASED_WORKSPACES:
                    self._leases, self._leases_pid = {}, os.getpid()
                lease = self._leases.setdefault(workspace_id, _Lease())
        return lease

    def take(self, workspace_id: uuid.UUID, wanted: int, limits: Limits) -> Grant:
        """Take up to `wanted` tokens from the workspace's bucket (all of them if Redis is down)."""
        if wanted <= 0:
            return Grant(0, None)
        if wanted == 1:
            return self._take_one(workspace_id, limits)
        answer = self._take(workspace_id, limits, wanted)
        if answer is None:
            return Grant(wanted, None)
        granted, left = answer
        if granted >= wanted:
            return Grant(granted, None)
        return Grant(granted, retry_seconds(shortfall_wait(wanted - granted, left, limits)))

    def _take_one(self, workspace_id: uuid.UUID, limits: Limits) -> Grant:
        lease = self._lease(workspace_id)
        with lease.lock:
            now = time.monotonic()
            if lease.tokens and now < lease.until:
                lease.tokens -= 1
                lease.used += 1
                return Grant(1, None)
            if now < lease.dry_until:
                return Grant(0, retry_seconds(lease.dry_until - now))
            # A new lease: the last one's unused tokens go back with this take.
            want = lease_size(lease.used, now < lease.until, limits)
            answer = self._take(workspace_id, limits, want, lease.tokens)
            if answer is None:
                return Grant(1, None)
            granted, left = answer
            lease.tokens, lease.until, lease.used = 0, now + LEASE_SECONDS, 0
            if not granted:
                wait = shortfall_wait(1, left, limits)
                lease.dry_until = now + wait
                return Grant(0, retry_seconds(wait))
            lease.tokens, lease.used = granted - 1, 1
            return Grant(1, None)

    def refund(self, workspace_id: uuid.UUID, unused: int, limits: Limits) -> None:
        """Give back tokens taken for submissions that created nothing (replays, refusals): a
        single's into its live lease, more straight to the bucket."""
        if unused <= 0:
            return
        lease = self._lease(workspace_id)
        lease.dry_until = 0.0  # tokens came back: the bucket is no longer known to be empty
        if unused == 1:
            with lease.lock:
                if time.monotonic() < lease.until:
                    lease.tokens, lease.used = lease.tokens + 1, max(0, lease.used - 1)
                    return
        self._take(workspace_id, limits, 0, unused)

    def reset(self) -> None:
        """Forget the client, the leases and any quiet period (tests that move Redis)."""
        self._client, self._script, self._quiet_until = None, None, 0.0
        self._leases = {}


#: The write rate (new retrievals) and the read rate (polls and reads), one bucket each.
limiter = RateLimiter()
readers = RateLimiter(READ_BUCKET_PREFIX)
