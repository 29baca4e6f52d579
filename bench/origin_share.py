"""A busy origin's slots shared between workspaces, end to end (issue 37, "noisy neighbours").

Run: .venv/bin/python -m bench.origin_share [--a 100] [--b 5] [--turn-ms 2000]
     [--a-lanes interactive,batch] [--compare OTHER.json --compare-label before]

The scenario, on the service's default settings (one `evidence worker`, API, beat; PostgreSQL;
robots.txt obeyed; `EVIDENCE_FETCH_PER_HOST_LIMIT` at its default) against one loopback origin
whose every response takes `--turn-ms` (one slot's turn: a fetch holds its slot that long):

  0. warm-up: one retrieval of the origin, so robots.txt is cached before anything is timed;
  1. alone: workspace B submits `--b` single retrievals of the origin, one at a time (each
     after the previous settled);
  2. beside A, once per lane in `--a-lanes`: a fresh workspace A submits `--a` URLs of the same
     origin (`interactive`: that many single POSTs at once, the rank B's singles have;
     `batch`: one `evidence enqueue`); once A holds every slot, a fresh B submits `--b` singles
     of the origin, one at a time, while A's queue is still long.

B's times are the service's own created_at -> settled_at. B's wait in turns is (B's time -
B's median alone) / the turn; the target is at most one turn. Prints a table (stderr), with
another run's JSON line side by side when `--compare` names one (e.g. the tree before slots
were shared, run in a worktree of that commit), and one JSON line (stdout), with the machine's
load averages (it may be shared). Needs PostgreSQL (EVIDENCE_TEST_POSTGRES_URL), redis-server.
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
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import redis
from rich.console import Console
from rich.table import Table

from bench.fairness import Agent, batch_figures, seconds_between
from bench.service import Stack, _try
from bench.throughput import Site
from tests.support.services import ROOT, wait_for

console = Console(stderr=True, width=140)
TARGET_TURNS = 1.0


def per_host_limit() -> int:
    """`EVIDENCE_FETCH_PER_HOST_LIMIT` as the service reads it (its default unless set)."""
    from worker.platform.settings import get_settings

    return get_settings().fetch_per_host_limit


def slots_held(stack: Stack) -> int:
    """Slots of the origin held now, fleet-wide (the politeness layer's sorted set in Redis)."""
    client = redis.Redis.from_url(stack.redis.url)
    try:
        keys = list(client.scan_iter("evidence:slots:*"))
        return sum(int(client.zcard(k)) for k in keys)  # type: ignore[arg-type]
    finally:
        client.close()


def a_states(stack: Stack, workspace: str) -> tuple[int, int]:
    """How many of A's retrievals have settled so far (A's progress), and how many run now
    (claimed by the worker: fetching or waiting for a slot)."""
    url = stack.database_url.replace("postgresql+psycopg://", "postgresql://")

    def count() -> tuple[int, int]:
        with psycopg.connect(url) as conn:
            query = (
                "SELECT count(*) FILTER (WHERE settled_at IS NOT NULL),"
                " count(*) FILTER (WHERE state = 'running') FROM retrieval WHERE workspace_id = %s"
            )
            settled, running = conn.execute(query, (workspace,)).fetchone() or (0, 0)
        return int(settled), int(running)

    # PostgreSQL is shared with other runs: wait for a free connection rather than fail.
    answer = wait_for(lambda: _try(count), timeout=300, interval=1.0)
    return answer  # type: ignore[return-value]


def singles(stack: Stack, agent: Agent, count: int, a: str | None) -> list[dict[str, Any]]:
    """`count` single retrievals of B, one at a time; each one's time and A's progress."""
    out = []
    for _ in range(count):
        before = a_states(stack, a) if a else (None, None)
        held = slots_held(stack)
        agent.submit_every(0.0, 1)
        (retrieval,) = agent.settled(agent.ids[-1:])
        out.append(
            {
                "seconds": round(
                    seconds_between(retrieval["created_at"], retrieval["settled_at"]), 3
                ),
                "state": retrieval["state"],
                "status": (retrieval.get("result") or {}).get("status"),
                "slots_held_at_submit": held,
                "a_settled_at_submit": before[0],
                "a_running_at_submit": before[1],
                "a_settled_at_settle": a_states(stack, a)[0] if a else None,
            }
        )
        console.print(f"  B: {out[-1]}")
    return out


def summary(items: list[dict[str, Any]], alone: float | None, turn: float) -> dict[str, Any]:
    times = [item["seconds"] for item in items]
    out: dict[str, Any] = {
        "each": times,
        "p50": round(statistics.median(times), 3),
        "max": round(max(times), 3),
        "states": sorted({f"{i['state']}/{i['status']}" for i in items}),
    }
    if alone is not None:
        out["wait_turns_p50"] = round((out["p50"] - alone) / turn, 2)
        out["wait_turns_max"] = round((out["max"] - alone) / turn, 2)
    return out


def beside(
    stack: Stack, key: str, lane: str, workspaces: tuple[str, str], urls: Any, args: Any
) -> dict[str, Any]:
    """A's `--a` URLs in `lane`, and B's singles once A holds every slot."""
    (a, b), a_urls = workspaces, [next(urls) for _ in range(args.a)]
    b_urls = [next(urls) for _ in range(args.b)]
    started = time.monotonic()
    enqueue = None
    if lane == "interactive":
        Agent(stack.api_url, key, a, a_urls).submit_every(0.0, len(a_urls))
    else:
        path = stack.tmp / f"a-{lane}.txt"
        path.write_text("\n".join(a_urls) + "\n")
        enqueue = subprocess.Popen(
            [sys.executable, "-m", "api.cli", "enqueue", str(path), "--workspace", a]
            + ["--kind", "url_text", "--api", stack.api_url, "--key", key],
            cwd=ROOT,
            env=stack.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    limit = per_host_limit()
    wait_for(lambda: slots_held(stack) >= limit, timeout=60, interval=0.1)
    console.print(f"{lane}: A holds {limit} slots after {time.monotonic() - started:.1f} s")
    b_items = singles(stack, Agent(stack.api_url, key, b, b_urls), args.b, a)
    if enqueue is not None:
        enqueue.wait(60)
    wait_for(lambda: a_states(stack, a)[0] == len(a_urls), timeout=600, interval=1.0)
    return {"a": batch_figures(stack, a), "b_items": b_items}


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-origin-share-"))
    lanes = [lane for lane in args.a_lanes.split(",") if lane]
    pages = 1 + 2 * args.b + (args.a + args.b) * len(lanes)
    site = Site(tmp, pages, 1, args.turn_ms)
    urls = iter(site.urls.read_text().split())
    stack = Stack(tmp, site.info).start()
    turn = args.turn_ms / 1000
    result: dict[str, Any] = {"per_host_limit": per_host_limit(), "turn_seconds": turn}
    try:
        # Fresh workspaces for every phase, one key for them all.
        warm, b, *pairs = (str(uuid.uuid4()) for _ in range(2 + 2 * len(lanes)))
        created = stack.cli("keys", "create", *(f"--workspace={w}" for w in (warm, b, *pairs)))
        key = created.strip().splitlines()[-1]
        warmer = Agent(stack.api_url, key, warm, [next(urls)])
        warmer.submit_every(0.0, 1)
        warmer.settled(warmer.ids)
        console.print(f"alone: B submits {args.b} singles, one at a time")
        agent = Agent(stack.api_url, key, b, [next(urls) for _ in range(args.b)])
        result["b_alone"] = summary(singles(stack, agent, args.b, None), None, turn)
        alone = result["b_alone"]["p50"]
        for number, lane in enumerate(lanes):
            console.print(f"{lane}: A submits {args.a} URLs of the origin")
            pair = (pairs[2 * number], pairs[2 * number + 1])
            got = beside(stack, key, lane, pair, urls, args)
            result[f"beside_{lane}"] = {
                "b": summary(got["b_items"], alone, turn),
                "b_items": got["b_items"],
                "a": got["a"],
            }
        result["loadavg_before"] = [round(x, 2) for x in load_before]
        result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        result["cores"] = os.cpu_count()
        result["targets"] = {
            f"b_wait_within_one_turn_{lane}": result[f"beside_{lane}"]["b"]["wait_turns_max"]
            <= TARGET_TURNS
            for lane in lanes
        }
    finally:
        stack.stop()
        site.stop()
    if args.keep:
        console.print(f"logs kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, figure) pairs of one run, in the table's order."""
    out = [
        ("per-host limit; one turn", f"{result['per_host_limit']}; {result['turn_seconds']:.1f} s"),
        ("B alone: each s", " ".join(f"{t:.2f}" for t in result["b_alone"]["each"])),
        (
            "B alone: p50 / max s",
            f"{result['b_alone']['p50']:.2f} / {result['b_alone']['max']:.2f}",
        ),
    ]
    for lane in ("interactive", "batch"):
        got = result.get(f"beside_{lane}")
        if got is None:
            continue
        b, a = got["b"], got["a"]
        progress = " ".join(
            f"{i['a_settled_at_submit']}->{i['a_settled_at_settle']} ({i['a_running_at_submit']})"
            for i in got["b_items"]
        )
        out += [
            (f"A {lane}: B each s", " ".join(f"{t:.2f}" for t in b["each"])),
            (f"A {lane}: B p50 / max s", f"{b['p50']:.2f} / {b['max']:.2f}"),
            (
                f"A {lane}: B's wait, turns p50 / max",
                f"{b['wait_turns_p50']:.2f} / {b['wait_turns_max']:.2f}",
            ),
            (f"A {lane}: A settled during each B (running at submit)", progress),
            (f"A {lane}: A's {a['n']}, lanes", f"{a['seconds']} s {a['states']} {a['lanes']}"),
        ]
    out.append(
        ("load average before / after", f"{result['loadavg_before']} / {result['loadavg_after']}")
    )
    return out


def show(result: dict[str, Any], other: dict[str, Any] | None, label: str) -> None:
    table = Table(title="origin share: B's single retrievals of a host A keeps busy")
    table.add_column("")
    if other is not None:
        table.add_column(label)
    table.add_column("this tree")
    theirs = dict(rows(other)) if other is not None else {}
    for name, figure in rows(result):
        table.add_row(name, *([theirs.get(name, "-")] if other is not None else []), figure)
    console.print(table)
    console.print(f"targets: {result['targets']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=int, default=100, help="A's URLs of the origin")
    parser.add_argument("--b", type=int, default=5, help="B's singles, one at a time")
    parser.add_argument("--turn-ms", type=float, default=2000.0, help="each response's delay")
    parser.add_argument("--a-lanes", default="interactive,batch", help="A's lanes, in turn")
    parser.add_argument("--compare", type=Path, help="another run's JSON line, shown beside")
    parser.add_argument("--compare-label", default="other run")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder and logs")
    args = parser.parse_args()
    result = run(args)
    other = json.loads(args.compare.read_text()) if args.compare else None
    show(result, other, args.compare_label)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
