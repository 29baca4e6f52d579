"""The real processes keep to their CPUs: the worker's threads to one, its extraction processes
to all, each of `evidence api --workers 2`'s processes to one of its own
(worker/platform/cpu_pin.py)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from api.serving.cpu_claims import CLAIMS_ENV
from tests.conftest import Services
from tests.support.procfs import children, command_line
from tests.support.services import Process, free_port, wait_for

ALLOWED = frozenset(os.sched_getaffinity(0))  # what every process started here may use


def thread_cpus(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of `pid`."""
    cpus = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            cpus.add(frozenset(os.sched_getaffinity(int(tid))))
        except ProcessLookupError:
            continue
    return cpus


def test_worker_threads_keep_to_one_cpu_its_extraction_processes_to_all(
    services: Services,
) -> None:
    (worker,) = children(services.worker.pid)  # the supervisor's one child
    servers = [p for p in children(worker) if "forkserver" in command_line(p)]
    assert len(servers) == 1
    extraction = wait_for(lambda: children(servers[0]), timeout=60)
    assert isinstance(extraction, list) and extraction
    cpus = thread_cpus(worker)
    if len(ALLOWED) >= 2:
        assert len(cpus) == 1
        (pinned,) = cpus
        assert len(pinned) == 1 and pinned <= ALLOWED
    else:  # nothing to choose from: left as it was
        assert cpus == {ALLOWED}
    # Forked pinned (from the worker's fork server), each takes every CPU back as it starts.
    wait_for(lambda: all(thread_cpus(pid) == {ALLOWED} for pid in extraction), timeout=30)


def test_each_api_process_keeps_to_a_cpu_of_its_own(tmp_path: Path) -> None:
    port = free_port()
    claims: str | None = None
    api = Process(["api", "--port", str(port), "--workers", "2"], tmp_path / "api.log").start()
    try:
        wait_for(lambda: _healthy(port), timeout=60, interval=0.3)
        served = wait_for(lambda: len(children(api.pid)) >= 2 and children(api.pid), timeout=30)
        assert isinstance(served, list)
        processes = [p for p in served if "spawn_main" in command_line(p)]
        assert len(processes) == 2, api.log()
        if len(ALLOWED) >= 2:
            # Each pins itself as it starts, and the first may serve before the second has.
            pinned = wait_for(lambda: _each_on_one_cpu(processes), timeout=30)
            assert isinstance(pinned, list)
            first, second = pinned
            assert first != second and first | second <= ALLOWED
        else:
            assert [thread_cpus(pid) for pid in processes] == [{ALLOWED}, {ALLOWED}]
        assert thread_cpus(api.pid) == {ALLOWED}  # the parent only starts them
        claims = _environment(processes[0]).get(CLAIMS_ENV)
        assert (claims is not None) == (len(ALLOWED) >= 2)
    finally:
        api.stop()
    if claims is not None:
        assert not Path(claims).exists()  # removed when the command ends


def _each_on_one_cpu(pids: list[int]) -> list[frozenset[int]] | None:
    """The one CPU set of each process's threads, once each has one of one CPU; else None."""
    per_process = [thread_cpus(pid) for pid in pids]
    if all(len(cpus) == 1 and len(next(iter(cpus))) == 1 for cpus in per_process):
        return [next(iter(cpus)) for cpus in per_process]
    return None


def _environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
