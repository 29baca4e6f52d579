"""Fairness: an agent's single retrievals while another workspace's batch runs (issue #16).

Run: .venv/bin/python -m bench.fairness [--batch 1500] [--every 2] [--idle 15]

The scenario, on the service's default settings (one `evidence worker` with its default
concurrency, API, beat; PostgreSQL; robots.txt obeyed), against the loopback fixture site
(bench.site) answering after a lognormal delay (median 500 ms, p90 1.8 s, capped at 10 s):

  1. idle: workspace B (an agent) POSTs one retrieval every `--every` s, `--idle` times;
  2. load: workspace A submits `--batch` URLs with `evidence enqueue --wait` (the batch route)
     while B goes on POSTing one every `--every` s until A's batch has settled.

B's time to settle is the service's own created_at → settled_at. Reports B's median, p90 and
worst idle and under load, A's batch from its first created_at to its last settled_at, and the
targets: B's median under load ≤ 3 × idle, none of B's over 15 s, A's batch complete. Prints a
table (stderr) and one JSON line (stdout), with the machine's load averages before and after
(the machine may be shared). Needs PostgreSQL (EVIDENCE_TEST_POSTGRES_URL) and redis-server.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from bench.service import Stack, _try
from bench.throughput import Site
from tests.support.services import ROOT, wait_for

console = Console(stderr=True, width=120)
TARGET_RATIO = 3.0
TARGET_WORST_SECONDS = 15.0


def default_worker_in_flight() -> int:
    """`evidence worker`'s default: retrievals in flight in its one threads-pool process."""
    from worker.platform.settings import get_settings

    return get_settings().worker_in_flight


def seconds_between(created: str, settled: str) -> float:
    def parse(stamp: str) -> datetime:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    return (parse(settled) - parse(created)).total_seconds()


