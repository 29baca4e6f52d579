"""One worker process with many retrievals in flight: killed, an extraction hung, cancels.

These run a worker of their own in place of the session's (64 retrievals in flight, two
extraction processes) and spread the slow pages over eight origins, so the per-host politeness
limit (4 fetches per origin) lets 32 of them fetch at once.
"""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import ENV, Env, Services
from tests.faults.history import History
from tests.faults.test_faults import submit
from tests.support.pages import article, slow
from tests.support.services import Process, wait_for
from tests.support.slowdown import scaled
from tests.support.tls_site import TLSSite

ORIGINS = 8
IN_FLIGHT = 64
EXTRACT_PROCESSES = 2


@pytest.fixture(scope="module")
def origins() -> Iterator[list[TLSSite]]:
    """Eight more HTTPS origins (the session's CA), each serving slow articles."""
    sites = [TLSSite(ca=ENV.site.ca).start() for _ in range(ORIGINS)]
    for site in sites:
        site.add("/slow", slow)
    yield sites
    for site in sites:
        site.stop()


@pytest.fixture
def busy_worker(services: Services, env: Env, origins: list[TLSSite]) -> Iterator[Process]:
    """The session's worker replaced by one with many retrievals in flight, then restored."""
    ports = os.environ["EVIDENCE_FETCH_ALLOWED_PORTS"].split(",")
    ports += [str(site.port) for site in origins]
    extra = {
        "EVIDENCE_FETCH_ALLOWED_PORTS": ",".join(ports),
        "EVIDENCE_EXTRACT_PROCESSES": str(EXTRACT_PROCESSES),
    }
    original = services.worker
    original.stop()
    services.worker = Process(
        ["worker", "--queues", "retrievals,retrievals-batch", "--concurrency", str(IN_FLIGHT)]
        + ["--hostname", f"busy-{uuid.uuid4().hex[:6]}@%h"],
        env.tmp / "busy-worker.log",
        env=extra,
    )
    try:
        services.start_worker()
        # Another worker (the sweeper) may have answered the ping: wait for this one's own
        # worker process and its extraction processes.
        wait_for(lambda: len(extraction_processes(services.worker)) == EXTRACT_PROCESSES, 60)
        yield services.worker
    finally:
        services.worker.stop()
        services.worker = original
        services.start_worker()


def slow_urls(origins: list[TLSSite], count: int, seconds: float) -> list[str]:
    return [
        origins[n % len(origins)].url(f"/slow?s={seconds}&n={uuid.uuid4().hex}")
        for n in range(count)
    ]


def running(ids: list[str]) -> set[str]:
    """Which of `ids` the database has `running` now."""
    from worker.store import db
    from worker.store.models import Retrieval

    table = Retrieval.__table__  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        found = session.execute(
            sa.select(table.c.id).where(
                table.c.id.in_([uuid.UUID(i) for i in ids]), table.c.state == "running"
            )
        ).scalars()
        return {str(i) for i in found}


def children(pid: int) -> list[int]:
    out: list[int] = []
    for thread in os.listdir(f"/proc/{pid}/task"):
        out += [int(p) for p in Path(f"/proc/{pid}/task/{thread}/children").read_text().split()]
    return out


def extraction_processes(worker: Process) -> list[int]:
    """The worker's extraction processes (children of its fork server); [] while starting."""
    try:
        nodes = worker.children()
        cmdlines = {p: Path(f"/proc/{p}/cmdline").read_bytes() for n in nodes for p in children(n)}
        servers = [p for p, cmdline in cmdlines.items() if b"forkserver" in cmdline]
        return [pid for server in servers for pid in children(server)]
    except OSError:  # a process ended while we looked
        return []


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle(pids: set[int]) -> bool:
    """Every process asleep and using no CPU for half a second (started, waiting for work)."""
    before = {pid: cpu_seconds(pid) for pid in pids}
    time.sleep(0.5)
    states = {Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] for pid in pids}
    return states == {"S"} and all(cpu_seconds(pid) == before[pid] for pid in pids)


def heavy_article(marker: str) -> str:
    """A 4.5 MB article: its extraction takes a second or more of CPU (0.25 s per MB)."""
    words = ["lake", "oxygen", "summer", "dawn", "dusk", "sample", "water", "mountain", "season"]
    rng = random.Random(marker)
    paragraphs = (
        f"<div><p>{' '.join(rng.choice(words) for _ in range(250))}</p></div>" for _ in range(2600)
    )
    return f"<html><body><h1>{marker}</h1>{''.join(paragraphs)}</body></html>"


