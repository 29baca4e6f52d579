"""/healthz while many clients ask for large evidence diffs at once (issue 37).

Starts PostgreSQL, Redis and `evidence api` (its default: one process per CPU), records an
evidence item with two 1 000-cue caption revisions (the second shifted, a tenth of its cues
reworded), then runs CLIENTS clients that each ask for that diff again and again (each from
a workspace of its own unless --one-workspace) while one more client asks /healthz every 50 ms.

Run: .venv/bin/python -m bench.diff_load [--clients 40] [--seconds 20] [--one-workspace]
Prints /healthz p50/p99/max, the diffs' answers by status and their p50, and the CPU a diff
costs the API's server processes (event loops, request threads) and its diff processes.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.load import percentile, serve
from bench.procstat import cpu_seconds, forkserver_trees, tree

CUES = 1_000


def _record(workspace: uuid.UUID) -> uuid.UUID:
    """An evidence item of `workspace` with two 1 000-cue revisions; its id."""
    from worker.content.results import Content, Segment, content_result
    from worker.domain import clock
    from worker.store import db, evidence

    url = f"https://example.org/talk/{uuid.uuid4().hex}.vtt"
    first = [Segment(2_000 * n, 2_000 * n + 1_500, f"cue {n} of the talk") for n in range(CUES)]
    second = [
        Segment(c.start_ms + 700, c.end_ms + 700, c.text + (" (reworded)" if n % 10 else ""))
        for n, c in enumerate(first)
    ]
    ids = set()
    for cues in (first, second):
        content = Content(
            text="\n".join(c.text for c in cues),
            segments=cues,
            source_url=url,
            content_kind="published_caption_file",
            caption_format="webvtt",
        )
        result = content_result("published_captions", content, clock.now())
        ids.add(
            db.with_transient_retry(
                lambda s, r=result: evidence.record(
                    s, workspace, "published_captions", url, r, clock.now()
                )
            )[0]
        )
    return ids.pop()


def _key(workspace: uuid.UUID) -> str:
    from api.auth import create_key
    from worker.domain import clock
    from worker.store import db

    return db.with_transient_retry(
        lambda s: create_key(s, [workspace], ["agent:research"], clock.now())
    )


def _probe_health(api: str, seconds: float) -> list[float]:
    """/healthz every 50 ms for `seconds` (after 1 s: the diffs under way first); each in ms."""
    stop = time.monotonic() + seconds
    times: list[float] = []
    time.sleep(1)
    with httpx.Client(base_url=api, timeout=60) as client:
        while time.monotonic() < stop:
            started = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            times.append((time.perf_counter() - started) * 1000)
            time.sleep(0.05)
    return times


def _cpu(api_pid: int) -> tuple[float, float]:
    """CPU seconds so far of the API's server processes themselves (the event loops and
    request threads), and of the diff processes under them (fork server trees)."""
    aside = set(forkserver_trees(api_pid))
    server = sum(cpu_seconds(p, reaped=False) for p in tree(api_pid) if p not in aside)
    return server, sum(cpu_seconds(p, reaped=False) for p in aside)


async def _load(
    api: str, targets: list[tuple[str, str]], seconds: float, api_pid: int
) -> dict[str, Any]:
    stop = time.monotonic() + seconds
    server_before, aside_before = _cpu(api_pid)
    statuses: Counter[int] = Counter()
    diff_ms: list[float] = []
    limits = httpx.Limits(max_connections=len(targets) + 4)
    async with httpx.AsyncClient(base_url=api, timeout=60, limits=limits) as client:

        async def differ(path: str, key: str) -> None:
            while time.monotonic() < stop:
                started = time.perf_counter()
                response = await client.get(path, headers={"Authorization": f"Bearer {key}"})
                statuses[response.status_code] += 1
                if response.status_code == 200:
                    diff_ms.append((time.perf_counter() - started) * 1000)
                elif response.status_code == 429:
                    await asyncio.sleep(float(response.headers.get("retry-after", "1")))

        # /healthz is asked from a process of its own: in this one its answers wait behind
        # the diff clients' (half a core of reading large answers), which then got measured.
        context = multiprocessing.get_context("spawn")
        with context.Pool(1) as probe:
            probing = probe.apply_async(_probe_health, (api, seconds))
            await asyncio.gather(*(differ(p, k) for p, k in targets))
            if not targets:
                await asyncio.sleep(seconds)
            health_ms = probing.get(timeout=seconds + 60)
    server, aside = _cpu(api_pid)
    per_diff = 1000 / max(1, len(diff_ms))
    return {
        "healthz_p50_ms": round(percentile(health_ms, 50), 1),
        "healthz_p99_ms": round(percentile(health_ms, 99), 1),
        "healthz_max_ms": round(max(health_ms), 1),
        "healthz_n": len(health_ms),
        "diff_status": dict(statuses),
        "diff_p50_ms": round(percentile(diff_ms, 50), 1) if diff_ms else None,
        "diffs_per_s": round(len(diff_ms) / seconds, 1),
        # What a diff costs the processes that answer every other request, and what it costs
        # apart from them.
        "server_cpu_ms_per_diff": round((server - server_before) * per_diff, 1),
        "diff_process_cpu_ms_per_diff": round((aside - aside_before) * per_diff, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--one-workspace", action="store_true")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        serve(Path(tmp), {"api": ["api", "--host", "127.0.0.1"]}, "WARNING", 0) as served,
    ):
        spaces = [uuid.uuid4() for _ in range(1 if args.one_workspace else args.clients)]
        items = {ws: (_record(ws), _key(ws)) for ws in spaces}
        targets = []
        for n in range(args.clients):
            item, key = items[spaces[n % len(spaces)]]
            targets.append((f"/research-api/evidence/{item}/diff?from=1&to=2", key))
        api_pid = served.procs["api"].pid
        idle = asyncio.run(_load(served.api, targets[:0], 3, api_pid))
        print("idle  ", idle)
        print("loaded", asyncio.run(_load(served.api, targets, args.seconds, api_pid)))


if __name__ == "__main__":
    main()
