"""Waiting for retrievals to settle without holding a thread: one Redis subscriber per loop.

Every path that settles a retrieval announces its id on Redis pub/sub after the commit
(`worker.retrieval.notify`). Each API process (each event loop, exactly) keeps one subscription to
that channel and fans the ids out to the asyncio waiters registered for them. A waiter is an
`asyncio.Event` per request: waiting costs no thread, no timer per request and no database
read until something happens; the database is read once at the start, once per wake-up, and
once when the wait runs out. Used by `GET …/retrievals/{id}` and `…/batch-get` with
`Prefer: wait=N`, and by the MCP retrieve tool.

When Redis cannot be reached the subscriber retries in the background; waits then end when
their time runs out, still with the database's state. When it is back, every waiter re-reads
once (what settled meanwhile was announced to nobody).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import structlog
from starlette.concurrency import run_in_threadpool

from api.services.thread_pools import Runner
from api.serving.header_values import decimal
from worker.platform import redis_clients
from worker.platform.settings import get_settings
from worker.retrieval import notify

log = structlog.get_logger(__name__)
P = TypeVar("P")

#: Longest wait a request may ask for (RFC 7240 `Prefer: wait=N`; larger asks are clamped).
MAX_WAIT_SECONDS = 30
#: How long a wait lets the subscription come up before it reads (it waits on regardless).
SUBSCRIBE_WAIT_SECONDS = 1.0
RECONNECT_SECONDS = (0.1, 0.5, 1.0, 2.0, 5.0)
#: Settle announcements each hub remembers (a few minutes' worth at full speed).
RECENT = 65_536


class Hub:
    """One event loop's subscription to the settle channel and its waiters, by retrieval id."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.waiters: dict[str, set[asyncio.Event]] = {}
        #: The ids announced lately, oldest first (RECENT of them): what settled before anyone
        #: here waited for it.
        self.recent: dict[str, None] = {}
        self.subscribed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    @contextlib.contextmanager
    def watch(self, ids: Iterable[str]) -> Iterator[asyncio.Event]:
        """An event set whenever one of `ids` is announced (or the subscription came back)."""
        event, keys = asyncio.Event(), list(dict.fromkeys(ids))
        for key in keys:
            self.waiters.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            for key in keys:
                events = self.waiters.get(key)
                if events is not None:
                    events.discard(event)
                    if not events:
                        del self.waiters[key]

    def wake(self, ids: Iterable[str]) -> None:
        for key in ids:
            self.recent[key] = None
            if len(self.recent) > RECENT:
                del self.recent[next(iter(self.recent))]
            for event in self.waiters.get(key, ()):
                event.set()

    def settled_lately(self, key: str) -> bool:
        """Whether `key` was announced since this subscription began (of the last RECENT)."""
        return key in self.recent

    def wake_all(self) -> None:
        for events in self.waiters.values():
            for event in events:
                event.set()

    async def _listen(self) -> None:
        failures = 0
        while True:
            client = redis_clients.subscriber(self.url)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(notify.CHANNEL)
                self.subscribed.set()
                if failures:
                    log.info("settle_subscription_restored")
                    self.wake_all()  # announcements made while we were away reached nobody
                failures = 0
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self.wake(notify.decode(message["data"]))
            except Exception as exc:  # noqa: BLE001  (Redis trouble or anything else: retry)
                self.subscribed.clear()
                if failures == 0:
                    log.warning("settle_subscription_lost", error=type(exc).__name__)
                await asyncio.sleep(RECONNECT_SECONDS[min(failures, len(RECONNECT_SECONDS) - 1)])
                failures += 1
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                    await client.aclose()


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()


def hub() -> Hub:
    """This event loop's hub, started on first use."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = Hub(get_settings().politeness_redis_url)
    found.start()
    return found


async def close_hub() -> None:
    """Stop this loop's subscriber (at shutdown)."""
    found = _hubs.pop(asyncio.get_running_loop(), None)
    if found is not None:
        await found.close()


async def wait_until(
    read: Callable[[], P],
    ids: Iterable[str],
    done: Callable[[P], bool],
    seconds: float,
    run: Runner | None = None,
) -> P:
    """Read with `read` until `done` says so or `seconds` pass.

    Each read runs in a worker thread (one of `run`'s when given). Registers before the first
    read, so an announcement between that read and the wait is not missed; the event is
    cleared before every read, so one arriving during a read wakes the next wait at once. The
    last read happens when the time is up, so the answer is the state then.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, seconds)
    center = hub()
    with center.watch(ids) as event:
        if seconds > 0 and not center.subscribed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(center.subscribed.wait(), SUBSCRIBE_WAIT_SECONDS)
        while True:
            event.clear()
            value = await (run or run_in_threadpool)(read)
            remaining = deadline - loop.time()
            if done(value) or remaining <= 0:
                return value
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)


def parse_prefer_wait(values: Iterable[str]) -> int | None:
    """The `wait` preference of `Prefer` header values (RFC 7240), clamped; None when absent.

    `Prefer: wait=10`, `Prefer: respond-async, wait=10` and `wait="10"` all ask for 10 s; a
    malformed or negative value is no preference (RFC 7240 §2: ignore what is not understood).
    The first `wait` wins.
    """
    for value in values:
        for preference in value.split(","):
            token, _, rest = preference.strip().partition("=")
            if token.strip().lower() != "wait":
                continue
            # ASCII digits only, never an unbounded int(): `wait=²` and 5 000 digits were 500s.
            return decimal(rest.split(";", 1)[0].strip().strip('"'), MAX_WAIT_SECONDS)
    return None
