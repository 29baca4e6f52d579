"""`evidence worker --idle`: the supervisor, the worker process, every thread of it, its fork
server and its extraction processes all run under SCHED_IDLE (worker/jobs/node.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import Services
from tests.support.procfs import children, command_line
from tests.support.services import Process, wait_for


def policies(pid: int) -> set[int]:
    """The scheduling policies of every thread of `pid`."""
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found.add(os.sched_getscheduler(int(tid)))
        except ProcessLookupError:
            continue
    return found


def test_idle_worker_runs_every_process_and_thread_at_idle_priority(
    services: Services, tmp_path: Path
) -> None:
    # A queue nobody publishes to: this worker takes no other test's work.
    worker = Process(
        [
            "worker",
            "--queues",
            "idle-priority-test",
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
        # Celery's consumer and pool threads exist once it is ready.
        wait_for(lambda: "@" in worker.log() and ' ready."' in worker.log(), timeout=60)
        assert "idle_priority_refused" not in worker.log()
        # Its threads, all checked below; on a busy machine some start after the banner.
        wait_for(lambda: len(os.listdir(f"/proc/{process}/task")) > 4, timeout=60)
        for pid in [worker.pid, process, server[0], *extraction]:
            assert policies(pid) == {os.SCHED_IDLE}, (pid, command_line(pid))
        # The services' own worker was started without it: normal policy.
        assert policies(services.worker.pid) == {os.SCHED_OTHER}
    finally:
        worker.stop()