class Agent:
    """Workspace B: one retrieval POSTed every `every` seconds, each in its own thread."""

    def __init__(self, api: str, key: str, workspace: str, urls: list[str]) -> None:
        self.client = httpx.Client(
            base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        self.workspace, self.urls = workspace, iter(urls)
        self.ids: list[str] = []
        self.post_seconds: list[float] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def _post(self, url: str) -> None:
        started = time.perf_counter()
        payload = {"url": url, "kind": "url_text", "workspace_id": self.workspace}
        response = self.client.post(
            "/research-api/evidence/retrieve",
            json=payload | {"mutation_id": str(uuid.uuid4())},
        )
        response.raise_for_status()
        with self._lock:
            self.post_seconds.append(time.perf_counter() - started)
            self.ids.append(response.json()["retrieval"]["id"])

    def submit_every(self, every: float, count: int | None, until: Any = None) -> None:
        """POST one every `every` s: `count` of them, or until `until()` is true."""
        due, sent = time.monotonic(), 0
        while (count is None or sent < count) and not (until is not None and until()):
            thread = threading.Thread(target=self._post, args=(next(self.urls),))
            thread.start()
            self._threads.append(thread)
            sent += 1
            due += every
            time.sleep(max(0.0, due - time.monotonic()))
        for thread in self._threads:
            thread.join()

    def settled(self, ids: list[str], timeout: float = 120) -> list[dict[str, Any]]:
        """Wait (long-polling) until every one of `ids` settled; their retrievals."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.client.post(
                "/research-api/evidence/retrievals/batch-get",
                json={"ids": ids},
                headers={"Prefer": "wait=10"},
            ).json()["retrievals"]
            if all(r["state"] not in ("pending", "running") for r in found):
                return found  # type: ignore[no-any-return]
            if time.monotonic() > deadline:
                raise RuntimeError("B's retrievals did not settle")


def figures(retrievals: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, p90 and worst time to settle (s), and the states."""
    times = sorted(seconds_between(r["created_at"], r["settled_at"]) for r in retrievals)
    states: dict[str, int] = {}
    for r in retrievals:
        states[r["state"]] = states.get(r["state"], 0) + 1
    p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
    return {
        "n": len(times),
        "median": round(statistics.median(times), 3),
        "p90": round(p90, 3),
        "worst": round(times[-1], 3),
        "states": states,
    }


def batch_figures(stack: Stack, workspace: str) -> dict[str, Any]:
    """A's batch from the database: states, first created → last settled."""
    import psycopg

    url = stack.database_url.replace("postgresql+psycopg://", "postgresql://")
    # PostgreSQL may be shared with other runs: wait for a free connection rather than fail.
    conn = wait_for(lambda: _try(psycopg.connect, url), timeout=300, interval=2.0)
    with conn:
        rows = conn.execute(
            "SELECT state, count(*), min(created_at), max(settled_at) FROM retrieval"
            " WHERE workspace_id = %s GROUP BY state",
            (workspace,),
        ).fetchall()
        lanes = conn.execute(
            "SELECT lane, count(*) FROM retrieval WHERE workspace_id = %s GROUP BY lane",
            (workspace,),
        ).fetchall()
    states = {row[0]: int(row[1]) for row in rows}
    first = min(row[2] for row in rows)
    last = max(row[3] for row in rows if row[3] is not None)
    return {
        "n": sum(states.values()),
        "states": states,
        "lanes": {lane: int(n) for lane, n in lanes},
        "seconds": round((last - first).total_seconds(), 1),
    }


def slowest(stack: Stack, ids: list[str], count: int = 5) -> list[dict[str, Any]]:
    """B's slowest retrievals under load: seconds to settle, attempts, lane, outcome."""
    import psycopg

    url = stack.database_url.replace("postgresql+psycopg://", "postgresql://")
    conn = wait_for(lambda: _try(psycopg.connect, url), timeout=300, interval=2.0)
    with conn:
        rows = conn.execute(
            "SELECT attempt, lane, created_at, settled_at, result FROM retrieval"
            " WHERE id = ANY(%s) AND settled_at IS NOT NULL",
            (ids,),
        ).fetchall()
    out = [
        {
            "seconds": round((settled - created).total_seconds(), 2),
            "attempt": attempt,
            "lane": lane,
            "status": (result or {}).get("status"),
            "reason": (result or {}).get("reason"),
        }
        for attempt, lane, created, settled, result in rows
    ]
    return sorted(out, key=lambda row: -float(row["seconds"]))[:count]


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-fairness-"))
    extra = ("--latency-median-ms", str(args.median_ms), "--latency-p90-ms", str(args.p90_ms))
    extra += ("--latency-cap-ms", str(args.cap_ms))
    pages = args.batch + args.idle + 400
    site = Site(tmp, pages, args.hosts, 0.0, extra)
    urls = site.urls.read_text().split()
    a_urls, b_urls = urls[: args.batch], urls[args.batch :]
    stack = Stack(tmp, site.info, args.concurrency).start()
    concurrency = args.concurrency or default_worker_in_flight()
    try:
        a, b, warm = (str(uuid.uuid4()) for _ in range(3))
        key = stack.cli("keys", "create", "--workspace", a, "--workspace", b, "--workspace", warm)
        key = key.strip().splitlines()[-1]
        console.print(f"worker in flight {concurrency}; warming robots.txt of {args.hosts} hosts")
        warmer = Agent(stack.api_url, key, warm, b_urls[-args.hosts :])
        warmer.submit_every(0.0, args.hosts)
        warmer.settled(warmer.ids)

        console.print(f"idle: B posts {args.idle} retrievals, one every {args.every} s")
        agent = Agent(stack.api_url, key, b, b_urls)
        agent.submit_every(args.every, args.idle)
        idle = figures(agent.settled(agent.ids))
        idle_ids = set(agent.ids)
        console.print(f"B idle: {idle}")

        a_file = tmp / "a.txt"
        a_file.write_text("\n".join(a_urls) + "\n")
        console.print(f"load: A enqueues {args.batch} URLs; B posts one every {args.every} s")
        enqueue = subprocess.Popen(
            [sys.executable, "-m", "api.cli", "enqueue", str(a_file), "--workspace", a]
            + ["--kind", "url_text", "--wait", "--api", stack.api_url, "--key", key],
            cwd=ROOT,
            env=stack.env,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "enqueue.log", "wb"),  # noqa: SIM115
        )
        started = time.monotonic()
        agent.submit_every(args.every, None, until=lambda: enqueue.poll() is not None)
        a_wall = time.monotonic() - started
        loaded_ids = [i for i in agent.ids if i not in idle_ids]
        loaded = figures(agent.settled(loaded_ids))
        console.print(f"B under load: {loaded}; A's enqueue took {a_wall:.1f} s")
        batch = batch_figures(stack, a)
        b_slowest = slowest(stack, loaded_ids)
        load_after = os.getloadavg()
    finally:
        stack.stop()
        site.stop()
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)  # kept when the run failed: its logs say why
    else:
        console.print(f"logs kept in {tmp}")
    ratio = loaded["median"] / idle["median"]
    return {
        "worker_in_flight": concurrency,
        "cores": os.cpu_count(),
        "latency_ms": {"median": args.median_ms, "p90": args.p90_ms, "cap": args.cap_ms},
        "b_idle": idle,
        "b_under_load": loaded,
        "b_slowest_under_load": b_slowest,
        "b_ratio": round(ratio, 2),
        "b_post_p50_ms": round(1000 * statistics.median(agent.post_seconds), 1),
        "a_batch": batch,
        "a_enqueue_exit": enqueue.returncode,
        "a_enqueue_wall_seconds": round(a_wall, 1),
        "targets": {
            "b_median_within_3x_idle": ratio <= TARGET_RATIO,
            "b_none_over_15s": loaded["worst"] <= TARGET_WORST_SECONDS,
            "a_completed": batch["states"].get("completed", 0) == args.batch,
        },
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
    }


def show(result: dict[str, Any]) -> None:
    table = Table(title="fairness: B's single retrievals, created_at → settled_at")
    for column in ("", "n", "median s", "p90 s", "worst s"):
        table.add_column(column, justify="right")
    for label, key in (("B, idle service", "b_idle"), ("B, during A's batch", "b_under_load")):
        f = result[key]
        table.add_row(
            label, str(f["n"]), f"{f['median']:.2f}", f"{f['p90']:.2f}", f"{f['worst']:.2f}"
        )
    console.print(table)
    batch = result["a_batch"]
    console.print(
        f"A's batch: {batch['n']} retrievals {batch['states']} in {batch['seconds']} s "
        f"(lanes {batch['lanes']}); B under load / idle median = {result['b_ratio']}; "
        f"targets {result['targets']}; load average before {result['loadavg_before']}, "
        f"after {result['loadavg_after']} on {result['cores']} cores"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1500, help="A's URLs")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between B's POSTs")
    parser.add_argument("--idle", type=int, default=15, help="B's retrievals on the idle service")
    parser.add_argument("--hosts", type=int, default=16, help="sites the URLs are spread over")
    parser.add_argument("--median-ms", type=float, default=500.0)
    parser.add_argument("--p90-ms", type=float, default=1800.0)
    parser.add_argument("--cap-ms", type=float, default=10000.0)
    parser.add_argument("--keep", action="store_true", help="keep the run's folder and logs")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="retrievals in flight (default: the worker's default)",
    )
    result = run(parser.parse_args())
    show(result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
