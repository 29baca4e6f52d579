"""A webhook backlog beside another workspace's batch (issue 37, "noisy neighbours").

Run: .venv/bin/python -m bench.webhook_backlog [--a-batch 300] [--b-batch 150]

The scenario, on the service's default settings (one `evidence worker`, API, beat; PostgreSQL):

  0. warm-up: one URL per host, so robots.txt is cached before anything is timed;
  1. alone: workspace B (one healthy endpoint) submits `--b-batch` URLs with
     `evidence enqueue --wait`, twice (the second is the reference: the first also warms the
     worker's threads and connections); B's time is its first created_at to its last
     settled_at;
  2. backlog: workspace A registers 11 hostile endpoints (4 that hang past the sender's bound,
     4 that answer 500, 3 whose port refuses) and submits `--a-batch` URLs; once they settled,
     A has 11 x `--a-batch` deliveries pending, failing and backing off;
  3. beside: a fresh workspace B' (one healthy endpoint) submits another `--b-batch` URLs.

Prints B's time alone and beside, the ratio (target <= 1.5), B's deliveries (all delivered?),
and the webhook tasks the worker ran during each phase (from its log: attempts and claims
skipped), and one JSON line on stdout. Needs PostgreSQL (EVIDENCE_TEST_POSTGRES_URL) and
redis-server.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, cast

import psycopg

from bench.service import Stack, _try
from bench.throughput import Site
from tests.support.services import ROOT, free_port, wait_for
from tests.support.tls_site import Page, TLSSite, send

TARGET_RATIO = 1.5
#: Log events of the deliver task, one per task run (`worker.webhooks.delivery`).
TASK_EVENTS = (
    "webhook_claim_skipped",
    "webhook_delivered",
    "webhook_attempt_failed",
    "webhook_failed",
    "webhook_outcome_fenced",
)


def _read(handler: BaseHTTPRequestHandler) -> None:
    """Read the body: left unread, it would be parsed as the connection's next request."""
    handler.rfile.read(int(handler.headers.get("Content-Length", "0")))


def _hang(handler: BaseHTTPRequestHandler) -> None:
    _read(handler)
    time.sleep(60)  # longer than the sender's total bound (15 s)
    send(handler, Page(b"", "", 204))


def _fail(handler: BaseHTTPRequestHandler) -> None:
    _read(handler)
    send(handler, Page(b"no", "text/plain", 500))


def _ok(handler: BaseHTTPRequestHandler) -> None:
    _read(handler)
    send(handler, Page(b"", "", 204))


class Phase:
    """Counts the worker's webhook log events from the moment it is made."""

    def __init__(self, log: Path) -> None:
        self.log, self.offset = log, log.stat().st_size

    def counts(self) -> dict[str, int]:
        with self.log.open("rb") as f:
            f.seek(self.offset)
            text = f.read().decode(errors="replace")
        return {event: text.count(f'"{event}"') + text.count(f" {event} ") for event in TASK_EVENTS}


