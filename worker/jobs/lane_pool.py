"""Celery's threads pool, taking the messages a worker holds in lane order, not arrival order.

A threads-pool worker reserves more messages than it has threads (`node.THREADS_PREFETCH_
MULTIPLIER`), so a thread that frees finds its next message at hand. Celery's own pool hands
them to a `ThreadPoolExecutor`, whose queue is first in, first out: a single retrieval that
arrives while batch tokens wait in the process would start after all of them, and with hundreds
of threads that is seconds. Here the waiting messages are ranked as the broker ranks its queues
(`celery_app.QUEUE_PRIORITY`: sweep, interactive, webhooks, batch) and taken best rank first, in
arrival order within a rank. Batch tokens are interchangeable (the claim picks which retrieval
runs), so letting a single overtake them takes nothing from any workspace.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from celery.concurrency.base import apply_target
from celery.concurrency.thread import ApplyResult
from celery.concurrency.thread import TaskPool as ThreadsTaskPool

from worker.jobs.celery_app import (
    DELIVER_WEBHOOK_TASK,
    RETRIEVE_NEXT_TASK,
    RETRIEVE_TASK,
    SWEEP_TASK,
)

#: Rank of each task's messages (lower runs first); any other task (the webhook sweep) ranks
#: with the sweep. Webhook deliveries (short, bounded sends) come after interactive retrievals.
TASK_RANK = {SWEEP_TASK: 0, RETRIEVE_TASK: 1, DELIVER_WEBHOOK_TASK: 2, RETRIEVE_NEXT_TASK: 3}
#: Rank of the stop marker: after every message already waiting, as a FIFO executor's shutdown.
STOP_RANK = len(TASK_RANK) + 1


def rank_of(task_name: object) -> int:
    """Where a message of `task_name` goes in the line."""
    return TASK_RANK.get(task_name, 0) if isinstance(task_name, str) else 0


@dataclass(order=True)
class _Item:
    rank: int
    seq: int
    work: Callable[[], None] | None = field(compare=False)


class RankedExecutor:
    """At most `max_workers` threads running submitted work, best rank first.

    Threads start as work arrives and no thread is idle (as `ThreadPoolExecutor` does), so an
    idle worker does not hold hundreds of them.
    """

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self._queue: queue.PriorityQueue[_Item] = queue.PriorityQueue()
        self._seq = itertools.count()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopped = False
        self._busy = 0

    def submit(self, rank: int, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the future, as an executor does
                future.set_exception(exc)

        with self._lock:
            if self._stopped:
                raise RuntimeError("cannot submit after shutdown")
            self._queue.put(_Item(rank, next(self._seq), work))
            self._add_thread_if_none_idle()
        return future

    def _add_thread_if_none_idle(self) -> None:
        if self._idle.acquire(timeout=0) or len(self._threads) >= self.max_workers:
            return
        thread = threading.Thread(
            target=self._run, name=f"lane-pool-{len(self._threads)}", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item.work is None:
                self._queue.put(item)  # the stop marker is for every thread
                return
            with self._lock:
                self._busy += 1
            try:
                item.work()
            finally:
                with self._lock:
                    self._busy -= 1
            del item
            self._idle.release()

    def shutdown(self, wait: bool = True) -> None:
        """Run what is waiting, then stop every thread."""
        with self._lock:
            self._stopped = True
            self._queue.put(_Item(STOP_RANK, next(self._seq), None))
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()

    def spare(self) -> int:
        """Threads that would be idle once the waiting work has one each (0 when stopping)."""
        with self._lock:
            if self._stopped:
                return 0
            return max(0, self.max_workers - self._busy - self._queue.qsize())

    def waiting(self) -> bool:
        """Whether submitted work waits for a thread."""
        return not self._queue.empty()

    @property
    def thread_count(self) -> int:
        return len(self._threads)


#: The executor of this process's lane pool, once one is made (None: another pool runs tasks).
_executor: RankedExecutor | None = None


def follow_ons_allowed() -> bool:
    """Whether tasks here run on a lane pool's threads (prefork children do not)."""
    return _executor is not None


def spare_threads() -> int:
    """Threads of this process's lane pool that nothing runs on or waits for."""
    return 0 if _executor is None else _executor.spare()


def run_batch_work(fn: Callable[[], Any]) -> None:
    """Run `fn` on a lane-pool thread, ranked as batch-lane work."""
    assert _executor is not None
    _executor.submit(TASK_RANK[RETRIEVE_NEXT_TASK], fn)


def work_waiting() -> bool:
    """Whether a delivered message waits in this process for a thread."""
    return _executor is not None and _executor.waiting()


class LaneThreadPool(ThreadsTaskPool):  # type: ignore[misc]  # Celery ships no types
    """Celery's threads pool with a `RankedExecutor` (`--pool worker.jobs.lane_pool:…`)."""

    executor: RankedExecutor

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        fifo: Any = self.executor  # the base made a FIFO one, with no thread yet
        fifo.shutdown(wait=False)
        self.executor = RankedExecutor(self.limit)
        global _executor
        _executor = self.executor

    def on_apply(
        self,
        target: Callable[..., Any],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        callback: Callable[..., Any] | None = None,
        accept_callback: Callable[..., Any] | None = None,
        **_: Any,
    ) -> ApplyResult:
        # Celery passes the task's name first in `args` (the request's type).
        rank = rank_of(args[0] if args else None)
        future = self.executor.submit(
            rank, apply_target, target, args, kwargs, callback, accept_callback
        )
        return ApplyResult(future)

    def _get_info(self) -> dict[str, Any]:
        info: dict[str, Any] = super(ThreadsTaskPool, self)._get_info()
        info.update({"max-concurrency": self.limit, "threads": self.executor.thread_count})
        return info
