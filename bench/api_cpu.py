"""The API's CPU per request: one API process, no worker, a closed loop of clients.

What each route costs the API process itself (all its threads, from /proc), apart from the
queueing that a loaded machine adds (`bench.load` measures that). Starts its own PostgreSQL
database and Redis, one `evidence api` process, and `--clients` threads, each on its own
connection, sending requests back to back: `POST /retrieve` (new retrievals; nothing runs
them), `GET /retrievals/{id}` of those (each once, by a second key of the workspace, so that
none is an early poll), and `/healthz` (the framework alone, for scale).

With `--against REV` it runs the same measurement on a git worktree of REV first, then on this
tree, alternately (`--rounds`), and prints both side by side with their ratio: the machine's
speed drifts by tens of percent over minutes here, so only figures taken together compare.

Run: python -m bench.api_cpu --requests 3000 [--against HEAD~1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
RETRIEVE = "/research-api/evidence/retrieve"
RETRIEVAL = "/research-api/evidence/retrievals/{id}"
ROUTES = ("POST retrieve", "GET retrieval", "GET healthz")


def measure(tree: Path, requests: int, clients: int) -> dict[str, float]:
    """API CPU ms per request, by route, for the code in `tree`."""
    from bench.procstat import tree_cpu
    from tests.support.services import (
        Process,
        RedisServer,
        create_postgres_database,
        drop_postgres_database,
        free_port,
        wait_for,
    )

    tmp = Path(tempfile.mkdtemp(prefix="evidence-api-cpu-"))
    redis = RedisServer(tmp).start()
    db_name, db_url = create_postgres_database()
    env = {
        "PYTHONPATH": str(tree),
        "EVIDENCE_DATABASE_URL": db_url,
        "EVIDENCE_BROKER_URL": redis.url,
        "EVIDENCE_LOG_LEVEL": "WARNING",
        # One client workspace at hundreds of requests a second: lift its quotas out of the way.
        "EVIDENCE_QUOTA_WRITE_RATE": "100000",
        "EVIDENCE_QUOTA_WRITE_BURST": "100000",
        # Reads are admitted too (a GET costs a read token): lifted, or the GET loop is refused.
        "EVIDENCE_QUOTA_READ_RATE": "100000",
        "EVIDENCE_QUOTA_READ_BURST": "100000",
        "EVIDENCE_QUOTA_OPEN_RETRIEVALS": "10000000",
    }
    cli = [sys.executable, "-m", "api.cli"]
    api: Process | None = None
    try:
        run_env = {**os.environ, **env}
        subprocess.run([*cli, "migrate"], cwd=tree, env=run_env, check=True, capture_output=True)
        workspace = str(uuid.uuid4())
        key, reader = (
            subprocess.run(
                [*cli, "keys", "create", "--workspace", workspace],
                cwd=tree, env=run_env, check=True, capture_output=True, text=True,
            ).stdout.strip().splitlines()[-1]
            for _ in range(2)
        )  # fmt: skip
        port = free_port()
        api = Process(["api", "--port", str(port), "--workers", "1"], tmp / "api.log", env, tree)
        api.start()
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _up(base), timeout=60)
        headers = {"Authorization": f"Bearer {key}"}
        ids: list[str] = []

        def post(client: httpx.Client, n: int) -> None:
            body = {
                "url": f"https://example.org/page/{n}",
                "kind": "url_text",
                "workspace_id": workspace,
                "mutation_id": str(uuid.uuid4()),
            }
            answer = client.post(RETRIEVE, json=body)
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["retrieval"]["id"])

        def get(client: httpx.Client, n: int) -> None:
            # Each open retrieval once, by a key that was never told when to poll it: a poll
            # before its advice would wait for it (api.services.poll_advice), and a poller that
            # waits costs nothing here.
            answer = client.get(
                RETRIEVAL.format(id=ids[n]), headers={"Authorization": f"Bearer {reader}"}
            )
            assert answer.status_code == 200, answer.text

        def health(client: httpx.Client, _: int) -> None:
            assert client.get("/healthz").status_code == 200

        def phase(send: Callable[[httpx.Client, int], None], count: int) -> float:
            per_client = count // clients

            def run(index: int) -> None:
                with httpx.Client(base_url=base, headers=headers) as client:
                    for n in range(per_client):
                        send(client, index * per_client + n)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
            before = tree_cpu(api.pid)
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return 1000 * (tree_cpu(api.pid) - before) / (per_client * clients)

        phase(post, requests // 5)  # warm-up: pools, prepared statements, the tally
        return {
            "POST retrieve": phase(post, requests),
            "GET retrieval": phase(get, requests),
            "GET healthz": phase(health, requests),
        }
    finally:
        if api is not None:
            api.stop()
        redis.stop()
        drop_postgres_database(db_name)


def _up(base: str) -> bool:
    try:
        return httpx.get(base + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="per route and round")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--against", default="", help="a git revision to measure side by side")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    trees = {"this tree": ROOT}
    worktree = None
    if args.against:
        worktree = Path(tempfile.mkdtemp(prefix="evidence-api-cpu-rev-")) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(worktree), args.against],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
        trees = {args.against: worktree, "this tree": ROOT}
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        for _ in range(args.rounds):
            for name, tree in trees.items():
                figures[name].append(measure(tree, args.requests, args.clients))
                print(name, {k: round(v, 2) for k, v in figures[name][-1].items()}, flush=True)
    finally:
        if worktree is not None:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False
            )
    print(f"\nAPI CPU per request, ms (mean of {args.rounds} rounds, {args.clients} clients)")
    names = list(trees)
    print(
        "route".ljust(16) + "".join(n.rjust(14) for n in names) + ("   ratio" if worktree else "")
    )
    for route in ROUTES:
        means = [sum(r[route] for r in figures[n]) / len(figures[n]) for n in names]
        ratio = f"   {means[-1] / means[0]:.2f}" if worktree else ""
        print(route.ljust(16) + "".join(f"{m:14.2f}" for m in means) + ratio)


if __name__ == "__main__":
    main()
