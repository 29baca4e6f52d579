"""`evidence worker --idle`: the supervisor, the worker process, every thread of it, its fork
server and its extraction processes all run under SCHED_IDLE (worker/jobs/node.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import Services
from tests.support.procfs import children, command_line
from tests.support.services import Process, wait_for

#: A queue nobody else publishes to: this test's worker takes no other test's work.
IDLE_QUEUE = "idle-priority-test"


def policies(pid: int) -> set[int]:
    """The scheduling policies of every thread of `pid`."""
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found.add(os.sched_getscheduler(int(tid)))
        except ProcessLookupError:
            continue
    return found


def threads(pid: int) -> set[int]:
    """The thread ids of `pid`."""
    return {int(tid) for tid in os.listdir(f"/proc/{pid}/task")}


def run_a_task(queue: str) -> str:
    """Send Celery's built-in `celery.accumulate` (it returns its argument) to `queue`, on a
    connection of its own (a test that restarted Redis leaves pooled ones dead); its id."""
    from worker.jobs.celery_app import app

    with app.connection_for_write() as connection:
        result = app.send_task("celery.accumulate", args=(1,), queue=queue, connection=connection)
    return str(result.id)


def test_idle_worker_runs_every_process_and_thread_at_idle_priority(
    services: Services, tmp_path: Path
) -> None:
    worker = Process(
        [
            "worker",
            "--queues",
            IDLE_QUEUE,
            "--idle",
            "--concurrency",
            "4",
            "--hostname",
            "idle@%h",
        ],
        tmp_path / "worker.log",
    ).start()
    try:
        node = wait_for(lambda: children(worker.pid), timeout=60)
        assert isinstance(node, list) and len(node) == 1, worker.log()
        (process,) = node
        server = wait_for(
            lambda: [p for p in children(process) if "forkserver" in command_line(p)],
            timeout=60,
        )
        assert isinstance(server, list)
        extraction = wait_for(lambda: children(server[0]), timeout=60)
        assert isinstance(extraction, list) and extraction, worker.log()
        wait_for(lambda: "@" in worker.log() and ' ready."' in worker.log(), timeout=60)
        assert "idle_priority_refused" not in worker.log()
        # The pool starts a thread only for work (an idle worker holds none): one task gives
        # it one, started well after the priority was set, and checked with the rest below.
        before = threads(process)
        task_id = run_a_task(IDLE_QUEUE)
        wait_for(lambda: f"{task_id}] succeeded" in worker.log(), timeout=60)
        assert threads(process) - before, worker.log()
        for pid in [worker.pid, process, server[0], *extraction]:
            assert policies(pid) == {os.SCHED_IDLE}, (pid, command_line(pid))
        # The services' own worker was started without it: normal policy.
        assert policies(services.worker.pid) == {os.SCHED_OTHER}
    finally:
        worker.stop()
