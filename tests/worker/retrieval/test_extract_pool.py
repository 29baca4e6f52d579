"""The extraction processes: bounded, niced, and an overrunning step is killed and replaced."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import steps
from tests.support.slowdown import scaled
from worker.retrieval.extract_pool import ExtractionCrashed, ExtractionTimeout, ExtractPool


@pytest.fixture(scope="module")
def pool() -> Iterator[ExtractPool]:
    running = ExtractPool(processes=2, nice=3)
    running.warm()
    yield running
    running.close()


@pytest.fixture
def own_pool() -> Iterator[ExtractPool]:
    """A pool no other test used: a process another test's step had killed can still be
    dying (pebble reaps it after it answers the step) when the next test looks."""
    running = ExtractPool(processes=2, nice=3)
    running.warm()
    yield running
    running.close()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_steps_run_in_niced_processes(pool: ExtractPool) -> None:
    """Steps run in other processes, niced below this one."""
    assert pool.run(steps.pid, (), budget=5, wait=30) != os.getpid()
    assert pool.run(steps.nice, (), budget=5, wait=30) >= os.nice(0) + 3


def test_hung_step_is_killed_and_replaced(own_pool: ExtractPool) -> None:
    """A step past its budget raises ExtractionTimeout; its process is killed, a new one takes
    its place, and the next step runs."""
    pool = own_pool
    before = set(pool.pids())
    started = time.monotonic()
    with pytest.raises(ExtractionTimeout):
        pool.run(steps.hang, (), budget=0.5, wait=30)
    assert time.monotonic() - started < scaled(10)  # the hang is endless: any bound shows it
    gone = before - set(pool.pids())
    assert len(gone) == 1 and not alive(gone.pop())
    deadline = time.monotonic() + 20
    while len(pool.pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(pool.pids()) == 2 and set(pool.pids()) != before
    assert pool.run(steps.nap, (0.01,), budget=5, wait=30) in pool.pids()


def test_hung_step_does_not_stop_the_others(pool: ExtractPool) -> None:
    """While one process hangs, the other keeps serving steps."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as side:
        hung = side.submit(pool.run, steps.hang, (), scaled(6.0), 30.0)
        time.sleep(0.3)
        for _ in range(5):
            pool.run(steps.nap, (0.05,), budget=5, wait=30)
        assert not hung.done()  # they ran while it hung, not after its budget ended it
        with pytest.raises(ExtractionTimeout):
            hung.result()


def test_wait_bounds_the_queue(pool: ExtractPool) -> None:
    """A step that cannot start within `wait` gives up without running."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as side:
        busy = [side.submit(pool.run, steps.nap, (1.5,), 5.0, 30.0) for _ in range(2)]
        time.sleep(0.3)
        with pytest.raises(ExtractionTimeout):
            pool.run(steps.nap, (0.01,), budget=5, wait=0.3)
        for future in busy:
            future.result()


def test_crashed_process_is_reported_and_replaced(pool: ExtractPool) -> None:
    """A process that dies under its step raises ExtractionCrashed; the pool goes on."""
    with pytest.raises(ExtractionCrashed):
        pool.run(steps.crash, (), budget=5, wait=30)
    assert pool.run(steps.nap, (0.01,), budget=5, wait=30) > 0
