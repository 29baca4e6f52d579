"""Load test: POST-then-poll at a fixed rate against the running service, on loopback.

Starts its own PostgreSQL database, private Redis, a loopback HTTPS page, the API, a retrieval
worker, the sweeper and beat; then a *second process* (`python -m bench.load client`) sends
POSTs open-loop at `--rate` per second for `--duration` seconds (each request is scheduled at
its own time, whatever earlier ones are doing, so slow answers cannot hide themselves), and
polls each retrieval with GET until it settles. It reports latency p50/p99/max per route,
error counts and settle times, as a table and one JSON line.

Run: python -m bench.load --rate 200 --duration 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SETTLED = {"completed", "cancelled", "unconfirmed", "expired"}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


# The client: runs in its own process.
async def _client(args: argparse.Namespace) -> dict[str, object]:
    latencies: dict[str, list[float]] = {"POST retrieve": [], "GET retrieval": []}
    errors: dict[str, int] = {}
    settle_times: list[float] = []
    limits = httpx.Limits(
        max_connections=args.connections, max_keepalive_connections=args.connections
    )
    headers = {"Authorization": f"Bearer {args.key}"}
    async with httpx.AsyncClient(
        base_url=args.api, limits=limits, timeout=30, headers=headers
    ) as client:

        async def call(route: str, method: str, url: str, **kw: object) -> httpx.Response | None:
            start = time.perf_counter()
            try:
                response = await client.request(method, url, **kw)  # type: ignore[arg-type]
            except httpx.HTTPError as exc:
                errors[f"{route}: {type(exc).__name__}"] = (
                    errors.get(f"{route}: {type(exc).__name__}", 0) + 1
                )
                return None
            latencies[route].append((time.perf_counter() - start) * 1000)
            if response.status_code not in (200, 202):
                key = f"{route}: HTTP {response.status_code}"
                errors[key] = errors.get(key, 0) + 1
            return response

        async def one(due: float) -> None:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            created = time.perf_counter()
            payload = {
                "url": args.url,
                "kind": "url_text",
                "workspace_id": args.workspace,
                "mutation_id": str(uuid.uuid4()),
            }
            response = await call(
                "POST retrieve", "POST", "/research-api/evidence/retrieve", json=payload
            )
            if response is None or response.status_code not in (200, 202):
                return
            retrieval_id = response.json()["retrieval"]["id"]
            deadline = created + args.settle_timeout
            interval = args.poll_interval
            while time.perf_counter() < deadline:
                await asyncio.sleep(interval)
                interval = min(interval * 1.5, 8.0)  # a polite client backs off
                got = await call(
                    "GET retrieval", "GET", f"/research-api/evidence/retrievals/{retrieval_id}"
                )
                if (
                    got is not None
                    and got.status_code == 200
                    and got.json()["retrieval"]["state"] in SETTLED
                ):
                    settle_times.append(time.perf_counter() - created)
                    return
            errors["not settled in time"] = errors.get("not settled in time", 0) + 1

        start = time.perf_counter() + 0.5
        total = int(args.rate * args.duration)
        tasks = [asyncio.create_task(one(start + i / args.rate)) for i in range(total)]
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    return {
        "requests": total,
        "elapsed_s": round(elapsed, 2),
        "routes": {
            route: {
                "count": len(values),
                "p50_ms": round(percentile(values, 50), 2),
                "p99_ms": round(percentile(values, 99), 2),
                "max_ms": round(max(values, default=0), 2),
            }
            for route, values in latencies.items()
        },
        "errors": errors,
        "settle_p50_s": round(percentile(settle_times, 50), 2),
        "settle_p99_s": round(percentile(settle_times, 99), 2),
        "settled": len(settle_times),
    }


def client_main(args: argparse.Namespace) -> None:
    result = asyncio.run(_client(args))
    Path(args.out).write_text(json.dumps(result))


# The orchestrator.
def run(args: argparse.Namespace) -> dict[str, object]:
    from tests.support.pages import article
    from tests.support.services import (
        Process,
        RedisServer,
        create_postgres_database,
        drop_postgres_database,
        free_port,
        wait_for,
    )
    from tests.support.tls_site import TLSSite

    tmp = Path(tempfile.mkdtemp(prefix="evidence-load-"))
    site = TLSSite().start()
    site.page("/robots.txt", "User-agent: *\nAllow: /\n", "text/plain")
    url = site.page("/load/article", article("Load test article", paragraphs=4))
    redis = RedisServer(tmp).start()
    db_name, db_url = create_postgres_database()
    env = {
        "EVIDENCE_DATABASE_URL": db_url,
        "EVIDENCE_BROKER_URL": redis.url,
        "EVIDENCE_EGRESS_ALLOW_CIDRS": "127.0.0.1/32",
        "EVIDENCE_CA_BUNDLE": str(site.write_ca(tmp / "ca.pem")),
        "EVIDENCE_FETCH_ALLOWED_PORTS": str(site.port),
        "EVIDENCE_LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    from worker.migrate import upgrade

    upgrade(db_url)
    key = subprocess.run(
        [sys.executable, "-m", "api.cli", "keys", "create", "--workspace", args.workspace],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    port = free_port()
    procs = [
        Process(["api", "--port", str(port), "--workers", str(args.api_workers)], tmp / "api.log"),
        Process(["worker", "--queues", "retrievals", "--concurrency", str(args.worker_concurrency),
                 "--nice", str(args.worker_nice)], tmp / "worker.log"),
        Process(["worker", "--queues", "sweep", "--concurrency", "1", "--hostname", "sweeper@%h"],
                tmp / "sweeper.log"),
        Process(["beat", "--schedule", str(tmp / "beat")], tmp / "beat.log"),
    ]  # fmt: skip
    try:
        for proc in procs:
            proc.start()
        api = f"http://127.0.0.1:{port}"
        wait_for(lambda: _up(api), timeout=60)
        time.sleep(3)  # let the worker connect
        out = tmp / "client.json"
        subprocess.run(
            [
                sys.executable, "-m", "bench.load", "client", "--api", api, "--key", key,
                "--workspace", args.workspace, "--url", url, "--rate", str(args.rate),
                "--duration", str(args.duration), "--poll-interval", str(args.poll_interval),
                "--settle-timeout", str(args.settle_timeout),
                "--connections", str(args.connections), "--out", str(out),
            ],
            cwd=ROOT, check=True,
        )  # fmt: skip
        return json.loads(out.read_text())
    finally:
        for proc in procs:
            proc.stop()
        redis.stop()
        site.stop()
        drop_postgres_database(db_name)


def _up(api: str) -> bool:
    try:
        return httpx.get(f"{api}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def report(result: dict[str, object], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.rate} POST/s for {args.duration} s (PostgreSQL, loopback)")
    for column in ("route", "count", "p50 ms", "p99 ms", "max ms"):
        table.add_column(column, justify="right" if column != "route" else "left")
    for route, row in result["routes"].items():  # type: ignore[union-attr]
        table.add_row(
            route, str(row["count"]), str(row["p50_ms"]), str(row["p99_ms"]), str(row["max_ms"])
        )
    console = Console()
    console.print(table)
    console.print(
        f"settled {result['settled']}/{result['requests']}  settle p50 {result['settle_p50_s']} s "
        f"p99 {result['settle_p99_s']} s  errors {result['errors'] or 'none'}"
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
    parser.add_argument("--settle-timeout", type=float, default=120)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--api-workers", type=int, default=1)
    parser.add_argument("--worker-concurrency", type=int, default=4)
    parser.add_argument("--worker-nice", type=int, default=10)
    parser.add_argument("--workspace", default=str(uuid.uuid4()))
    parser.add_argument("--api", default="")
    parser.add_argument("--key", default="")
    parser.add_argument("--url", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.mode == "client":
        client_main(args)
    else:
        _stop_on_sigterm()
        report(run(args), args)


if __name__ == "__main__":
    main()
