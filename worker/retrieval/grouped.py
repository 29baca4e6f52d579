"""Database work from many threads of one process, done a group per transaction.

A thread that submits while no other thread of the process is doing the work leads: it takes
every request queued so far (its own among them, at most `max_group`), does them together
(`work`) and goes on until its own is done, then hands the lead to the oldest request still
queued. The others wait for theirs. Nothing waits to fill a group: a lone request is done at
once, and the groups grow with the load, which is exactly when the savings matter.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: What `work` makes of a group: one answer per request, in order (an exception is raised
#: again in that request's own thread).
Work = Callable[[Sequence[T]], Sequence["R | BaseException"]]


@dataclass
class _Request(Generic[T, R]):
    item: T
    done: threading.Event = field(default_factory=threading.Event)
    finished: bool = False
    answer: R | None = None
    error: BaseException | None = None


class Grouped(Generic[T, R]):
    """Requests from many threads, done together (see the module)."""

    def __init__(self, work: Work[T, R], max_group: int) -> None:
        self._work = work
        self._max_group = max_group
        self._lock = threading.Lock()
        self._queue: list[_Request[T, R]] = []
        self._leading = False

    def submit(self, item: T) -> R:
        """Do `item` with whatever else is queued; its answer, or raise what it raised."""
        request: _Request[T, R] = _Request(item)
        with self._lock:
            self._queue.append(request)
            lead, self._leading = not self._leading, True
        if not lead:
            request.done.wait()
        if not request.finished:  # leading from the start, or handed the lead
            self._lead(request)
        if request.error is not None:
            raise request.error
        return request.answer  # type: ignore[return-value]

    def queued(self) -> int:
        """Requests waiting for a leader to take them."""
        with self._lock:
            return len(self._queue)

    def _lead(self, own: _Request[T, R]) -> None:
        while True:
            with self._lock:
                if own.finished:
                    if self._queue:
                        self._queue[0].done.set()  # it finds itself not done: it leads
                    else:
                        self._leading = False
                    return
                group = self._queue[: self._max_group]
                del self._queue[: self._max_group]
            self._do(group)

    def _do(self, group: list[_Request[T, R]]) -> None:
        """Do `group` and wake its threads; never raises (a thread's error is its own)."""
        try:
            answers = self._work([request.item for request in group])
            for request, answer in zip(group, answers, strict=True):
                if isinstance(answer, BaseException):
                    request.error = answer
                else:
                    request.answer = answer
        except BaseException as exc:  # noqa: BLE001  (every waiting thread must wake)
            for request in group:
                request.error = exc
        finally:
            for request in group:
                request.finished = True
                request.done.set()


def one_per_process(make: Callable[[], Grouped[T, R]]) -> Callable[[], Grouped[T, R]]:
    """A getter of the process's group, made on first use (after any fork)."""
    made: list[Grouped[T, R]] = []
    lock = threading.Lock()

    def get() -> Grouped[T, R]:
        with lock:
            if not made:
                made.append(make())
            return made[0]

    return get
