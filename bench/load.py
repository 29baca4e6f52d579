"""Load test: POST-then-poll at a fixed rate against the running service, on loopback.

Starts its own PostgreSQL database, private Redis, the fixture site (bench.site: `--pages` pages
over `--hosts` loopback origins, the issue's 600 over 16 by default; the POSTs take them in
turn), the API, a retrieval
worker, the sweeper and beat; runs `--warm-up` retrievals through them (16 at a time, in a
workspace of their own, outside the figures: the measured minute is sustained load, not a cold
start); then one or more *other processes* (`python -m bench.load client`: `bench.lean_http`
on uvloop, a bounded pool of keep-alive connections) send POSTs open-loop at `--rate` per
second for `--duration` seconds (each request is scheduled at its own time, whatever earlier
ones are doing, so slow answers cannot hide themselves), and poll each retrieval with GET until
it settles, honouring the API's `Retry-After` (else backing off 1.5x per poll up to 8 s).

A load client that cannot keep up measures its own queueing, not the API. So the client
reports how late its POSTs left versus their schedule (send lag), how late its event loop woke
(loop lag, a 20 ms ticker), how long requests waited for a pooled connection (excluded from the
API's latency, reported beside it), and its own CPU (`getrusage`); the orchestrator adds the
CPU of the API, workers, PostgreSQL and the machine from /proc, and the API's own request
histogram from /metrics (what the app measured, without accept queues or the client). A client
near 100 % of a core, or with a send lag p99 beyond a few milliseconds, is saturated or starved
of CPU: use more `--client-processes` (they split the rate and interleave their schedules), or
`--client-nice`.

The workers and the page server run at `--worker-nice`; each service has its own session, so
the bench also sets the nice value of the workers' autogroup (Linux shares CPU between sessions
first; without it a worker's own nice value ranks it only against itself).

A client can also be one side of a split client (bench.overload): `--ids-out` appends each
retrieval it created to a file (bench.id_file), and `--poll-ids` makes a client that sends no
POSTs and polls what such clients append, so POSTs are timed on a loop of their own.

It reports latency p50/p99/max per route, error counts, settle times (seen by the client, and
`settled_at - created_at` in the database once the workers drained the backlog), 10-second
windows, and the CPU split, as tables and one JSON line.

Run: python -m bench.load --rate 200 --duration 60
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SETTLED = {"completed", "cancelled", "unconfirmed", "expired"}
POST, GET = "POST retrieve", "GET retrieval"
RETRIEVE_PATH = "/research-api/evidence/retrieve"
RETRIEVAL_PATH = "/research-api/evidence/retrievals/{id}"
MAX_POLL_INTERVAL = 8.0  # the client's own back-off cap, when the API gives no Retry-After
MAX_RETRY_AFTER = 300.0  # a longer Retry-After is capped here (the API says at most 120 s)
WINDOW_SECONDS = 10
TICK_SECONDS = 0.02
TAIL_SECONDS = 0.005  # a poller's look for new retrievals: its first poll is at most this late


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


def cpu_self() -> float:
    """CPU seconds (user + system) this process has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def parse_retry_after(value: str | None) -> float | None:
    """A Retry-After in seconds (the API sends integers), or None."""
    if not value:
        return None
    try:
        return min(MAX_RETRY_AFTER, max(0.0, float(value)))
    except ValueError:
        return None


# The client: runs in its own process(es).
class Recorder:
    """What one client process saw. Times are seconds since the schedule's start."""

    def __init__(self) -> None:
        #: (sent at, ms from request to answer, of which ms waiting for a pooled connection)
        self.requests: dict[str, list[tuple[float, float, float]]] = {POST: [], GET: []}
        self.errors: dict[str, int] = {}
        self.send_lag_ms: list[float] = []
        self.loop_lag_ms: list[float] = []
        self.pool_wait_ms: list[float] = []
        self.settle_s: list[float] = []
        self.retry_after: list[float] = []
        self.unsettled = 0
        self.abandoned = 0
        self.posts_answered = 0

    def error(self, key: str) -> None:
        self.errors[key] = self.errors.get(key, 0) + 1