def _sql(stack: Stack, query: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of `query`; waits while the shared server has no connection to spare."""
    url = stack.database_url.replace("postgresql+psycopg://", "postgresql://")

    def run() -> list[tuple[Any, ...]]:
        with psycopg.connect(url) as conn:
            return list(conn.execute(query, args).fetchall())

    return cast(list[tuple[Any, ...]], wait_for(lambda: _try(run), 60, 1.0))


def _enqueue(
    stack: Stack, urls: list[str], workspace: str, key: str, name: str, timeout: float
) -> bool:
    """Submit and wait for every result; False when `timeout` s passed first."""
    path = stack.tmp / f"{name}.txt"
    path.write_text("\n".join(urls) + "\n")
    with open(stack.tmp / f"enqueue-{name}.log", "wb") as log:
        try:
            subprocess.run(
                [sys.executable, "-m", "api.cli", "enqueue", str(path), "--workspace", workspace]
                + ["--kind", "url_text", "--wait", "--api", stack.api_url, "--key", key]
                + ["--poll-interval", "0.5", "--out", str(stack.tmp / f"{name}.jsonl")],
                cwd=ROOT,
                env=stack.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return False
    return True


def _endpoint(stack: Stack, workspace: str, url: str) -> str:
    command = [sys.executable, "-m", "api.cli", "webhooks", "create", "--workspace", workspace]
    done = subprocess.run(
        [*command, "--url", url], cwd=ROOT, env=stack.env, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"webhooks create {url}: {done.stdout} {done.stderr}")
    return str(json.loads(done.stdout)["webhook"]["id"])


def run_b(
    stack: Stack, urls: list[str], receiver: TLSSite, name: str, timeout: float
) -> dict[str, Any]:
    """One batch of B's with a healthy endpoint: its time, and its deliveries'."""
    workspace = str(uuid.uuid4())
    key = stack.cli("keys", "create", "--workspace", workspace).strip().splitlines()[-1]
    _endpoint(stack, workspace, receiver.url("/ok"))
    phase = Phase(stack.tmp / "worker.log")
    started = time.monotonic()
    if not _enqueue(stack, urls, workspace, key, name, timeout):
        ((settled,),) = _sql(
            stack,
            "SELECT count(*) FROM retrieval WHERE workspace_id = %s AND settled_at IS NOT NULL",
            workspace,
        )
        return {
            "settled_seconds": None,
            "gave_up_after_seconds": round(time.monotonic() - started, 1),
            "settled": settled,
            "delivered": 0,
            "delivered_seconds": None,
            "webhook_tasks_during": phase.counts(),
        }
    outcome = wait_for(lambda: _try(stack._outcome, workspace), 60, 1.0)
    states, _, seconds = cast(tuple[dict[str, int], int, float], outcome)
    tasks = phase.counts()

    def delivered() -> tuple[int, float] | None:
        ((count, last, first),) = _sql(
            stack,
            "SELECT count(*) FILTER (WHERE d.state = 'delivered'), max(d.delivered_at),"
            " (SELECT min(created_at) FROM retrieval WHERE workspace_id = %s)"
            " FROM webhook_delivery d WHERE d.workspace_id = %s",
            workspace,
            workspace,
        )
        if count < len(urls):
            return None
        return int(count), (last - first).total_seconds()

    got = _try(lambda: wait_for(delivered, 120, 0.5))
    return {
        "settled_seconds": round(seconds, 2),
        "states": states,
        "delivered": got[0] if got else 0,
        "delivered_seconds": round(got[1], 2) if got else None,
        "webhook_tasks_during": tasks,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-webhook-backlog-"))
    pages = args.a_batch + 3 * args.b_batch + args.hosts
    site = Site(tmp, pages, args.hosts, args.latency_ms)
    urls = site.urls.read_text().split()
    a_urls = urls[: args.a_batch]
    b_alone = urls[args.a_batch : args.a_batch + args.b_batch]
    b_first = urls[args.a_batch + args.b_batch : args.a_batch + 2 * args.b_batch]
    b_beside = urls[args.a_batch + 2 * args.b_batch : args.a_batch + 3 * args.b_batch]
    warm = urls[-args.hosts :]  # one per host: robots.txt cached before anything is timed
    receiver = TLSSite(names=("127.0.0.1",)).start()
    receiver.add("/ok", _ok)
    receiver.add("/hang", _hang)
    receiver.add("/fail", _fail)
    closed = [free_port() for _ in range(3)]  # nothing listens: connection refused
    bundle = receiver.write_ca(tmp / "receiver-ca.pem")
    ca = tmp / "cas.pem"
    ca.write_bytes(Path(str(site.info["ca"])).read_bytes() + bundle.read_bytes())
    ports = ",".join(str(p) for p in [site.info["port"], receiver.port, *closed])
    stack = Stack(tmp, site.info | {"ca": str(ca), "port": ports}).start()
    try:
        workspace = str(uuid.uuid4())
        key = stack.cli("keys", "create", "--workspace", workspace).strip().splitlines()[-1]
        _enqueue(stack, warm, workspace, key, "warm", 120)
        print(
            "B alone, twice (the first warms the worker's threads and connections)", file=sys.stderr
        )
        first = run_b(stack, b_first, receiver, "b-first", args.timeout)
        alone = run_b(stack, b_alone, receiver, "b-alone", args.timeout)
        print(f"  {first}\n  {alone}", file=sys.stderr)

        a = str(uuid.uuid4())
        key = stack.cli("keys", "create", "--workspace", a).strip().splitlines()[-1]
        hostile = [receiver.url("/hang")] * 4 + [receiver.url("/fail")] * 4
        hostile += [f"https://127.0.0.1:{port}/refused" for port in closed]
        for i, url in enumerate(hostile):
            _endpoint(stack, a, f"{url}?{i}")
        print(f"A: {len(hostile)} hostile endpoints, {args.a_batch} retrievals", file=sys.stderr)
        phase = Phase(stack.tmp / "worker.log")
        started = time.monotonic()
        _enqueue(stack, a_urls, a, key, "a", 600)
        a_seconds = time.monotonic() - started
        ((pending,),) = _sql(
            stack,
            "SELECT count(*) FROM webhook_delivery WHERE workspace_id = %s AND state = 'pending'",
            a,
        )
        a_tasks = phase.counts()
        print(f"  A settled in {a_seconds:.1f} s; {pending} deliveries pending", file=sys.stderr)

        print("B beside A's backlog", file=sys.stderr)
        beside = run_b(stack, b_beside, receiver, "b-beside", args.timeout)
        print(f"  {beside}", file=sys.stderr)
        time.sleep(args.settle)
        ((a_pending, a_failed, a_delivered, a_attempts),) = _sql(
            stack,
            "SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state ="
            " 'failed'), count(*) FILTER (WHERE state = 'delivered'), coalesce(sum(attempts), 0)"
            " FROM webhook_delivery WHERE workspace_id = %s",
            a,
        )
        load_after = os.getloadavg()
    finally:
        stack.stop()
        site.stop()
        receiver.stop()
    if args.keep:
        print(f"logs kept in {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    ratio = (beside["settled_seconds"] or float("inf")) / alone["settled_seconds"]
    return {
        "cores": os.cpu_count(),
        "a_batch": args.a_batch,
        "a_endpoints": len(hostile),
        "a_settled_seconds": round(a_seconds, 1),
        "a_pending_when_b_started": pending,
        "a_webhook_tasks_while_settling": a_tasks,
        "a_after": {
            "pending": a_pending,
            "failed": a_failed,
            "delivered": a_delivered,
            "attempts": int(a_attempts),
        },
        "b_alone_first": first,
        "b_alone": alone,
        "b_beside": beside,
        "b_ratio": round(ratio, 2) if ratio != float("inf") else None,
        "target_met": ratio <= TARGET_RATIO and beside["delivered"] == args.b_batch,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
    }


def main() -> None:
    # A TERM stops the processes the bench started (its `finally`), as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a-batch", type=int, default=300)
    parser.add_argument("--b-batch", type=int, default=150)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--latency-ms", default="50", help="the site's answer delay")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before A's tally")
    parser.add_argument("--timeout", type=float, default=180, help="give up on a B batch then")
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    result = run(parser.parse_args())
    alone, beside = result["b_alone"], result["b_beside"]
    print(
        f"B alone {alone['settled_seconds']} s, beside A's {result['a_pending_when_b_started']}"
        f" pending deliveries {beside['settled_seconds']} s: x{result['b_ratio']}"
        f" (target <= {TARGET_RATIO}); B's deliveries {beside['delivered']}"
        f" in {beside['delivered_seconds']} s (alone {alone['delivered_seconds']} s);"
        f" webhook tasks beside {beside['webhook_tasks_during']}",
        file=sys.stderr,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
