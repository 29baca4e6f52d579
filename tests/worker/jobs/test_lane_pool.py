"""The threads pool takes the messages a worker holds in lane order: sweep, interactive, batch."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from worker.jobs.celery_app import (
    DELIVER_WEBHOOK_TASK,
    RETRIEVE_NEXT_TASK,
    RETRIEVE_TASK,
    SWEEP_TASK,
)
from worker.jobs.lane_pool import LaneThreadPool, RankedExecutor, rank_of


def test_rank_of_each_task() -> None:
    assert rank_of(SWEEP_TASK) < rank_of(RETRIEVE_TASK) < rank_of(RETRIEVE_NEXT_TASK)
    assert rank_of(RETRIEVE_TASK) < rank_of(DELIVER_WEBHOOK_TASK) < rank_of(RETRIEVE_NEXT_TASK)
    assert rank_of("celery.ping") == rank_of(SWEEP_TASK)  # control work never waits
    assert rank_of(None) == rank_of(SWEEP_TASK)


def blocked_executor() -> tuple[RankedExecutor, threading.Event]:
    """A one-thread executor whose thread is busy until the event is set."""
    executor = RankedExecutor(1)
    gate, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(10)

    executor.submit(0, hold)
    assert started.wait(10)
    return executor, gate


def test_waiting_work_runs_best_rank_first_then_in_arrival_order() -> None:
    executor, gate = blocked_executor()
    ran: list[str] = []
    for rank, name in [
        (2, "batch-1"),
        (2, "batch-2"),
        (1, "single-1"),
        (0, "sweep"),
        (1, "single-2"),
    ]:
        executor.submit(rank, ran.append, name)
    gate.set()
    executor.shutdown(wait=True)
    assert ran == ["sweep", "single-1", "single-2", "batch-1", "batch-2"]


def test_results_and_exceptions_reach_the_future() -> None:
    executor = RankedExecutor(2)
    assert executor.submit(1, lambda a, b: a + b, 2, 3).result(timeout=10) == 5
    with pytest.raises(ZeroDivisionError):
        executor.submit(1, lambda: 1 / 0).result(timeout=10)
    executor.shutdown(wait=True)


def test_shutdown_runs_what_waits_then_refuses_more() -> None:
    executor, gate = blocked_executor()
    late = executor.submit(2, lambda: "ran")
    gate.set()
    executor.shutdown(wait=True)
    assert late.result(timeout=0) == "ran"
    with pytest.raises(RuntimeError):
        executor.submit(1, lambda: None)


def test_threads_start_only_when_none_is_idle() -> None:
    executor = RankedExecutor(8)
    for _ in range(5):
        executor.submit(1, lambda: None).result(timeout=10)
    assert executor.thread_count == 1, "one thread, idle between sequential tasks, serves all"
    executor.shutdown(wait=True)


def test_celery_pool_ranks_by_the_task_name_it_is_given() -> None:
    """Celery calls the pool with the task's name first in `args`; the pool ranks by it."""
    pool = LaneThreadPool(limit=1)
    gate, started = threading.Event(), threading.Event()
    ran: list[str] = []

    def target(name: str, *_: Any) -> None:
        if name == "hold":
            started.set()
            gate.wait(10)
        ran.append(name)

    pool.on_apply(target, args=("hold",))
    assert started.wait(10)
    for name in (RETRIEVE_NEXT_TASK, RETRIEVE_TASK, SWEEP_TASK):
        pool.on_apply(target, args=(name, "task-id"))
    gate.set()
    pool.on_stop()
    assert ran == ["hold", SWEEP_TASK, RETRIEVE_TASK, RETRIEVE_NEXT_TASK]
    assert pool._get_info()["max-concurrency"] == 1
