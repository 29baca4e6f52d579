"""A counting gate that admits its waiters best rank first, then in arrival order.

A worker keeps hundreds of retrievals in flight, and they queue for what is scarce: a few
extraction processes, a few fetches per host. First in, first out, an agent's single retrieval
would wait behind every batch page that got there before it; these gates let the interactive
lane's work in first, as the broker and the worker's threads already do
(`worker.jobs.lane_pool`). The rank of the work a thread is doing is `current_rank`, set by
the runner for each retrieval.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

#: Ranks (lower goes first): the interactive lane's work, then the batch lane's.
INTERACTIVE = 1
BATCH = 2
#: The rank of what this thread is working on (the runner sets it per retrieval).
current_rank: ContextVar[int] = ContextVar("current_rank", default=INTERACTIVE)


@contextmanager
def ranked(rank: int) -> Iterator[None]:
    """Do the work inside at `rank`."""
    token = current_rank.set(rank)
    try:
        yield
    finally:
        current_rank.reset(token)


@dataclass(order=True)
class _Waiter:
    rank: int
    seq: int
    event: threading.Event = field(compare=False, default_factory=threading.Event)
    admitted: bool = field(compare=False, default=False)
    gave_up: bool = field(compare=False, default=False)


class RankedGate:
    """At most `slots` holders at once; waiters admitted by (rank, arrival)."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def acquire(self, timeout: float, rank: int | None = None) -> bool:
        """Take a slot within `timeout` seconds; False (holding nothing) when none came.

        `rank` defaults to the thread's `current_rank`.
        """
        rank = current_rank.get() if rank is None else rank
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return True
            waiter = _Waiter(rank, next(self._seq))
            heapq.heappush(self._waiters, waiter)
        if waiter.event.wait(max(timeout, 0.0)):
            return True
        with self._lock:
            if waiter.admitted:  # admitted between the timeout and the lock
                return True
            # Dropped when a release reaches it: a release drains those before it adds a free
            # slot, so the heap is empty whenever a slot is free.
            waiter.gave_up = True
            return False

    def release(self) -> None:
        """Give the slot to the best waiter still waiting, or back to the gate."""
        with self._lock:
            while self._waiters:
                waiter = heapq.heappop(self._waiters)
                if not waiter.gave_up:
                    waiter.admitted = True
                    waiter.event.set()
                    return
            self._free += 1

    @property
    def waiting(self) -> int:
        with self._lock:
            return sum(not w.gave_up for w in self._waiters)
