"""`evidence worker --cpu-share weight|nice`: the supervisor, the worker process, every thread of
it (one started for a task after start-up too), its fork server and its extraction processes
all carry the share set (worker/platform/cpu_share.py). Nothing runs under SCHED_IDLE, so no
wait here can be for a starved process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import Services
from tests.support.procfs import children, command_line
from tests.support.services import Process, wait_for
from worker.platform import cpu_share

#: A queue nobody else publishes to: this test's worker takes no other test's work.
SHARE_QUEUE = "cpu-share-test"


def tasks(pid: int) -> set[int]:
    """The thread ids of `pid`."""
    return {int(tid) for tid in os.listdir(f"/proc/{pid}/task")}


def cpu_groups(pid: int) -> set[str]:
    """The cpu-controller cgroup of every thread of `pid` (v1's cpu line, else v2's)."""
    found = set()
    for tid in tasks(pid):
        try:
            lines = Path(f"/proc/{pid}/task/{tid}/cgroup").read_text().splitlines()
        except FileNotFoundError:
            continue
        paths = {c: p for _, c, p in (line.split(":", 2) for line in lines)}
        cpu = [p for c, p in paths.items() if "cpu" in c.split(",")]
        found.add(cpu[0] if cpu else paths.get("", ""))
    return found


def nice_values(pid: int) -> set[int]:
    """The nice value of every thread of `pid`."""
    found = set()
    for tid in tasks(pid):
        try:
            found.add(os.getpriority(os.PRIO_PROCESS, tid))
        except ProcessLookupError:
            continue
    return found


def policies(pid: int) -> set[int]:
    """The scheduling policies of every thread of `pid`."""
    found = set()
    for tid in tasks(pid):
        try:
            found.add(os.sched_getscheduler(tid))
        except ProcessLookupError:
            continue
    return found


def run_a_task(queue: str) -> str:
    """Send Celery's built-in `celery.accumulate` (it returns its argument) to `queue`, on a
    connection of its own (a test that restarted Redis leaves pooled ones dead); its id."""
    # Imported here: the app configures itself from the services' environment.
    from worker.jobs.celery_app import app

    with app.connection_for_write() as connection:
        result = app.send_task("celery.accumulate", args=(1,), queue=queue, connection=connection)
    return str(result.id)


def started_tree(options: list[str], log: Path) -> tuple[Process, list[int]]:
    """A worker on its own queue with `options`, once ready and one task has run (so its pool
    holds a thread started after the share was set): it and every pid of its tree."""
    worker = Process(
        [
            "worker",
            "--queues",
            SHARE_QUEUE,
            "--concurrency",
            "4",
            "--hostname",
            "share@%h",
            *options,
        ],
        log,
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
        before = tasks(process)
        task_id = run_a_task(SHARE_QUEUE)
        wait_for(lambda: f"{task_id}] succeeded" in worker.log(), timeout=60)
        assert tasks(process) - before, worker.log()
    except BaseException:
        worker.stop()
        raise
    return worker, [worker.pid, process, server[0], *extraction]


def cgroups_here() -> bool:
    try:
        cpu_share.cpu_hierarchy()
    except cpu_share.CgroupUnavailable:
        return False
    return os.access("/sys/fs/cgroup", os.W_OK)


@pytest.mark.skipif(not cgroups_here(), reason="no writable cgroup cpu controller here")
def test_weight_puts_the_whole_tree_in_one_group_with_its_weight(
    services: Services, tmp_path: Path
) -> None:
    worker, tree = started_tree(["--cpu-share", "weight", "--cpu-weight", "50"], tmp_path / "w.log")
    _, _, own = cpu_share.cpu_hierarchy(own=Path(f"/proc/{worker.pid}/cgroup"))
    try:
        assert "cpu_share_fallback" not in worker.log()
        (group,) = cpu_groups(worker.pid)
        assert group.endswith(f"/evidence-worker-{worker.pid}"), group
        for pid in tree:
            assert cpu_groups(pid) == {group}, (pid, command_line(pid))
            assert policies(pid) == {os.SCHED_OTHER}, (pid, command_line(pid))
        assert cpu_share.group_weight(own) == 50
        # No nice on top of the weight: the supervisor and the worker at their parent's.
        assert nice_values(worker.pid) == {os.getpriority(os.PRIO_PROCESS, 0)}
    finally:
        worker.stop()
    # The supervisor removes its group as it leaves, when nothing is left in it.
    wait_for(lambda: not own.exists(), timeout=30)


def test_nice_lowers_every_process_and_thread(services: Services, tmp_path: Path) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    worker, tree = started_tree(["--cpu-share", "nice", "--nice", "7"], tmp_path / "w.log")
    try:
        worker_tree = tree[:2]  # the supervisor and the worker process
        for pid in worker_tree:
            assert nice_values(pid) == {min(19, base + 7)}, (pid, command_line(pid))
        for pid in tree:
            assert policies(pid) == {os.SCHED_OTHER}, (pid, command_line(pid))
            # The extraction processes add EVIDENCE_EXTRACT_NICE on top.
            assert min(nice_values(pid)) >= min(19, base + 7), (pid, command_line(pid))
    finally:
        worker.stop()