async def _client(args: argparse.Namespace) -> dict[str, Any]:
    from urllib.parse import urlsplit

    from bench.id_file import Appender, Created, Tail
    from bench.lean_http import HttpError, Pool

    rec = Recorder()
    loop = asyncio.get_running_loop()
    urls = Path(args.urls).read_text().split() if args.urls else [args.url]
    # Every process follows one global schedule (slot i is due at start + i / rate) and takes
    # every `count`-th slot of it, so N processes together send at `rate`, evenly spaced.
    count, index = args.process_count, args.process_index
    slots = [i for i in range(int(args.rate * args.duration)) if i % count == index]
    # --poll-ids: a poller only, of the retrievals other processes' POSTs append to that file
    # (bench.id_file), line i to the process whose index is i % count; it sends no POSTs.
    if args.poll_ids:
        if not args.stop_after:
            raise SystemExit("--poll-ids needs --stop-after: a poller cannot tell the POSTs ended")
        slots = []
    created_out = Appender(Path(args.ids_out)) if args.ids_out else None
    # --get-ids: each slot GETs one of these retrievals (a read flood) instead of POSTing.
    flood_ids = Path(args.get_ids).read_text().split() if args.get_ids else []
    poll_mode = args.poll_mode
    if poll_mode == "honour" and not args.honor_retry_after:
        poll_mode = "backoff"
    if args.start_at:
        start = time.perf_counter() + max(0.0, args.start_at - time.time())
    else:
        start = time.perf_counter() + 0.5
    stop = start + args.stop_after if args.stop_after else float("inf")
    done = asyncio.Event()
    api = urlsplit(args.api)
    headers = {"Authorization": f"Bearer {args.key}"}
    host, port = api.hostname or "127.0.0.1", api.port or 80
    # Pollers that ignore Retry-After hold every connection they may: on a pool of their own,
    # the POSTs still leave on schedule, as they would from a client's separate writers.
    poll_pool = Pool(host, port, args.poll_connections, headers) if args.poll_connections else None
    pool = poll_pool if args.poll_ids and poll_pool else Pool(host, port, args.connections, headers)
    poll_pool = poll_pool or pool

    async def call(
        route: str, method: str, path: str, body: bytes = b"", via: Pool = pool
    ) -> tuple[int, Any, str | None]:
        """One request: (status, JSON body or None, Retry-After); status 0 on a client error."""
        began = time.perf_counter()
        try:
            answer, pool_wait_ms = await via.request(method, path, body)
        except HttpError as exc:
            rec.error(f"{route}: {exc.kind}")
            return 0, None, None
        ended = time.perf_counter()
        if pool_wait_ms:
            rec.pool_wait_ms.append(pool_wait_ms)
        rec.requests[route].append((began - start, (ended - began) * 1000, pool_wait_ms))
        if answer.status not in (200, 202):
            rec.error(f"{route}: HTTP {answer.status}")
            return answer.status, None, answer.retry_after
        return answer.status, json.loads(answer.body), answer.retry_after

    async def one(slot: int, due: float) -> None:
        rec.send_lag_ms.append((time.perf_counter() - due) * 1000)
        if flood_ids:
            await call(GET, "GET", RETRIEVAL_PATH.format(id=flood_ids[slot % len(flood_ids)]))
            rec.posts_answered += 1
            return
        payload = {
            "url": urls[slot % len(urls)],
            "kind": "url_text",
            "workspace_id": args.workspace,
            "mutation_id": str(uuid.uuid4()),
        }
        _, body, hint = await call(POST, "POST", RETRIEVE_PATH, json.dumps(payload).encode())
        rec.posts_answered += 1
        if body is not None and created_out:
            got = body["retrieval"]
            created_out.write(Created(got["id"], due - start, got["state"]))
        if body is None or poll_mode == "none":
            return
        await follow(body["retrieval"], hint, due)

    async def follow(retrieval: dict[str, Any], hint: str | None, due: float) -> None:
        """Poll `retrieval` (POSTed at `due`) until it settles, as `--poll-mode` says."""
        path = RETRIEVAL_PATH.format(id=retrieval["id"])
        deadline = due + args.settle_timeout
        interval = args.poll_interval
        while retrieval["state"] not in SETTLED:
            hinted = parse_retry_after(hint) if poll_mode == "honour" else None
            if poll_mode == "ignore":  # as many real clients do: again at once, whatever it says
                wait = args.poll_gap
            elif hinted is not None:
                wait = hinted
                rec.retry_after.append(wait)
            else:
                wait, interval = interval, min(interval * 1.5, MAX_POLL_INTERVAL)
            if time.perf_counter() + wait > deadline:
                rec.unsettled += 1
                return
            await asyncio.sleep(wait)
            _, got, hint = await call(GET, "GET", path, via=poll_pool)
            if got is not None:
                retrieval = got["retrieval"]
        rec.settle_s.append(time.perf_counter() - due)

    async def ticker() -> None:
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(TICK_SECONDS)
            rec.loop_lag_ms.append(max(0.0, (time.perf_counter() - before - TICK_SECONDS) * 1000))

    # Open the pool before the first POST is due, as a long-running client would have it: the
    # first second should measure the API, not TCP handshakes queued behind a cold pool.
    await pool.fill("/healthz")
    if poll_pool is not pool:
        await poll_pool.fill("/healthz")
    tasks: set[asyncio.Task[None]] = set()
    tick = loop.create_task(ticker())
    cpu_start, wall_start = cpu_self(), time.perf_counter()
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    cpu_sending = cpu_self()
    for i in slots:
        due = start + i / args.rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = loop.create_task(one(i, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if args.poll_ids:  # follow what the POSTers append, until --stop-after
        tail, line = Tail(Path(args.poll_ids)), 0
        while time.perf_counter() < stop:
            for created in tail.read():
                line += 1
                if (line - 1) % count != index or created.state in SETTLED:
                    continue
                retrieval = {"id": created.id, "state": created.state}
                task = loop.create_task(follow(retrieval, None, start + created.due_s))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.sleep(TAIL_SECONDS)
    # The POST phase ends when the last scheduled POST has been answered (or at --stop-after).
    end_of_posts = min(start + args.duration + 30, stop)
    while rec.posts_answered < len(slots) and time.perf_counter() < end_of_posts:
        await asyncio.sleep(0.05)
    send_cpu, send_wall = cpu_self() - cpu_sending, time.perf_counter() - start
    while tasks and time.perf_counter() < stop:
        await asyncio.wait(list(tasks), timeout=min(1.0, max(0.0, stop - time.perf_counter())))
    # --stop-after: what is still open is abandoned (a POST or GET never answered, or a
    # retrieval still being polled), counted, not timed.
    rec.abandoned = len(tasks)
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    done.set()
    await tick
    pool.close()
    poll_pool.close()
    if created_out:
        created_out.close()
    wall = time.perf_counter() - wall_start
    return {
        "process": index,
        "posts": len(slots),
        "requests": rec.requests,
        "errors": rec.errors,
        "send_lag_ms": rec.send_lag_ms,
        "loop_lag_ms": rec.loop_lag_ms,
        "pool_wait_ms": rec.pool_wait_ms,
        "settle_s": rec.settle_s,
        "retry_after": rec.retry_after,
        "unsettled": rec.unsettled,
        "abandoned": rec.abandoned,
        "cpu_s": cpu_self() - cpu_start,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "wall_s": wall,
        "send_cpu_s": send_cpu,
        "send_wall_s": send_wall,
    }


def client_main(args: argparse.Namespace) -> None:
    # A full collection over tens of thousands of live tasks stalls the loop for tens of ms,
    # which would show as send lag: collect nothing during the run (it is a few minutes long).
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    result = runner(_client(args))
    Path(args.out).write_text(json.dumps(result))


def summarize(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the client processes' records into the figures the report prints."""

    def merged(key: str) -> list[Any]:
        return [v for part in parts for v in part[key]]

    def stats(values: list[float], digits: int = 2) -> dict[str, float]:
        return {
            "p50": round(percentile(values, 50), digits),
            "p99": round(percentile(values, 99), digits),
            "max": round(max(values, default=0), digits),
        }

    requests = {
        route: [r for part in parts for r in part["requests"][route]] for route in (POST, GET)
    }
    errors: dict[str, int] = {}
    for part in parts:
        for key, n in part["errors"].items():
            errors[key] = errors.get(key, 0) + n
    # The API's latency is the answer time less any wait for a pooled connection (the client's
    # own queue); both are reported.
    routes = {}
    for route, rows in requests.items():
        ms = [total - waited for _, total, waited in rows]
        routes[route] = {"count": len(ms)} | {f"{k}_ms": v for k, v in stats(ms).items()}
        routes[route]["p99_with_pool_wait_ms"] = round(percentile([r[1] for r in rows], 99), 2)
    windows = []
    end = max((r[0] for rows in requests.values() for r in rows), default=0)
    for w in range(int(end // WINDOW_SECONDS) + 1):
        lo, hi = w * WINDOW_SECONDS, (w + 1) * WINDOW_SECONDS
        row: dict[str, Any] = {"from_s": lo}
        for route, key in ((POST, "post"), (GET, "get")):
            ms = [total - waited for t, total, waited in requests[route] if lo <= t < hi]
            row[f"{key}_per_s"] = round(len(ms) / WINDOW_SECONDS, 1)
            row[f"{key}_p99_ms"] = round(percentile(ms, 99), 1)
        windows.append(row)
    settle = merged("settle_s")
    retry_after = merged("retry_after")
    send_cpu = [p["send_cpu_s"] / p["send_wall_s"] * 100 for p in parts if p["send_wall_s"]]
    return {
        "posts": sum(p["posts"] for p in parts),
        "routes": routes,
        "errors": errors,
        "settled_seen": len(settle),
        "unsettled": sum(p["unsettled"] for p in parts),
        "abandoned": sum(p.get("abandoned", 0) for p in parts),
        "settle_seen_s": stats(settle, 1),
        "retry_after_s": stats(retry_after, 1) | {"count": len(retry_after)},
        "windows": windows,
        "client": {
            "processes": len(parts),
            "send_lag_ms": stats(merged("send_lag_ms")),
            "loop_lag_ms": stats(merged("loop_lag_ms")),
            "pool_waits": len(merged("pool_wait_ms")),
            "pool_wait_ms": stats(merged("pool_wait_ms")),
            "cpu_s": round(sum(p["cpu_s"] for p in parts), 1),
            "max_rss_mb": round(max(p["max_rss_mb"] for p in parts), 1),
            "send_phase_cpu_pct_max": round(max(send_cpu, default=0), 1),
            "send_phase_cpu_pct_total": round(sum(send_cpu), 1),
        },
    }


# The orchestrator.
class CpuMeter:
    """CPU seconds of the service's process trees and of the whole machine, between marks."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.marks: list[tuple[float, dict[str, float]]] = []

    def mark(self) -> None:
        from bench.procstat import machine_cpu, tree_cpu

        reading = {name: tree_cpu(pid) for name, pid in self.pids.items()}
        reading["machine"] = machine_cpu()
        self.marks.append((time.monotonic(), reading))

    def between(self, a: int, b: int) -> dict[str, Any]:
        (t0, r0), (t1, r1) = self.marks[a], self.marks[b]
        wall = t1 - t0
        out: dict[str, Any] = {"wall_s": round(wall, 1)}
        used = {name: r1[name] - r0[name] for name in r0}
        # Whatever else ran: the load clients, Redis, other users of the machine.
        used["rest"] = used["machine"] - sum(v for k, v in used.items() if k != "machine")
        for name, seconds in used.items():
            out[name] = {"cpu_s": round(seconds, 1), "pct": round(seconds / wall * 100, 1)}
        return out


def _db_figures(db_url: str, workspace: str) -> dict[str, Any]:
    """Rows by state and settle time (settled_at - created_at) from the database."""
    import sqlalchemy as sa

    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        states = dict(
            conn.execute(
                sa.text("SELECT state, count(*) FROM retrieval WHERE workspace_id = :w GROUP BY 1"),
                {"w": workspace},
            ).all()
        )
        row = conn.execute(
            sa.text(
                "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s),"
                " percentile_cont(0.99) WITHIN GROUP (ORDER BY s), max(s), count(*),"
                " extract(epoch FROM max(settled_at) - min(created_at))"
                " FROM (SELECT extract(epoch FROM settled_at - created_at) AS s, settled_at,"
                " created_at FROM retrieval WHERE workspace_id = :w AND settled_at IS NOT NULL) t"
            ),
            {"w": workspace},
        ).one()
    engine.dispose()
    p50, p99, top, settled, span = row
    return {
        "states": states,
        "settle_p50_s": round(float(p50 or 0), 1),
        "settle_p99_s": round(float(p99 or 0), 1),
        "settle_max_s": round(float(top or 0), 1),
        "settled_per_s": round(settled / float(span), 1) if span else 0.0,
    }


def _pending(db_url: str, workspace: str) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        n = conn.execute(
            sa.text(
                "SELECT count(*) FROM retrieval WHERE workspace_id = :w"
                " AND state IN ('pending', 'running')"
            ),
            {"w": workspace},
        ).scalar_one()
    engine.dispose()
    return int(n)


@dataclass
class Served:
    """A running service for a bench: its API, the site's URLs, database and processes."""

    api: str
    url: str  # the site's first page
    urls: Path  # every page of the site, a line each
    db_url: str
    tmp: Path
    procs: dict[str, Any]  # name -> tests.support.services.Process
    redis_pid: int
    site_pid: int

    def create_key(self, *workspaces: str) -> str:
        """A new API key for `workspaces` (`evidence keys create`)."""
        command = [sys.executable, "-m", "api.cli", "keys", "create"]
        for workspace in workspaces:
            command += ["--workspace", workspace]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
        return done.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def serve(
    tmp: Path,
    commands: dict[str, list[str]],
    log_level: str,
    site_nice: int,
    pages: int = 600,
    hosts: int = 16,
) -> Iterator[Served]:
    """Start a PostgreSQL database, Redis, the fixture site (`pages` pages over `hosts` loopback
    origins) and `commands` (name -> `evidence` arguments; the API's gets `--port`); stop and
    drop them all on the way out.

    The per-workspace write quotas are lifted: one client at 200 POST/s into one workspace is
    what the load benches measure, not what the quotas are for.
    """
    from bench.throughput import Site
    from tests.support.services import (
        Process,
        RedisServer,
        create_postgres_database,
        drop_postgres_database,
        free_port,
        wait_for,
    )

    site = Site(Path(tempfile.mkdtemp(prefix="site-", dir=tmp)), pages, hosts, 0)  # a stack's own
    redis = RedisServer(tmp).start()
    db_name, db_url = create_postgres_database()
    env = {
        "EVIDENCE_DATABASE_URL": db_url,
        "EVIDENCE_BROKER_URL": redis.url,
        "EVIDENCE_EGRESS_ALLOW_CIDRS": "127.0.0.0/24",
        "EVIDENCE_CA_BUNDLE": str(site.info["ca"]),
        "EVIDENCE_FETCH_ALLOWED_PORTS": str(site.info["port"]),
        "EVIDENCE_LOG_LEVEL": log_level,
        "EVIDENCE_QUOTA_WRITE_RATE": "100000",
        "EVIDENCE_QUOTA_WRITE_BURST": "100000",
        "EVIDENCE_QUOTA_OPEN_RETRIEVALS": "1000000",
    }
    os.environ.update(env)
    procs: dict[str, Any] = {}
    try:
        from worker.store.migrate import upgrade

        upgrade(db_url)
        port = free_port()
        prom = tmp / "prometheus"  # every API process's request histogram, summed at /metrics
        prom.mkdir(exist_ok=True)
        for name, words in commands.items():
            extra = {}
            if name == "api":
                words = [*words, "--port", str(port)]
                extra = {"PROMETHEUS_MULTIPROC_DIR": str(prom)}
            procs[name] = Process(words, tmp / f"{name}.log", env=extra)
        for proc in procs.values():
            proc.start()
        api = f"http://127.0.0.1:{port}"
        wait_for(lambda: _up(api), timeout=60)
        time.sleep(3)  # let the worker connect
        # The page server stands in for remote sites: part of the workers' load, so it runs at
        # their niceness.
        os.setpriority(os.PRIO_PROCESS, site.proc.pid, site_nice)
        first = site.urls.read_text().split()[0]
        redis_pid = redis.proc.pid if redis.proc else 0
        yield Served(api, first, site.urls, db_url, tmp, procs, redis_pid, site.proc.pid)
    finally:
        for proc in procs.values():
            proc.stop()
        redis.stop()
        site.stop()
        drop_postgres_database(db_name)


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="evidence-load-"))
    # Both lanes: past EVIDENCE_INTERACTIVE_OPEN_LIMIT open singles, a workspace's new ones join
    # the batch lane.
    if args.as_make_run:
        args.api_workers = 2
        worker_args = procfile_command("worker")
    else:
        worker_args = ["worker", "--queues", "retrievals,retrievals-batch"]
        mode = "idle" if args.worker_idle else "nice"
        worker_args += ["--cpu-share", mode, "--nice", str(args.worker_nice)]
    if args.worker_concurrency:
        worker_args += ["--concurrency", str(args.worker_concurrency)]
    commands = {
        "api": ["api", "--workers", str(args.api_workers)],
        "worker": worker_args,
        "sweeper": ["worker", "--queues", "sweep", "--pool", "prefork", "--concurrency", "1",
                    "--hostname", "sweeper@%h"],
        "beat": ["beat", "--schedule", str(tmp / "beat")],
    }  # fmt: skip
    clients: list[subprocess.Popen[bytes]] = []
    try:
        with serve(
            tmp, commands, args.log_level, args.worker_nice, args.pages, args.hosts
        ) as served:
            return _measure(args, served, clients)
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
                client.wait()
        if args.keep:
            print(f"logs and client records kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _measure(
    args: argparse.Namespace, served: Served, clients: list[subprocess.Popen[bytes]]
) -> dict[str, Any]:
    """The measured minute of `run`, against `served`; started clients go into `clients`."""
    api, url, db_url, tmp, procs = served.api, served.url, served.db_url, served.tmp, served.procs
    warm_workspace = str(uuid.uuid4())  # the warm-up's retrievals stay out of the figures
    key = served.create_key(args.workspace, warm_workspace)
    _warm_up(api, key, warm_workspace, url, args.warm_up)
    histogram = _request_histogram(api)
    # Each service runs in its own session, and with the kernel's autogroup scheduling
    # (sched_autogroup_enabled=1) CPU is shared between sessions first: a process's nice
    # value only ranks it within its session. So `worker --nice` alone left the workers an
    # equal share against the API; the session's own nice value makes it count.
    # (`evidence worker --nice` now lowers its own session; --as-make-run leaves it at that.)
    for name in () if args.as_make_run else ("worker", "sweeper"):
        _autogroup_nice(procs[name].pid, args.worker_nice)
    pids = {name: proc.pid for name, proc in procs.items()} | {"page server": served.site_pid}
    postmaster = _postmaster()
    if postmaster:  # every database's backends, not only this run's
        pids["postgres"] = postmaster
    meter = CpuMeter(pids)
    start_at = time.time() + 3  # the clients start and connect meanwhile
    outs = [tmp / f"client-{n}.json" for n in range(args.client_processes)]
    for n, out in enumerate(outs):
        command = [
            sys.executable, "-m", "bench.load", "client", "--api", api, "--key", key,
            "--workspace", args.workspace, "--url", url, "--urls", str(served.urls),
            "--rate", str(args.rate),
            "--duration", str(args.duration), "--poll-interval", str(args.poll_interval),
            "--settle-timeout", str(args.settle_timeout),
            "--connections", str(max(1, args.connections // args.client_processes)),
            "--process-index", str(n), "--process-count", str(args.client_processes),
            "--start-at", str(start_at), "--out", str(out),
        ]  # fmt: skip
        if not args.honor_retry_after:
            command.append("--ignore-retry-after")
        client = subprocess.Popen(
            command, cwd=ROOT, preexec_fn=_nicer(args.client_nice), start_new_session=True
        )
        _autogroup_nice(client.pid, args.client_nice)  # its own session: see the docstring
        clients.append(client)
    time.sleep(max(0.0, start_at - time.time()))
    meter.mark()  # 0: the first POST is due
    time.sleep(max(0.0, start_at + args.duration - time.time()))
    meter.mark()  # 1: the last POST is due
    backlog = _pending(db_url, args.workspace)
    server_side = _server_side(histogram, _request_histogram(api))
    for client in clients:
        if client.wait() != 0:
            raise RuntimeError(f"a load client failed (exit {client.returncode})")
    # The clients stop polling at --settle-timeout; the workers go on. Wait for them, so
    # the database's settle times cover every retrieval (up to --drain-timeout).
    drain_deadline = start_at + args.duration + args.drain_timeout
    while _pending(db_url, args.workspace) and time.time() < drain_deadline:
        time.sleep(2)
    meter.mark()  # 2: every retrieval settled (or --drain-timeout passed)
    result = summarize([json.loads(out.read_text()) for out in outs])
    result["backlog_at_end_of_posts"] = backlog
    result["server_side"] = server_side
    result["cpu_post_phase"] = meter.between(0, 1)
    result["cpu_drain_phase"] = meter.between(1, 2)
    result["database"] = _db_figures(db_url, args.workspace)
    return result


def _warm_up(api: str, key: str, workspace: str, url: str, count: int) -> None:
    """Run `count` retrievals through the whole service before the measured minute.

    A fleet that has never run a retrieval pays for its first ones all in the first second of
    the load: every API process's threads, pooled connections and broker channels, the worker
    processes' first tasks, the first settle statements, robots.txt. That is a cold start, not
    the sustained load this bench measures. 16 clients at once, each on its own connection, so
    every API process and thread takes part.
    """
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    headers = {"Authorization": f"Bearer {key}"}

    def one(_: int) -> None:
        body = {"url": url, "kind": "url_text", "workspace_id": workspace}
        with httpx.Client(base_url=api, headers=headers, timeout=60) as client:
            answer = client.post(RETRIEVE_PATH, json=body | {"mutation_id": str(uuid.uuid4())})
            path = RETRIEVAL_PATH.format(id=answer.raise_for_status().json()["retrieval"]["id"])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if client.get(path).json()["retrieval"]["state"] in SETTLED:
                    return
                time.sleep(0.5)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))


Buckets = dict[str, dict[float, float]]  # method -> {upper bound: cumulative count}


def _request_histogram(api: str) -> Buckets:
    """The API's own request-duration histogram (middleware to middleware), from /metrics."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    routes = {"POST": RETRIEVE_PATH, "GET": "/research-api/evidence/retrievals/{retrieval_id}"}
    text = httpx.get(f"{api}/metrics", timeout=30).text
    buckets: Buckets = {method: {} for method in routes}
    for family in text_string_to_metric_families(text):
        if family.name != "evidence_http_request_duration_seconds":
            continue
        for sample in family.samples:
            method, route = sample.labels.get("method"), sample.labels.get("route")
            if sample.name.endswith("_bucket") and routes.get(method or "") == route:
                le = float(sample.labels["le"])
                buckets[method][le] = buckets[method].get(le, 0) + sample.value  # type: ignore[index]
    return buckets


def _server_side(before: Buckets, after: Buckets) -> dict[str, Any]:
    """What the API measured between two scrapes, per route.

    Time spent before the app sees a request (accept, parse, a busy event loop) or in the
    client is not in it, so comparing it with the client's figures says where latency is.
    """
    out: dict[str, Any] = {}
    for method, cumulative in after.items():
        counts = {le: n - before.get(method, {}).get(le, 0) for le, n in cumulative.items()}
        total = counts.get(float("inf"), 0)
        if not total:
            continue
        within = {
            f"within_{int(le * 1000)}ms_pct": round(n / total * 100, 2)
            for le, n in sorted(counts.items())
            if le in (0.025, 0.05, 0.1, 0.5)
        }
        p99 = min((le for le, n in counts.items() if n >= 0.99 * total), default=0)
        out[method] = {"count": int(total), "p99_at_most_ms": p99 * 1000, **within}
    return out


def procfile_command(name: str, procfile: Path = ROOT / "deploy" / "Procfile") -> list[str]:
    """The arguments of `evidence` on the Procfile's `name:` line, as `make run` starts it."""
    for line in procfile.read_text().splitlines():
        if line.startswith(f"{name}:"):
            words = shlex.split(line.partition(":")[2])
            if words[:1] == ["evidence"]:
                return words[1:]
    raise ValueError(f"no `{name}: evidence …` line in {procfile}")


def _autogroup_nice(pid: int, nice: int) -> None:
    """Set the nice value of `pid`'s autogroup (its session), where the kernel has them."""
    # No autogroups here (or not allowed): the process's own nice value is all there is.
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


def _nicer(nice: int) -> Any:
    """A preexec_fn that sets the client's nice value (a negative one needs privileges)."""

    def apply() -> None:
        if nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)

    return apply


def _postmaster() -> int | None:
    """The PostgreSQL server's main process on this machine, if it runs here."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, ppid = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()[1]
        if name in ("postgres", "postmaster") and ppid == "1":
            return int(entry.name)
    return None


def _up(api: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{api}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    title = (
        f"{args.rate:g} POST/s for {args.duration:g} s (PostgreSQL, loopback, "
        f"{args.api_workers} API worker(s), {args.client_processes} client process(es))"
    )
    table = Table(title=title)
    columns = ("route", "count", "p50 ms", "p99 ms", "max ms", "p99 with pool wait")
    for column in columns:
        table.add_column(column, justify="right" if column != "route" else "left")
    for route, row in result["routes"].items():
        table.add_row(
            route,
            str(row["count"]),
            str(row["p50_ms"]),
            str(row["p99_ms"]),
            str(row["max_ms"]),
            str(row["p99_with_pool_wait_ms"]),
        )
    console.print(table)
    windows = Table(title=f"{WINDOW_SECONDS} s windows (by send time)")
    for column in ("from s", "POST/s", "POST p99 ms", "GET/s", "GET p99 ms"):
        windows.add_column(column, justify="right")
    for w in result["windows"]:
        windows.add_row(
            str(w["from_s"]),
            str(w["post_per_s"]),
            str(w["post_p99_ms"]),
            str(w["get_per_s"]),
            str(w["get_p99_ms"]),
        )
    console.print(windows)
    c, db = result["client"], result["database"]
    cpu, drain = result["cpu_post_phase"], result["cpu_drain_phase"]
    lines = [
        f"errors: {result['errors'] or 'none'}",
        f"backlog when the last POST was due: {result['backlog_at_end_of_posts']} open",
        f"settled (client saw) {result['settled_seen']}/{result['posts']}, unsettled at "
        f"--settle-timeout {result['unsettled']}; settle p50/p99 "
        f"{result['settle_seen_s']['p50']}/{result['settle_seen_s']['p99']} s",
        f"database: {db['states']}, settle p50/p99/max {db['settle_p50_s']}/"
        f"{db['settle_p99_s']}/{db['settle_max_s']} s, {db['settled_per_s']} settled/s",
        f"server side (the API's histogram, to the end of the POSTs): {result['server_side']}",
        f"Retry-After honoured {result['retry_after_s']['count']} times, p50/max "
        f"{result['retry_after_s']['p50']}/{result['retry_after_s']['max']} s",
        f"client: send lag p50/p99/max {c['send_lag_ms']['p50']}/{c['send_lag_ms']['p99']}/"
        f"{c['send_lag_ms']['max']} ms, loop lag p99/max {c['loop_lag_ms']['p99']}/"
        f"{c['loop_lag_ms']['max']} ms, pool waits {c['pool_waits']} "
        f"(p99 {c['pool_wait_ms']['p99']} ms), CPU during POSTs {c['send_phase_cpu_pct_max']} % "
        f"of a core (busiest process), {c['cpu_s']} s in all, max RSS {c['max_rss_mb']} MB",
        "CPU during POSTs (% of one core): "
        + ", ".join(f"{k} {v['pct']}" for k, v in cpu.items() if k != "wall_s")
        + f" over {cpu['wall_s']} s",
        "CPU while draining: "
        + ", ".join(f"{k} {v['pct']}" for k, v in drain.items() if k != "wall_s")
        + f" over {drain['wall_s']} s",
    ]
    for line in lines:
        console.print(line, markup=False, highlight=False)
    if c["send_lag_ms"]["p99"] > 20 or c["send_phase_cpu_pct_max"] > 80:
        console.print(
            "WARNING: the load client is saturated (send lag or CPU): its latencies include "
            "its own queueing; use more --client-processes",
            markup=False,
        )
    print(json.dumps({"rate": args.rate, "duration": args.duration, **result}))


def _stop_on_sigterm() -> None:
    """Turn SIGTERM (e.g. from `timeout`) into an exception, so the services get stopped."""
    import signal

    def _raise(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="run", choices=["run", "client"])
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument(
        "--settle-timeout", type=float, default=120, help="clients stop polling a retrieval then"
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=600,
        help="after the last POST, wait this long at most for the workers to settle everything",
    )
    parser.add_argument("--keep", action="store_true", help="keep the logs and client records")
    parser.add_argument(
        "--warm-up", type=int, default=40, help="retrievals run through the service beforehand"
    )
    parser.add_argument("--connections", type=int, default=128, help="pool size, all clients")
    parser.add_argument(
        "--client-processes",
        type=int,
        default=2,
        help="load-client processes; at 200 POST/s beside the service on two cores, one alone"
        " lagged its schedule by 29 ms at p99 and two by 9-21 ms (2026-12-03): a lagging client"
        " times its own queueing",
    )
    parser.add_argument(
        "--ignore-retry-after",
        dest="honor_retry_after",
        action="store_false",
        help="poll on the client's own back-off even when the API sends Retry-After",
    )
    parser.add_argument(
        "--poll-mode",
        choices=["honour", "backoff", "ignore", "none"],
        default="honour",
        help="honour: Retry-After, else the back-off; backoff: the back-off only; ignore: poll"
        " again --poll-gap s after each answer; none: POST only",
    )
    parser.add_argument("--poll-gap", type=float, default=0.0, help="--poll-mode ignore's wait")
    parser.add_argument(
        "--poll-connections", type=int, default=0, help="a pool of its own for polls (0: shared)"
    )
    parser.add_argument(
        "--stop-after", type=float, default=0.0, help="client: abandon what is open then (s)"
    )
    parser.add_argument(
        "--get-ids", default="", help="client: a file of ids; each slot GETs one, no POSTs"
    )
    parser.add_argument(
        "--ids-out", default="", help="client: append each created retrieval to this file"
    )
    parser.add_argument(
        "--poll-ids",
        default="",
        help="client: no POSTs; poll the retrievals other clients append to this file (its"
        " lines i %% --process-count == --process-index) until --stop-after",
    )
    parser.add_argument(
        "--api-workers", type=int, default=2, help="API processes (one per core here)"
    )
    parser.add_argument(
        "--worker-concurrency", type=int, default=None, help="default: the worker's own"
    )
    parser.add_argument(
        "--as-make-run",
        action="store_true",
        help="the processes as `make run` starts them (deploy/Procfile): two API processes, the"
        " worker with the Procfile's options, no session niceness set by the bench",
    )
    parser.add_argument(
        "--worker-nice", type=int, default=10, help="niceness of worker, page server"
    )
    parser.add_argument(
        "--worker-idle",
        action="store_true",
        help="the worker at idle CPU priority (--cpu-share idle)",
    )
    parser.add_argument(
        "--client-nice", type=int, default=0, help="nice value of the load clients (< 0: root)"
    )
    parser.add_argument("--log-level", default="WARNING", help="the services' EVIDENCE_LOG_LEVEL")
    parser.add_argument("--pages", type=int, default=600, help="the fixture site's pages")
    parser.add_argument("--hosts", type=int, default=16, help="origins the pages are spread over")
    parser.add_argument("--workspace", default=str(uuid.uuid4()))
    # Client mode only.
    parser.add_argument("--api", default="")
    parser.add_argument("--key", default="")
    parser.add_argument("--url", default="")
    parser.add_argument("--urls", default="", help="a file of URLs the POSTs take in turn")
    parser.add_argument("--out", default="")
    parser.add_argument("--process-index", type=int, default=0)
    parser.add_argument("--process-count", type=int, default=1)
    parser.add_argument("--start-at", type=float, default=0.0, help="epoch of the first POST")
    args = parser.parse_args()
    if args.mode == "client":
        client_main(args)
    else:
        _stop_on_sigterm()
        report(run(args), args)


if __name__ == "__main__":
    main()
