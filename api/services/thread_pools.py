"""Bounded pools of worker threads for the async routes (image fetches, diffs): each pool is an
anyio capacity limiter, one per event loop (a limiter belongs to the loop that uses it)."""

from __future__ import annotations

import weakref
from asyncio import AbstractEventLoop, get_running_loop

import anyio


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
