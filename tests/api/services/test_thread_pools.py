"""The polling reads' thread pool: threads of its own, handed out in turns between workspaces."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import anyio.to_thread
import pytest

from api.services import read_admission
from api.services.thread_pools import FairPool


def blocker(started: threading.Event, release: threading.Event) -> Callable[[], str]:
    def block() -> str:
        started.set()
        release.wait(10)
        return "blocked"

    return block


async def occupy(pool: FairPool, key: str, release: threading.Event) -> asyncio.Task[str]:
    """A task holding one of the pool's threads until `release` is set."""
    started = threading.Event()
    task = asyncio.create_task(pool.run(key, blocker(started, release)))
    while not started.is_set():
        await asyncio.sleep(0.001)
    return task


async def queue_up(
    pool: FairPool, calls: list[tuple[str, str]], ran: list[str]
) -> list[asyncio.Task[None]]:
    tasks = []
    for key, name in calls:

        async def one(key: str = key, name: str = name) -> None:
            await pool.run(key, lambda: ran.append(name))

        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(0)  # queued in this order
    return tasks


def test_turns_go_round_the_workspaces_waiting() -> None:
    """Five reads of A queued before one of B: B's runs second, not sixth."""

    async def scenario() -> list[str]:
        pool, release, ran = FairPool(1), threading.Event(), list[str]()
        held = await occupy(pool, "X", release)
        tasks = await queue_up(pool, [*(("A", f"a{i}") for i in range(5)), ("B", "b0")], ran)
        assert pool.queued() == 6
        release.set()
        await held
        await asyncio.gather(*tasks)
        assert pool.busy == 0 and pool.queued() == 0
        return ran

    assert asyncio.run(scenario()) == ["a0", "b0", "a1", "a2", "a3", "a4"]


def test_never_more_threads_than_its_size() -> None:
    async def scenario() -> int:
        pool, lock, now, most = FairPool(3), threading.Lock(), [0], [0]

        def read() -> None:
            with lock:
                now[0] += 1
                most[0] = max(most[0], now[0])
            threading.Event().wait(0.005)
            with lock:
                now[0] -= 1

        await asyncio.gather(*(pool.run(f"w{i % 4}", read) for i in range(40)))
        assert pool.busy == 0
        return most[0]

    assert asyncio.run(scenario()) == 3


def test_a_cancelled_or_failed_read_gives_its_turn_back() -> None:
    """A waiter cancelled in the queue, and a read that raises, leave no thread taken."""

    async def scenario() -> None:
        pool, release = FairPool(1), threading.Event()
        held = await occupy(pool, "X", release)
        waiting = asyncio.create_task(pool.run("A", lambda: "never"))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert pool.queued() == 0
        release.set()
        await held

        def fail() -> None:
            raise ValueError("a read that fails")

        with pytest.raises(ValueError):
            await pool.run("B", fail)
        assert pool.busy == 0
        assert await asyncio.wait_for(pool.run("C", lambda: "ran"), 5) == "ran"

    asyncio.run(scenario())


def test_a_read_granted_as_it_is_cancelled_passes_the_thread_on() -> None:
    async def scenario() -> None:
        pool = FairPool(1)
        await pool._acquire("X")  # the one thread, taken
        first = asyncio.create_task(pool.run("A", lambda: "a"))
        second = asyncio.create_task(pool.run("B", lambda: "b"))
        await asyncio.sleep(0.01)
        pool._release()  # the thread goes to A's turn...
        first.cancel()  # ...whose task is cancelled before it could run
        assert await asyncio.wait_for(second, 5) == "b"
        with pytest.raises(asyncio.CancelledError):
            await first
        assert pool.busy == 0

    asyncio.run(scenario())


def test_reads_never_take_the_writes_threads() -> None:
    """With every read thread blocked, a call in the default pool (a POST's) still runs."""

    async def scenario() -> str:
        pool, release = FairPool(2), threading.Event()
        held = [await occupy(pool, "A", release) for _ in range(2)]
        try:
            return await asyncio.wait_for(anyio.to_thread.run_sync(lambda: "written"), 5)
        finally:
            release.set()
            await asyncio.gather(*held)

    assert asyncio.run(scenario()) == "written"


def test_holds_are_spread_between_half_and_all_of_the_longest() -> None:
    """Refusals answered together come back spread out: half to all of HOLD_SECONDS."""
    holds = [read_admission.hold_for() for _ in range(400)]
    longest = read_admission.HOLD_SECONDS
    assert all(longest / 2 <= hold <= longest for hold in holds)
    assert min(holds) < longest * 0.6 and max(holds) > longest * 0.9
