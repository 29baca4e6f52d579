"""What one worker host needs: one `evidence worker`, idle and with its in-flight slots full.

Run: .venv/bin/python -m bench.worker_footprint [--in-flight 384] [--latency-ms 4000]

Starts a private PostgreSQL database and redis-server, the fixture site (bench.site) on enough
loopback origins that the per-origin limit never caps the in-flight count (one origin per
EVIDENCE_FETCH_PER_HOST_LIMIT slots), each page held `--latency-ms`, an API (one process, its
own small pool) to submit through, and one bare `evidence worker` as an operator runs it. It
measures the worker's process tree idle, then while at least 95 % of its slots run at once
(two waves of retrievals, `evidence enqueue --wait`):

* memory: RSS and PSS of every process of the tree (supervisor, worker, fork server,
  extraction processes), and their growth per in-flight retrieval;
* PostgreSQL: rows of `pg_stat_activity` whose client port is a socket of the tree;
* Redis: rows of `CLIENT LIST` whose port is a socket of the tree;
* CPU: the tree's CPU seconds per settled retrieval.

Sockets are matched to processes through /proc (Linux). Prints a table (stderr) and one JSON
line (stdout). Needs PostgreSQL (EVIDENCE_TEST_POSTGRES_URL) and redis-server on PATH.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis
from psycopg.conninfo import conninfo_to_dict
from rich.console import Console
from rich.table import Table

from bench import procstat
from bench.throughput import Site
from tests.support.services import (
    ROOT,
    RedisServer,
    create_postgres_database,
    drop_postgres_database,
    free_port,
    wait_for,
)
from worker.platform.settings import Settings

console = Console(stderr=True, width=120)
DEFAULTS = Settings.model_fields


def tcp_ports(pids: list[int], remote_port: int) -> dict[int, int]:
    """Local TCP port -> pid, for every TCP socket of the processes `pids` connected to
    `remote_port` (a local port may serve connections to several servers at once)."""
    owner: dict[str, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                owner[target[8:-1]] = pid
    ports: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as handle:
            next(handle)
            for line in handle:
                fields = line.split()
                inode, remote = fields[9], int(fields[2].rsplit(":", 1)[1], 16)
                if inode in owner and remote == remote_port:
                    ports[int(fields[1].rsplit(":", 1)[1], 16)] = owner[inode]
    return ports


def role(pid: int, root: int) -> str:
    """What a process of the worker's tree is, for the table."""
    line = procstat.cmdline(pid)
    if pid == root:
        return "supervisor"
    if "resource_tracker" in line:
        return "resource tracker"
    if "forkserver" in line:
        parent = _ppid(pid)
        return "extraction process" if "forkserver" in procstat.cmdline(parent) else "fork server"
    return "worker process"


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


