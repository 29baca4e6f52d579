"""Re-retrieving unchanged pages: what conditional revalidation costs against a first pass.

Run: .venv/bin/python -m bench.revalidation [--pages 1000] [--pool threads|prefork]

One stack (bench.service: PostgreSQL, Redis, API, worker, beat) and one loopback fixture site
that sends strong ETags and answers a matching If-None-Match with 304 (`bench.site
--validators`). Pass 1 retrieves every page into a workspace (`evidence enqueue --wait`); pass 2
retrieves the same URLs again into the same workspace (new mutation ids), so every retrieval
revalidates; pass 3 does it once more with `--max-age` (no request to the origin at all), which
shows what any retrieval costs the service apart from its fetch and extraction. For each pass:
CPU seconds of the API and worker process trees (/proc), bytes the site sent (its `/__stats`),
wall time. Prints the ratios pass 2 / pass 1 and one JSON line; the targets are CPU ≤ 25 %
and bytes ≤ 5 % (exit status 1 when missed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import httpx
import psycopg
import redis
from rich.console import Console

from bench.probe import read_totals
from bench.service import Stack
from bench.throughput import Site
from tests.support.services import ROOT

console = Console(stderr=True, width=120)
#: What pass 2 may cost, as a share of pass 1.
CPU_TARGET = 0.25
BYTES_TARGET = 0.05


@dataclass
class Pass:
    """What one pass over the URL list measured."""

    seconds: float
    cpu_api: float
    cpu_worker: float
    cpu_postgres: float
    site_bytes: int
    site_requests: int
    #: Connections the site accepted (its own counters' reads included: two a pass).
    site_connections: int
    ready: int
    new_revisions: int
    #: Worker children's CPU seconds by step (bench.probe): task, fetch, extract, db, redis.
    probe: dict[str, float]
    #: Commands the stack's Redis ran (broker, politeness, metrics), by command.
    redis_commands: dict[str, int]

    @property
    def cpu(self) -> float:
        """CPU seconds of the API and the worker (the service's own processes)."""
        return self.cpu_api + self.cpu_worker


def site_stats(site: Site) -> dict[str, int]:
    """The fixture site's counters."""
    url = f"https://127.0.0.1:{site.info['port']}/__stats"
    return dict(httpx.get(url, verify=str(site.bundle), timeout=10).json())


def redis_commands(stack: Stack) -> dict[str, int]:
    """Calls so far of each command on the stack's Redis (INFO commandstats)."""
    client = redis.Redis.from_url(stack.redis.url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def database(stack: Stack) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(stack.database_url.replace("postgresql+psycopg://", "postgresql://"))


def db_now(stack: Stack) -> datetime:
    with database(stack) as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def outcomes(stack: Stack, workspace: str, since: datetime) -> tuple[int, int]:
    """(retrievals created since `since` with content, the workspace's evidence revisions)."""
    with database(stack) as conn:
        ready = conn.execute(
            "SELECT count(*) FROM retrieval WHERE workspace_id = %s AND created_at >= %s"
            " AND result->>'status' IN ('ready', 'partial')",
            (workspace, since),
        ).fetchone()
        revisions = conn.execute(
            "SELECT count(*) FROM evidence_revision r JOIN evidence e ON e.id = r.evidence_id"
            " WHERE e.workspace_id = %s",
            (workspace,),
        ).fetchone()
    return int(ready[0] if ready else 0), int(revisions[0] if revisions else 0)


def run_pass(
    stack: Stack, site: Site, workspace: str, key: str, label: str, max_age: int | None = None
) -> Pass:
    """`evidence enqueue --wait` of every URL into `workspace`, with batch label `label`."""
    since = db_now(stack)
    _, revisions_before = outcomes(stack, workspace, since)
    before, site_before = stack.cpu(), site_stats(site)
    pg_before = stack._postgres_cpu()
    probe_before = read_totals(stack.probe_dir)
    commands_before = redis_commands(stack)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "enqueue", str(site.urls), "--workspace", workspace]
        + ["--kind", "url_text", "--wait", "--api", stack.api_url, "--key", key]
        + ["--batch", label, "--concurrency", "8", "--poll-interval", "1"]
        + ([] if max_age is None else ["--max-age", str(max_age)]),
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"evidence enqueue failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")
    after, site_after = stack.cpu(), site_stats(site)
    pg_after = stack._postgres_cpu()
    ready, revisions_after = outcomes(stack, workspace, since)
    commands = {
        k: v - commands_before.get(k, 0)
        for k, v in redis_commands(stack).items()
        if v != commands_before.get(k, 0) and k != "info"
    }
    probe = {
        k: round(v - probe_before.get(k, 0.0), 3) for k, v in read_totals(stack.probe_dir).items()
    }
    return Pass(
        seconds=seconds,
        cpu_api=after["api"] - before["api"],
        cpu_worker=after["worker"] - before["worker"],
        cpu_postgres=sum(v - pg_before.get(pid, 0.0) for pid, v in pg_after.items()),
        site_bytes=site_after["bytes_out"] - site_before["bytes_out"],
        site_requests=site_after["requests"] - site_before["requests"],
        site_connections=site_after["connections"] - site_before["connections"],
        ready=ready,
        new_revisions=revisions_after - revisions_before,
        probe=probe,
        redis_commands=dict(sorted(commands.items(), key=lambda kv: -kv[1])),
    )