class TestManyInFlight:
    """Faults in a process that holds dozens of retrievals at once."""

    def test_sigkill_mid_batch_loses_none(
        self,
        history: History,
        busy_worker: Process,
        origins: list[TLSSite],
        max_attempts: int,
    ) -> None:
        """SIGKILL of the worker process while 32 fetches are in flight: it is replaced, and
        after the lease and the sweep every retrieval completes (the killed ones on attempt 2),
        one revision each."""
        ids = submit(history, slow_urls(origins, 32, 3))
        wait_for(lambda: len(running(ids)) >= 24, timeout=30, interval=0.1)
        held = running(ids)
        (node,) = busy_worker.children()
        os.kill(node, signal.SIGKILL)
        rows = history.check(max_attempts, settle_timeout=90)
        assert len(rows) == 32
        assert all(r.state == "completed" and r.result["status"] == "ready" for r in rows), [
            (r.state, r.result and r.result["reason"]) for r in rows
        ]
        assert all(r.attempt == 2 for r in rows if str(r.id) in held)
        assert busy_worker.alive() and busy_worker.children() not in ([], [node])

    def test_hung_extraction_is_reported_and_others_go_on(
        self,
        history: History,
        busy_worker: Process,
        site: TLSSite,
        max_attempts: int,
    ) -> None:
        """An extraction process stopped (SIGSTOP) while it works on a page: that retrieval is
        unavailable/timeout at its deadline, the process is killed and replaced, and the
        retrievals in flight beside it (and after it) complete."""
        pids = set(extraction_processes(busy_worker))
        wait_for(lambda: idle(pids), timeout=30)
        before = {pid: cpu_seconds(pid) for pid in pids}
        marker = uuid.uuid4().hex
        (heavy,) = submit(history, [site.page(f"/ft/heavy/{marker}", heavy_article(marker))])

        def busy() -> int | None:
            return next((p for p in pids if cpu_seconds(p) - before[p] >= 0.1), None)

        hung = wait_for(busy, timeout=20, interval=0.02)
        os.kill(hung, signal.SIGSTOP)  # type: ignore[arg-type]
        light = []
        for _ in range(6):
            path = f"/ft/light/{uuid.uuid4().hex}"
            light.append(site.page(path, article("Beside a hung extraction", marker=path)))
        beside = submit(history, light)
        rows = {str(r.id): r for r in history.check(max_attempts, settle_timeout=60)}
        result = rows[heavy].result
        assert rows[heavy].state == "completed" and rows[heavy].attempt == 1
        assert (result["status"], result["reason"]) == ("unavailable", "timeout")
        assert all(rows[i].result["status"] == "ready" for i in beside)
        wait_for(lambda: not Path(f"/proc/{hung}").exists() or _zombie(hung), timeout=20)  # type: ignore[arg-type]

        def replaced() -> set[int] | None:
            now = set(extraction_processes(busy_worker))
            return now if len(now) == EXTRACT_PROCESSES and hung not in now else None

        wait_for(replaced, timeout=20)
        path = f"/ft/after/{uuid.uuid4().hex}"
        (after,) = submit(history, [site.page(path, article("After the hang", marker=path))])
        done = history.api.wait(after)
        assert done["result"]["status"] == "ready"

    def test_cancel_in_flight(
        self,
        history: History,
        busy_worker: Process,
        origins: list[TLSSite],
        max_attempts: int,
    ) -> None:
        """Half of 16 in-flight retrievals cancelled while they fetch: they stay cancelled,
        with no evidence; the other half complete in the same process."""
        ids = submit(history, slow_urls(origins, 16, 2))
        wait_for(lambda: len(running(ids)) == 16, timeout=30, interval=0.1)
        cancelled = ids[::2]
        for rid in cancelled:
            response = history.cancel(rid)
            assert response is not None and response.status_code == 200
            assert response.json()["retrieval"]["state"] == "cancelled"
        time.sleep(scaled(3))  # the cancelled ones finish fetching and try to settle
        rows = {str(r.id): r for r in history.check(max_attempts)}
        for rid in cancelled:
            assert rows[rid].state == "cancelled" and rows[rid].evidence_id is None
        for rid in ids[1::2]:
            assert rows[rid].state == "completed" and rows[rid].result["status"] == "ready"
            assert rows[rid].attempt == 1


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