class Footprint:
    """One reading of the worker's tree: memory, PostgreSQL and Redis connections per process."""

    def __init__(self, root: int, database: str, redis_port: int) -> None:
        self.root, self.database, self.redis_port = root, database, redis_port
        self.postgres_port = int(conninfo_to_dict(database).get("port") or 5432)

    def read(self) -> dict[str, Any]:
        pids = procstat.tree(self.root)
        ports = tcp_ports(pids, self.postgres_port)
        with psycopg.connect(self.database, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT client_port FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        pg = Counter(ports[port] for (port,) in rows if port in ports)
        with redis.Redis(port=self.redis_port) as client:
            clients = client.client_list()
        to_redis = tcp_ports(pids, self.redis_port)
        rd = Counter(
            to_redis[port]
            for c in clients
            if (port := int(c["addr"].rsplit(":", 1)[1])) in to_redis
        )
        # The last command of each of the tree's clients: which client a growing count is.
        commands = Counter(
            c["cmd"] for c in clients if int(c["addr"].rsplit(":", 1)[1]) in to_redis
        )
        processes = []
        for pid in pids:
            rss, pss = procstat.memory_mb(pid)
            processes.append(
                {
                    "pid": pid,
                    "role": role(pid, self.root),
                    "rss_mb": round(rss, 1),
                    "pss_mb": round(pss, 1),
                    "postgres": pg.get(pid, 0),
                    "redis": rd.get(pid, 0),
                }
            )
        return {
            "processes": processes,
            "rss_mb": round(sum(p["rss_mb"] for p in processes), 1),
            "pss_mb": round(sum(p["pss_mb"] for p in processes), 1),
            "postgres": sum(pg.values()),
            "redis": sum(rd.values()),
            "redis_last_commands": dict(commands.most_common(6)),
            "postgres_others": len(rows) - sum(pg.values()),
        }


def peak(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest of each figure over `readings`, with the per-process rows of the reading of
    the largest PSS."""
    top = max(readings, key=lambda r: r["pss_mb"])
    return top | {k: max(r[k] for r in readings) for k in ("rss_mb", "pss_mb", "postgres", "redis")}


def sample_while(
    submit: threading.Thread, footprint: Footprint, database: str, in_flight: int
) -> tuple[list[dict[str, Any]], int]:
    """Readings taken while at least 95 % of the slots run, until the submission is done and
    nothing is open; and the most retrievals seen running at once."""
    full: list[dict[str, Any]] = []
    most, threshold = 0, math.ceil(0.95 * in_flight)
    while True:
        now, still_open = counts(database)
        most = max(most, now)
        if now >= threshold:
            full.append(footprint.read() | {"running": now})
        if not submit.is_alive() and not still_open:
            break
        time.sleep(0.3)
    if not full:
        raise SystemExit(f"never {threshold} running at once (most {most})")
    return full, most


def counts(database: str) -> tuple[int, int]:
    """(retrievals running, retrievals open) in the database."""
    with psycopg.connect(database, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE state = 'running'),"
            " count(*) FILTER (WHERE state IN ('pending', 'running')) FROM retrieval"
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def submit_batch(cli: Any, api: str, urls: Path, tmp: Path) -> None:
    """Every URL through `evidence enqueue --wait`: the batch route, so the batch lane."""
    workspace = str(uuid.uuid4())
    key = cli("keys", "create", "--workspace", workspace).strip().splitlines()[-1]
    subprocess.run(
        [sys.executable, "-m", "api.cli", "enqueue", str(urls), "--workspace", workspace]
        + ["--kind", "url_text", "--wait", "--api", api, "--key", key, "--concurrency", "8"]
        + ["--poll-interval", "1", "--timeout", "600", "--out", str(tmp / "batch-out.jsonl")],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )


def submit_singles(cli: Any, api: str, urls: Path, _tmp: Path) -> None:
    """Every URL as a single POST, at most INTERACTIVE_OPEN_LIMIT per workspace, so every one
    runs in the interactive lane (claimed and settled one at a time)."""
    lines = urls.read_text().split()
    per = DEFAULTS["interactive_open_limit"].default
    workspaces = [str(uuid.uuid4()) for _ in range(math.ceil(len(lines) / per))]
    key = cli("keys", "create", *[w for ws in workspaces for w in ("--workspace", ws)])
    headers = {"Authorization": f"Bearer {key.strip().splitlines()[-1]}"}
    bodies = [
        {"url": url, "kind": "url_text", "workspace_id": workspaces[i // per]}
        | {"mutation_id": str(uuid.uuid4())}
        for i, url in enumerate(lines)
    ]
    with httpx.Client(base_url=api, headers=headers, timeout=30) as client:

        def post(body: dict[str, str]) -> None:
            # The same body again is idempotent: a 503 or 429 (the API's small pool, the
            # write rate) is retried after its Retry-After.
            for _ in range(60):
                answer = client.post("/research-api/evidence/retrieve", json=body)
                if answer.status_code not in (429, 503):
                    break
                time.sleep(float(answer.headers.get("Retry-After", "1")))
            answer.raise_for_status()

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(post, bodies))


SUBMIT = {"batch": submit_batch, "interactive": submit_singles}


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="worker-footprint-"))
    per_host = DEFAULTS["fetch_per_host_limit"].default
    hosts = math.ceil(args.in_flight / per_host)
    pages = 2 * args.in_flight
    site = Site(tmp, pages, hosts, args.latency_ms)
    redis_server = RedisServer(tmp).start()
    db_name, database_url = create_postgres_database()
    database = database_url.replace("postgresql+psycopg://", "postgresql://")
    service_url = database_url
    if args.pgbouncer:
        # The service's processes reach the database through pgbouncer (transaction pooling);
        # the bench's own readings go straight to PostgreSQL.
        host_port = database_url.split("@", 1)[1].split("/", 1)[0]
        service_url = database_url.replace(f"@{host_port}/", f"@{args.pgbouncer}/")
    env = os.environ | {
        "EVIDENCE_DATABASE_URL": service_url,
        "EVIDENCE_BROKER_URL": redis_server.url,
        "EVIDENCE_EGRESS_ALLOW_CIDRS": "127.0.0.0/24",
        "EVIDENCE_CA_BUNDLE": str(site.info["ca"]),
        "EVIDENCE_FETCH_ALLOWED_PORTS": str(site.info["port"]),
        "EVIDENCE_WORKER_IN_FLIGHT": str(args.in_flight),
        "EVIDENCE_LOG_JSON": "true",
    }
    if args.pgbouncer:
        env["EVIDENCE_DB_PREPARED_STATEMENTS"] = "false"  # deploy/README.md: pgbouncer < 1.21
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(
        name: str, *argv: str, extra: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with open(tmp / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "api.cli", *argv],
                cwd=ROOT,
                env=env | (extra or {}),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        procs.append(proc)
        return proc

    def cli(*argv: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "api.cli", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    try:
        cli("migrate")
        api = f"http://127.0.0.1:{free_port()}"
        # The API only submits: one process and a small pool, so the shared PostgreSQL's
        # connections go to the worker being measured.
        spawn(
            "api",
            "api",
            "--port",
            api.rsplit(":", 1)[1],
            "--workers",
            "1",
            extra={"EVIDENCE_DB_POOL_SIZE": "4"},
        )
        worker = spawn("worker", "worker", "--hostname", f"footprint-{uuid.uuid4().hex[:6]}@%h")
        wait_for(lambda: _answers(f"{api}/healthz"), timeout=60, interval=0.3)
        wait_for(lambda: " ready." in (tmp / "worker.log").read_text(errors="replace"), 90, 0.3)
        time.sleep(args.settle)
        footprint = Footprint(worker.pid, database, redis_server.port)
        idle = footprint.read()

        lanes = {}
        for lane in ("batch", "interactive"):
            cpu_before, started = procstat.tree_cpu(worker.pid), time.perf_counter()
            submit = threading.Thread(
                target=SUBMIT[lane], args=(cli, api, site.urls, tmp), daemon=True
            )
            submit.start()
            full, most = sample_while(submit, footprint, database, args.in_flight)
            seconds = time.perf_counter() - started
            cpu = procstat.tree_cpu(worker.pid) - cpu_before
            with psycopg.connect(database) as conn:
                states = dict(
                    conn.execute(
                        "SELECT state, count(*) FROM retrieval WHERE lane = %s GROUP BY state",
                        (lane,),
                    ).fetchall()
                )
            settled = sum(v for k, v in states.items() if k not in ("pending", "running"))
            loaded = peak(full)
            lanes[lane] = {
                "states": states,
                "most_running": most,
                "full_readings": len(full),
                "seconds": round(seconds, 1),
                "cpu_ms_per_retrieval": round(1000 * cpu / max(settled, 1), 1),
                "full": loaded,
                "mb_per_in_flight_pss": round((loaded["pss_mb"] - idle["pss_mb"]) / most, 3),
                "mb_per_in_flight_rss": round((loaded["rss_mb"] - idle["rss_mb"]) / most, 3),
            }
        after = footprint.read()
        return {
            "in_flight": args.in_flight,
            "origins": hosts,
            "latency_ms": args.latency_ms,
            "pgbouncer": args.pgbouncer,
            "pages": pages,
            "cpus": os.cpu_count(),
            "idle": idle,
            "lanes": lanes,
            "after": after,
        }
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
        site.stop()
        redis_server.stop()
        drop_postgres_database(db_name)
        shutil.rmtree(tmp, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def show(result: dict[str, Any]) -> None:
    idle, lanes = result["idle"], result["lanes"]
    table = Table(
        title=(
            f"one evidence worker, {result['in_flight']} in flight, {result['origins']} origins "
            f"x {result['latency_ms']} ms, {result['cpus']} CPUs"
        )
    )
    table.add_column("")
    table.add_column("idle", justify="right")
    for lane, figures in lanes.items():
        table.add_column(f"{lane}, {figures['full']['running']} running", justify="right")
    full = [figures["full"] for figures in lanes.values()]
    rows = [
        ("PSS, whole tree (MB)", "pss_mb", "{:.0f}"),
        ("RSS summed (MB)", "rss_mb", "{:.0f}"),
        ("PostgreSQL connections", "postgres", "{}"),
        ("Redis connections", "redis", "{}"),
    ]
    for name, field, form in rows:
        table.add_row(name, form.format(idle[field]), *(form.format(f[field]) for f in full))
    per = [lanes[lane] for lane in lanes]
    rows2 = [
        ("MB per in-flight (PSS / RSS)", "{mb_per_in_flight_pss:.2f} / {mb_per_in_flight_rss:.2f}"),
        ("CPU ms per retrieval", "{cpu_ms_per_retrieval}"),
        ("settled / seconds", "{states} / {seconds}"),
    ]
    for name, form in rows2:
        table.add_row(name, "", *(form.format(**f) for f in per))
    cell = "{pss_mb:.0f} MB, pg {postgres}, redis {redis}"
    for process in idle["processes"]:
        found = [
            next((p for p in f["processes"] if p["pid"] == process["pid"]), None) for f in full
        ]
        cells = [cell.format(**p) if p else "-" for p in found]
        table.add_row(f"  {process['role']} {process['pid']}", cell.format(**process), *cells)
    console.print(table)
    after = result["after"]
    console.print(f"after both: PostgreSQL {after['postgres']}, Redis {after['redis']} connections")
    for lane, figures in lanes.items():
        console.print(
            f"{lane}: Redis clients by last command {figures['full']['redis_last_commands']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=DEFAULTS["worker_in_flight"].default)
    parser.add_argument("--latency-ms", type=int, default=4000, help="each page held this long")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds idle before reading")
    parser.add_argument(
        "--pgbouncer",
        metavar="HOST:PORT",
        help="the service reaches PostgreSQL through this pgbouncer (transaction pooling): the "
        "worker's rows in pg_stat_activity are then pgbouncer's (see postgres_others)",
    )
    result = run(parser.parse_args())
    show(result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
