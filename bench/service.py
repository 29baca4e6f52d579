"""The service under test: PostgreSQL database, private Redis, API, worker and beat processes.

Everything runs as it would in production (`python -m api.cli api|beat`, the worker through
`bench.probe`, which only adds CPU probes), on loopback, with robots.txt obeyed. Each
measured batch goes to a fresh workspace, so every repetition records new evidence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench import procstat
from tests.support.services import (
    ROOT,
    RedisServer,
    create_postgres_database,
    drop_postgres_database,
    free_port,
    wait_for,
)


@dataclass
class Batch:
    """What one `evidence enqueue --wait` batch measured."""

    pages: int
    ready: int
    states: dict[str, int]
    seconds: float  # first accepted POST to last settlement (database clocks)
    client_seconds: float  # the enqueue command's wall time, polling rounds included
    cpu: dict[str, float]  # CPU seconds per component during the batch
    probe: dict[str, float]  # worker children's CPU split (bench.probe)
    rss: procstat.MemorySampler
    in_flight: int  # most retrievals of the batch `running` at once (sampled)
    busy: float  # share of the machine's cores busy while any of them ran (sampled)


class Stack:
    """Database, Redis, API, worker and beat for one site; use as a context manager."""

    def __init__(
        self,
        tmp: Path,
        site: dict[str, object],
        concurrency: int | None = None,
        client_concurrency: int = 16,
        pool: str | None = None,
    ) -> None:
        self.tmp, self.site, self.concurrency = tmp, site, concurrency
        self.client_concurrency = client_concurrency
        self.pool = pool  # None: the default (threads)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.db_name: str | None = None
        self.probe_dir = tmp / "probe"
        self.probe_dir.mkdir(exist_ok=True)

    def _spawn(self, name: str, module: str, *args: str) -> subprocess.Popen[bytes]:
        # The child gets its own copy of the descriptor: ours is closed as soon as it started.
        with open(self.tmp / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def cli(self, *args: str) -> str:
        """Run `evidence ARGS` to completion; its stdout."""
        done = subprocess.run(
            [sys.executable, "-m", "api.cli", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def start(self) -> Stack:
        """Create the database, start Redis, migrate, start API, worker and beat."""
        self.redis = RedisServer(self.tmp).start()
        self.db_name, self.database_url = create_postgres_database()
        self.api_url = f"http://127.0.0.1:{free_port()}"
        self.env = os.environ | {
            "EVIDENCE_DATABASE_URL": self.database_url,
            "EVIDENCE_BROKER_URL": self.redis.url,
            "EVIDENCE_EGRESS_ALLOW_CIDRS": "127.0.0.0/24",
            "EVIDENCE_CA_BUNDLE": str(self.site["ca"]),
            "EVIDENCE_FETCH_ALLOWED_PORTS": str(self.site["port"]),
            "EVIDENCE_ROBOTS_TXT": "true",
            "BENCH_PROBE_DIR": str(self.probe_dir),
        }
        self.cli("migrate")
        port = self.api_url.rsplit(":", 1)[1]
        self._spawn("api", "api.cli", "api", "--port", port)
        hostname = f"bench-{uuid.uuid4().hex[:6]}@%h"
        args = ["worker", "--hostname", hostname]
        if self.concurrency:
            args += ["--concurrency", str(self.concurrency)]
        args += ["--pool", self.pool] if self.pool else []
        self._spawn("worker", "bench.probe", *args)
        self._spawn("beat", "api.cli", "beat", "--schedule", str(self.tmp / "beat-schedule"))
        wait_for(self._api_ready, timeout=60, interval=0.3)
        wait_for(self._worker_ready, timeout=60, interval=0.3)
        return self

    def _api_ready(self) -> bool:
        try:
            return httpx.get(f"{self.api_url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def _worker_ready(self) -> bool:
        worker = self.procs["worker"].pid
        processes = self.concurrency if self.pool == "prefork" else 1
        return len(procstat.children(worker)) >= (processes or 1) and "ready" in (
            (self.tmp / "worker.log").read_text(errors="replace")
        )

    def stop(self) -> None:
        """Stop every process, Redis, and drop the database."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
        self.redis.stop()
        if self.db_name:
            drop_postgres_database(self.db_name)

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each component (the site is added by the caller)."""
        out = {name: procstat.tree_cpu(proc.pid) for name, proc in self.procs.items()}
        pool = procstat.forkserver_trees(self.procs["worker"].pid)
        out["extract_pool"] = sum(procstat.cpu_seconds(p) for p in pool)
        out["redis"] = procstat.tree_cpu(self.redis.proc.pid) if self.redis.proc else 0.0
        out["machine"] = procstat.machine_cpu()
        return out

    def run_batch(self, urls: Path, poll_interval: float, cpu_of_site: float) -> Batch:
        """Submit `urls` with `evidence enqueue --wait` into a fresh workspace; measure it."""
        workspace = str(uuid.uuid4())
        key = self.cli("keys", "create", "--workspace", workspace).strip().splitlines()[-1]
        before = self.cpu() | {"site": cpu_of_site}
        probe_before = _probe(self.probe_dir)
        worker = self.procs["worker"].pid
        sampler = procstat.MemorySampler([worker]).start()
        in_flight = InFlight(self.database_url, workspace).start()
        pg_before = self._postgres_cpu()
        started = time.perf_counter()
        log = open(self.tmp / "enqueue.log", "wb")  # noqa: SIM115
        with log:
            client = subprocess.Popen(
                [sys.executable, "-m", "api.cli", "enqueue", str(urls), "--workspace", workspace]
                + ["--kind", "url_text", "--wait", "--api", self.api_url, "--key", key]
                + ["--concurrency", str(self.client_concurrency)]
                + ["--poll-interval", str(poll_interval)]
                + ["--out", str(self.tmp / "enqueue-out.jsonl")],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            _, status, usage = os.wait4(client.pid, 0)
        client.returncode = os.waitstatus_to_exitcode(status)
        client_seconds = time.perf_counter() - started
        sampler.stop()
        in_flight.stop()
        if client.returncode != 0:
            tail = (self.tmp / "enqueue.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"evidence enqueue failed: {tail}")
        cpu = {name: value - before.get(name, 0.0) for name, value in self.cpu().items()}
        pg_after = self._postgres_cpu()
        cpu["postgres"] = sum(v - pg_before.get(pid, 0.0) for pid, v in pg_after.items())
        cpu["client"] = usage.ru_utime + usage.ru_stime
        probe = {k: v - probe_before.get(k, 0.0) for k, v in _probe(self.probe_dir).items()}
        states, ready, seconds = wait_for(lambda: _try(self._outcome, workspace), 60, 1.0)
        return Batch(
            pages=sum(states.values()),
            ready=ready,
            states=states,
            seconds=seconds,
            client_seconds=client_seconds,
            cpu=cpu,
            probe=probe,
            rss=sampler,
            in_flight=in_flight.peak,
            busy=in_flight.busy_share(),
        )

    def _postgres_cpu(self) -> dict[int, float]:
        """CPU seconds of each PostgreSQL backend serving this database, by pid."""
        url = self.database_url.replace("postgresql+psycopg://", "postgresql://")
        try:
            with psycopg.connect(url) as conn:
                pids = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid()"
                ).fetchall()
        except psycopg.OperationalError:  # e.g. too many clients: the figure is left out
            return {}
        return {int(pid): procstat.cpu_seconds(int(pid), reaped=False) for (pid,) in pids}

    def _outcome(self, workspace: str) -> tuple[dict[str, int], int, float]:
        """(count per state, results with text, first created → last settled in seconds)."""
        url = self.database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT state, count(*),"
                " count(*) FILTER (WHERE result->>'status' IN ('ready', 'partial')),"
                " min(created_at), max(settled_at) FROM retrieval WHERE workspace_id = %s"
                " GROUP BY state",
                (workspace,),
            ).fetchall()
        states = {row[0]: int(row[1]) for row in rows}
        ready = sum(int(row[2]) for row in rows)
        first = min(row[3] for row in rows)
        last = max(row[4] for row in rows if row[4] is not None)
        return states, ready, (last - first).total_seconds()


class InFlight:
    """Samples how many of a workspace's retrievals are `running`, twice a second, and how
    busy the machine was meanwhile."""

    def __init__(self, database_url: str, workspace: str) -> None:
        self.url = database_url.replace("postgresql+psycopg://", "postgresql://")
        self.workspace, self.peak = workspace, 0
        #: (monotonic seconds, the machine's busy CPU seconds, retrievals running) per sample.
        self.samples: list[tuple[float, float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.wait(0.5):
                (count,) = conn.execute(
                    "SELECT count(*) FROM retrieval WHERE workspace_id = %s AND state = 'running'",
                    (self.workspace,),
                ).fetchone() or (0,)
                self.peak = max(self.peak, int(count))
                self.samples.append((time.monotonic(), procstat.machine_cpu(), int(count)))

    def start(self) -> InFlight:
        self._thread.start()
        return self

    def busy_share(self) -> float:
        """The share of the machine's cores busy from the first to the last sample that saw a
        retrieval running (the client's start-up and its last poll's wait left out)."""
        active = [i for i, (_, _, running) in enumerate(self.samples) if running]
        if len(active) < 2:
            return 0.0
        (t0, cpu0, _), (t1, cpu1, _) = self.samples[active[0]], self.samples[active[-1]]
        return procstat.busy_share(cpu1 - cpu0, t1 - t0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _try(fn: Any, *args: Any) -> Any:
    """`fn(*args)`, or None when the database refuses a connection for now."""
    try:
        return fn(*args)
    except psycopg.OperationalError:
        return None


def _probe(directory: Path) -> dict[str, float]:
    from bench.probe import read_totals

    try:
        return read_totals(directory)
    except (OSError, json.JSONDecodeError):
        return {}
