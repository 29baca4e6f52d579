"""The ranked gate: at most N holders, waiters admitted best rank first, then by arrival."""

from __future__ import annotations

import threading
import time

from worker.platform.ranked_gate import BATCH, INTERACTIVE, RankedGate, current_rank, ranked


def queue_up(
    gate: RankedGate, entries: list[tuple[str, int]], admitted: list[str]
) -> list[threading.Thread]:
    """Start one waiter per entry, each only once the previous one waits (arrival order)."""
    threads = []
    for name, rank in entries:

        def wait(name: str = name, rank: int = rank) -> None:
            assert gate.acquire(10, rank)
            admitted.append(name)
            gate.release()

        before = gate.waiting
        thread = threading.Thread(target=wait)
        thread.start()
        deadline = time.monotonic() + 10
        while gate.waiting == before and time.monotonic() < deadline:
            time.sleep(0.001)
        threads.append(thread)
    return threads


def test_free_slots_are_taken_at_once_then_waiters_queue() -> None:
    gate = RankedGate(2)
    assert gate.acquire(0) and gate.acquire(0)
    assert not gate.acquire(0.01), "a third holder waits, and gives up at its timeout"
    gate.release()
    assert gate.acquire(0)


def test_waiters_are_admitted_by_rank_then_arrival() -> None:
    gate = RankedGate(1)
    assert gate.acquire(0)
    admitted: list[str] = []
    entries = [("batch-1", BATCH), ("batch-2", BATCH), ("single-1", INTERACTIVE)]
    entries += [("batch-3", BATCH), ("single-2", INTERACTIVE)]
    threads = queue_up(gate, entries, admitted)
    gate.release()
    for thread in threads:
        thread.join(10)
    assert admitted == ["single-1", "single-2", "batch-1", "batch-2", "batch-3"]


def test_a_waiter_that_gave_up_is_skipped() -> None:
    gate = RankedGate(1)
    assert gate.acquire(0)
    assert not gate.acquire(0.05, INTERACTIVE)  # gives up, stays in the heap until released past
    admitted: list[str] = []
    threads = queue_up(gate, [("batch", BATCH)], admitted)
    gate.release()
    threads[0].join(10)
    assert admitted == ["batch"]
    assert gate.waiting == 0
    assert gate.acquire(0), "the slot came back to the gate"


def test_rank_defaults_to_the_threads_current_rank() -> None:
    assert current_rank.get() == INTERACTIVE
    gate = RankedGate(1)
    assert gate.acquire(0)
    admitted: list[str] = []

    def batch_work() -> None:
        with ranked(BATCH):
            assert gate.acquire(10)
        admitted.append("batch")
        gate.release()

    worker = threading.Thread(target=batch_work)
    worker.start()
    while gate.waiting == 0:
        time.sleep(0.001)
    threads = queue_up(gate, [("single", INTERACTIVE)], admitted)
    gate.release()
    worker.join(10)
    threads[0].join(10)
    assert admitted == ["single", "batch"]
    assert current_rank.get() == INTERACTIVE, "ranked() restores the rank it replaced"
