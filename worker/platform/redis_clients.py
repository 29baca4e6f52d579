"""Redis clients: the one place that says how the service connects to Redis.

Celery's own broker connections are kombu's (`worker.jobs.redis_transport`). Everything else is
here: shared state between processes (politeness, fleet metrics, quotas, settle notifications)
goes through clients with short timeouts, because each of those degrades open when Redis is
slow or down and must never hold a request or a retrieval for long; the API's settle subscriber
is an asyncio client.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from typing import Any

import redis
import redis.asyncio

from worker.platform.settings import get_settings

#: How long a shared-state command may take before its caller takes its fallback.
SHORT_TIMEOUT_SECONDS = 0.5

_shared: dict[tuple[int, str], redis.Redis] = {}
_lock = threading.Lock()
_shared_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
    weakref.WeakKeyDictionary()
)


def connect(url: str, timeout: float = SHORT_TIMEOUT_SECONDS) -> redis.Redis:
    """A new client of its caller's own (it closes it), bounded in connecting and in commands."""
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


def shared(url: str | None = None) -> redis.Redis:
    """This process's client for `url` (the shared-state Redis by default), made once per
    process: a forked child makes its own, since the parent's sockets are not its."""
    url = url or get_settings().politeness_redis_url
    key = (os.getpid(), url)
    client = _shared.get(key)
    if client is None:
        with _lock:
            client = _shared.get(key)
            if client is None:
                client = _shared[key] = connect(url)
    return client


def subscriber(url: str, connect_timeout: float = 2.0) -> Any:
    """An asyncio client for a pub/sub subscription (no command timeout: it waits on purpose).

    Typed `Any`: redis-py leaves parts of its asyncio client (`aclose`) unannotated."""
    return redis.asyncio.Redis.from_url(url, socket_connect_timeout=connect_timeout)


def shared_async() -> Any:
    """This event loop's asyncio client of the shared-state Redis, bounded like `shared`'s
    (a client's connections belong to the loop that opened them). Typed `Any` as above."""
    loop = asyncio.get_running_loop()
    client = _shared_async.get(loop)
    if client is None:
        client = _shared_async[loop] = redis.asyncio.Redis.from_url(
            get_settings().politeness_redis_url,
            socket_timeout=SHORT_TIMEOUT_SECONDS,
            socket_connect_timeout=SHORT_TIMEOUT_SECONDS,
        )
    return client


async def close_shared_async() -> None:
    """Close this event loop's client of `shared_async` (at shutdown)."""
    client = _shared_async.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()
