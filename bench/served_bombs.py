"""Hostile bodies against `evidence api --workers 2`, as served: how long each bomb takes to be
answered, how /healthz answers meanwhile, and whether any API process was replaced.

Run it by hand: `.venv/bin/python -m bench.served_bombs [--senders 2] [--rounds 4]`. It starts
its own Redis, PostgreSQL database and API, and stops them after. For each bomb in turn (keyed,
then keyless), `--senders` processes each send it `--rounds` times while this process polls
/healthz every 10 ms: senders of their own, so that their JSON and sockets do not hold up the
probe's interpreter.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

from bench import procstat
from tests.support.services import (
    ROOT,
    RedisServer,
    create_postgres_database,
    drop_postgres_database,
    free_port,
    wait_for,
)

API = "/research-api"
#: 440 000 extra keys made 7.9 MB, under the 8 MiB body limit (the attack as reported).
BOMB_KEYS = 440_000


def bombs(workspace: str) -> dict[str, tuple[str, bytes]]:
    """Name -> (path, body): the key bomb on the retrieve route and on the largest route."""
    retrieve = {
        "url": "https://example.org/",
        "kind": "url_text",
        "workspace_id": workspace,
        "mutation_id": str(uuid.uuid4()),
    }
    extra = {f"k{i}": 1 for i in range(BOMB_KEYS)}
    brief = {"title": "t", "question": "q", "summary": "", "findings": [], "language": "en"}
    return {
        "retrieve key bomb": (
            f"{API}/evidence/retrieve",
            json.dumps(retrieve | extra, separators=(",", ":")).encode(),
        ),
        "briefs/create key bomb": (
            f"{API}/briefs/create",
            json.dumps(
                {"workspace_id": workspace, "content": brief | extra}, separators=(",", ":")
            ).encode(),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bombs-"))
    redis = RedisServer(tmp).start()
    db_name, db_url = create_postgres_database()
    env = os.environ | {"EVIDENCE_DATABASE_URL": db_url, "EVIDENCE_BROKER_URL": redis.url}
    cli = [sys.executable, "-m", "api.cli"]
    api: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run([*cli, "migrate"], cwd=ROOT, env=env, check=True, capture_output=True)
        workspace = str(uuid.uuid4())
        created = subprocess.run(
            [*cli, "keys", "create", "--workspace", workspace],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        key = created.stdout.strip().splitlines()[-1]
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(tmp / "api.log", "ab") as log:
            api = subprocess.Popen(
                [*cli, "api", "--port", str(port), "--workers", "2"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(lambda: _up(url), timeout=60, interval=0.3)
        wait_for(lambda: len(procstat.children(api.pid)) >= 2, timeout=60, interval=0.3)
        time.sleep(1)
        before = sorted(procstat.children(api.pid))
        idle = _health_latencies(url, 2.0)
        print(f"/healthz idle: {_summary(idle)}")
        for name, (path, data) in bombs(workspace).items():
            for keyed in (True, False):
                label = f"{name}, {'keyed' if keyed else 'keyless'}"
                headers = {"Content-Type": "application/json"}
                if keyed:
                    headers["Authorization"] = f"Bearer {key}"
                job = (url, path, data, headers, args.rounds)
                done = threading.Event()
                probe = _Probe(url, done)
                probe.start()
                with multiprocessing.get_context("spawn").Pool(args.senders) as pool:
                    answers = [a for sent in pool.map(_send, [job] * args.senders) for a in sent]
                done.set()
                probe.join()
                health = probe.latencies
                statuses = sorted({status for status, _ in answers})
                print(f"{label}: status {statuses}, answered {_summary([t for _, t in answers])}")
                print(f"    /healthz meanwhile: {_summary(health)}")
        after = sorted(procstat.children(api.pid))
        replaced = "none replaced" if before == after else f"REPLACED: {before} -> {after}"
        print(f"API processes: {replaced}")
    finally:
        if api is not None:
            api.terminate()
            api.wait(timeout=20)
        redis.stop()
        drop_postgres_database(db_name)


def _send(
    job: tuple[str, str, bytes, dict[str, str], int],
) -> list[tuple[int, float]]:
    """One sender process: the bomb `rounds` times; each answer's status and seconds."""
    url, path, data, headers, rounds = job
    answers = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(rounds):
            start = time.monotonic()
            try:
                status = client.post(path, content=data, headers=headers).status_code
            except httpx.HTTPError:
                status = 0  # the connection was cut: a refusal before the body was read
            answers.append((status, time.monotonic() - start))
    return answers


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _health_latencies(url: str, seconds: float) -> list[float]:
    done = threading.Event()
    threading.Timer(seconds, done.set).start()
    return _health_until(url, done)


def _health_until(url: str, done: threading.Event) -> list[float]:
    """/healthz every 10 ms, each on a new connection (as a health checker dials), until
    `done`: each answer's latency (infinite for no answer)."""
    latencies: list[float] = []
    with httpx.Client(timeout=10, headers={"Connection": "close"}) as client:
        while not done.is_set():
            start = time.monotonic()
            try:
                client.get(f"{url}/healthz").raise_for_status()
                latencies.append(time.monotonic() - start)
            except httpx.HTTPError:
                latencies.append(float("inf"))
            time.sleep(0.01)
    return latencies


class _Probe(threading.Thread):
    """/healthz polled in a thread until `done` is set."""

    def __init__(self, url: str, done: threading.Event) -> None:
        super().__init__()
        self.url, self.done = url, done
        self.latencies: list[float] = []

    def run(self) -> None:
        self.latencies = _health_until(self.url, self.done)


def _summary(seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return (
        f"n={len(ms)} median {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms"
    )


if __name__ == "__main__":
    main()
