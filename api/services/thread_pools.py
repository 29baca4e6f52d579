"""Bounded pools of worker threads for the async routes: each pool belongs to one event loop.

`LoopPool` is an anyio capacity limiter (image fetches, diffs); `FairPool` has threads of its
own handed out in turns between workspaces (the polling reads), so that reads never queue
behind another workspace's reads, nor writes behind reads."""

from __future__ import annotations

import asyncio
import weakref
from asyncio import AbstractEventLoop, get_running_loop
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Protocol, TypeVar

import anyio
import anyio.to_thread

P = TypeVar("P")


class LoopPool:
    """A named pool's bound: `limiter(total)` is this loop's limiter, resized to `total`."""

    def __init__(self) -> None:
        self._limiters: weakref.WeakKeyDictionary[AbstractEventLoop, anyio.CapacityLimiter] = (
            weakref.WeakKeyDictionary()
        )

    def limiter(self, total: int) -> anyio.CapacityLimiter:
        loop = get_running_loop()
        limiter = self._limiters.get(loop)
        if limiter is None:
            limiter = self._limiters[loop] = anyio.CapacityLimiter(total)
        limiter.total_tokens = total
        return limiter


class Runner(Protocol):
    """Runs a blocking call in a worker thread and awaits its result."""

    async def __call__(self, fn: Callable[[], P], /) -> P: ...


class FairPool:
    """`total` worker threads of their own, handed out in turns between the keys waiting (a
    workspace): a key with a hundred reads queued waits behind one read of every other key, not
    the other way round. One per event loop (its waiters are that loop's futures); the threads
    come from an anyio limiter of the same size, which the turns keep from ever blocking."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.busy = 0
        self._waiting: OrderedDict[Hashable, deque[asyncio.Future[None]]] = OrderedDict()
        self._limiter = anyio.CapacityLimiter(total)

    async def run(self, key: Hashable, fn: Callable[[], P]) -> P:
        """`fn()` in one of this pool's threads, once `key`'s turn comes."""
        await self._acquire(key)
        try:
            return await anyio.to_thread.run_sync(fn, limiter=self._limiter)
        finally:
            self._release()

    def queued(self) -> int:
        return sum(len(waiters) for waiters in self._waiting.values())

    async def _acquire(self, key: Hashable) -> None:
        if self.busy < self.total and not self._waiting:
            self.busy += 1
            return
        turn: asyncio.Future[None] = get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(turn)
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self._release()  # granted as it was cancelled: pass the thread on
            else:
                self._forget(key, turn)
            raise

    def _forget(self, key: Hashable, turn: asyncio.Future[None]) -> None:
        waiters = self._waiting.get(key)
        if waiters is not None and turn in waiters:
            waiters.remove(turn)
            if not waiters:
                del self._waiting[key]

    def _release(self) -> None:
        """Hand the thread to the next key in turn (which then goes to the back), or free it."""
        while self._waiting:
            key, waiters = next(iter(self._waiting.items()))
            turn = waiters.popleft()
            del self._waiting[key]
            if waiters:
                self._waiting[key] = waiters  # to the back of the turns
            if not turn.done():
                turn.set_result(None)
                return
        self.busy -= 1


class LoopFairPool:
    """A `FairPool` per event loop, all of the same size."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._pools: weakref.WeakKeyDictionary[AbstractEventLoop, FairPool] = (
            weakref.WeakKeyDictionary()
        )

    def pool(self) -> FairPool:
        loop = get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = FairPool(self.total)
        return pool

    async def run(self, key: Hashable, fn: Callable[[], P]) -> P:
        return await self.pool().run(key, fn)

    def runner(self, key: Hashable) -> Runner:
        """A `Runner` that takes `key`'s turns."""
        pools = self

        class _KeyRunner:
            async def __call__(self, fn: Callable[[], P], /) -> P:
                return await pools.run(key, fn)

        return _KeyRunner()


#: Threads per API process for the polling reads (GET a retrieval, batch-get), beside the
#: default pool's API_THREADS that the writes use: a poll flood queues only reads, in turns by
#: workspace, and never a POST.
READ_THREADS = 4
#: The polling reads' pool, keyed by the workspace charged (else the key).
reads = LoopFairPool(READ_THREADS)
