"""Beat on several hosts, one sending: RedBeat's schedule in Redis, behind a lock in Redis.

`evidence beat` may run on every host of a deployment. Each runs this scheduler; the one that
holds the lock (`evidence:beat::lock`, a redis-py lock of EVIDENCE_BEAT_LOCK_TIMEOUT_SECONDS)
sends the schedule and renews the lock at every tick; the others stand by, trying to take it
at every tick. The schedule and each entry's last run live in Redis (celery-redbeat), so the
one that takes over sends what is due from where the last holder left off.

What RedBeat does differently, and why we change it:

* RedBeat takes its lock in `beat_init`, blocking for good, and its tick renews it without
  catching anything: a Redis outage or restart ends the beat process (and with it `make run`,
  whose honcho stops every process when one exits). Here the lock is taken in the tick,
  without blocking; a Redis error skips the tick (nothing can be sent without Redis anyway);
  a lock found lost (expired during an outage, taken by another beat, or gone with a Redis
  that restarted empty) is given up, and taken again like a standby would.
* The static schedule is written to Redis by the holder each time it takes the lock, not at
  start: a Redis that restarted without its data gets it back, and a standby never writes.

Takeover bound: a holder killed outright stops renewing; its lock expires at most
`beat_lock_timeout_seconds` after its last renewal, and a standby tries every
`beat_poll_seconds`, so another beat sends within their sum (35 s with the defaults).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import redis
import structlog
from celery.signals import beat_init
from redbeat import schedulers as redbeat
from redis.exceptions import LockError

log = structlog.get_logger(__name__)

#: Prefix of every key RedBeat keeps: the lock `<prefix>:lock`, the schedule `<prefix>:schedule`.
KEY_PREFIX = "evidence:beat:"
LOCK_KEY = f"{KEY_PREFIX}:lock"

# The lock is taken in the tick, never blocking at start (see the module's docstring).
beat_init.disconnect(redbeat.acquire_distributed_beat_lock)


def holder_name() -> str:
    """What the lock's value starts with: which beat holds it (`host:pid`), for operators."""
    return f"{socket.gethostname()}:{os.getpid()}"


class LockedScheduler(redbeat.RedBeatScheduler):  # type: ignore[misc]  # redbeat ships no types
    """RedBeat's scheduler whose tick sends only while it holds the lock (module docstring)."""

    lock: Any = None

    def setup_schedule(self) -> None:
        """Nothing at start: the holder writes the schedule when it takes the lock."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        try:
            if not self._hold_lock():
                return float(self.max_interval)
            remaining = [
                self.maybe_due(entry, **self._maybe_due_kwargs) for entry in self.schedule.values()
            ]
        except redis.RedisError as exc:
            log.warning("beat_redis_unavailable", error=f"{type(exc).__name__}: {exc}")
            return float(self.max_interval)
        return float(min([r for r in remaining if r] + [self.max_interval]))

    def _hold_lock(self) -> bool:
        """Renew the lock held, or try to take it; whether this beat may send now."""
        if self.lock is not None:
            try:
                self.lock.extend(self.lock_timeout, replace_ttl=True)
                return True
            except LockError:
                # Expired while this beat could not renew it: another may be sending now.
                log.warning("beat_lock_lost", lock=self.lock_key)
                self.lock = None
        client = redbeat.get_redis(self.app)
        lock = client.lock(self.lock_key, timeout=self.lock_timeout)
        # The token names the holder, so `GET evidence:beat::lock` says which beat sends.
        if not lock.acquire(blocking=False, token=f"{holder_name()}:{os.urandom(8).hex()}"):
            if not getattr(self, "_standing_by", False):
                log.info("beat_standing_by", lock=self.lock_key, holder=client.get(self.lock_key))
                self._standing_by = True
            return False
        self.lock, self._standing_by = lock, False
        log.info("beat_lock_acquired", lock=self.lock_key, timeout_seconds=self.lock_timeout)
        super().setup_schedule()
        return True

    def close(self) -> None:
        """Give the lock up at a clean stop, so a standby takes over at its next tick."""
        try:
            if self.lock is not None and self.lock.owned():
                self.lock.release()
                log.info("beat_lock_released", lock=self.lock_key)
        except redis.RedisError:
            pass  # it expires on its own
        self.lock = None
        redbeat.Scheduler.close(self)
