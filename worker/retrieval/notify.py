"""Settle notifications: "these retrievals just settled", on Redis pub/sub, after the commit.

Published by every path that settles a retrieval (the worker's settle, a fenced settle that
expires it, cancel, the sweep's expiry and its give-up to `unconfirmed`) so long-polls
(`Prefer: wait=N`), MCP calls and `evidence enqueue --wait` answer as soon as it happens
(`api.services.waiters` listens). One channel, the ids comma-separated: a listener re-reads
the rows, so a message carries no state. A notification is an optimisation, never the truth:
when Redis is down it is dropped (logged, then Redis is left alone for a while) and waiters
answer when their wait runs out, with the state the database holds.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

import redis
import structlog

from worker.platform import redis_clients

log = structlog.get_logger(__name__)

#: The pub/sub channel of settle notifications.
CHANNEL = "evidence:settled"
#: Ids per message (the sweep may expire thousands at once).
IDS_PER_MESSAGE = 500
QUIET_SECONDS = 5.0

_quiet_until = 0.0


def encode(ids: Iterable[uuid.UUID | str]) -> list[str]:
    """The messages announcing `ids`: comma-separated, at most IDS_PER_MESSAGE each."""
    texts = [str(i) for i in ids]
    return [
        ",".join(texts[start : start + IDS_PER_MESSAGE])
        for start in range(0, len(texts), IDS_PER_MESSAGE)
    ]


def decode(message: bytes | str) -> list[str]:
    """The ids one message announces."""
    text = message.decode() if isinstance(message, bytes) else message
    return [part for part in text.split(",") if part]


def settled(ids: Iterable[uuid.UUID | str]) -> None:
    """Announce that `ids` settled (call after the commit). Never raises."""
    global _quiet_until
    messages = encode(ids)
    if not messages or time.monotonic() < _quiet_until:
        return
    try:
        if len(messages) == 1:
            redis_clients.shared().publish(CHANNEL, messages[0])
            return
        pipe = redis_clients.shared().pipeline(transaction=False)
        for message in messages:
            pipe.publish(CHANNEL, message)
        pipe.execute()
    except (redis.RedisError, OSError) as exc:
        _quiet_until = time.monotonic() + QUIET_SECONDS
        log.warning("settle_notify_failed", error=type(exc).__name__)