def freshness_counts(stack: Stack) -> dict[str, int]:
    client = redis.Redis.from_url(stack.redis.url)
    raw = client.hgetall("evidence:metrics:freshness")
    client.close()
    return {k.decode(): int(v) for k, v in raw.items()}


def main() -> None:
    """Run both passes, print the figures and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--hosts", type=int, default=4, help="sites the URLs are spread over")
    parser.add_argument(
        "--concurrency", type=int, default=None, help="worker --concurrency (its default)"
    )
    parser.add_argument("--pool", default=None, help="worker --pool: threads (default) or prefork")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="evidence-bench-revalidation-"))
    site = Site(tmp, args.pages, args.hosts, 0.0, ("--validators",))
    stack = Stack(tmp, site.info, args.concurrency, pool=args.pool).start()
    try:
        workspace = str(uuid.uuid4())
        key = stack.cli("keys", "create", "--workspace", workspace).strip().splitlines()[-1]
        first = run_pass(stack, site, workspace, key, "first")
        console.log(f"pass 1: {first}")
        second = run_pass(stack, site, workspace, key, "second")
        console.log(f"pass 2: {second}")
        # The floor: the same retrievals within a reuse window, with no request to the origin.
        third = run_pass(stack, site, workspace, key, "third", max_age=86_400)
        console.log(f"pass 3 (max-age): {third}")
        counts = freshness_counts(stack)
    finally:
        stack.stop()
        site.stop()
    cpu_ratio = second.cpu / first.cpu if first.cpu else float("nan")
    bytes_ratio = second.site_bytes / first.site_bytes if first.site_bytes else float("nan")
    console.print(
        f"{args.pages} pages, worker pool {args.pool or 'default'} "
        f"(concurrency {args.concurrency or 'default'}), {os.cpu_count()} cores\n"
        f"  pass 1: {first.seconds:.1f} s, API+worker CPU {first.cpu:.1f} s "
        f"(postgres {first.cpu_postgres:.1f} s), {first.site_bytes} bytes, "
        f"{first.ready} with content, {first.new_revisions} new revisions\n"
        f"  pass 2: {second.seconds:.1f} s, API+worker CPU {second.cpu:.1f} s "
        f"(postgres {second.cpu_postgres:.1f} s), {second.site_bytes} bytes, "
        f"{second.ready} with content, {second.new_revisions} new revisions\n"
        f"  pass 3 (reuse window, no fetch): {third.seconds:.1f} s, API+worker CPU "
        f"{third.cpu:.1f} s ({third.cpu / first.cpu:.1%} of pass 1), {third.site_bytes} bytes\n"
        f"  freshness counters: {counts}\n"
        f"  CPU ratio {cpu_ratio:.1%} (target ≤ {CPU_TARGET:.0%}), "
        f"bytes ratio {bytes_ratio:.1%} (target ≤ {BYTES_TARGET:.0%})"
    )
    out = {
        "pages": args.pages,
        "concurrency": args.concurrency,
        "pool": args.pool,
        "first": asdict(first),
        "second": asdict(second),
        "third_reuse": asdict(third),
        "freshness": counts,
        "cpu_ratio": cpu_ratio,
        "bytes_ratio": bytes_ratio,
    }
    print(json.dumps(out))
    if cpu_ratio > CPU_TARGET or bytes_ratio > BYTES_TARGET:
        sys.exit(1)


if __name__ == "__main__":
    main()
