"""With EVIDENCE_LOG_JSON=true every process writes JSON lines only, Celery's and Flower's too.

The processes run on a stack of their own (`tests.ops.conftest.stack`), so their logs hold
exactly one run: start-up, two retrievals, sweeps, Flower being read, warm shutdown with a
message still held.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from tests.ops.conftest import Stack
from tests.support.factories import SETTLED, Api, body
from tests.support.pages import article
from tests.support.services import ROOT, Process, wait_for
from tests.support.tls_site import TLSSite


def not_json(text: str) -> list[str]:
    """The non-empty lines of `text` that are not a JSON object."""
    bad = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            bad.append(line)
            continue
        if not isinstance(record, dict):
            bad.append(line)
    return bad


def events(text: str) -> list[str]:
    return [json.loads(line)["event"] for line in text.splitlines() if line.strip()]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code in (200, 401)
    except httpx.HTTPError:
        return False


def create_key(stack: Stack, workspace: uuid.UUID) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", "keys", "create", "--workspace", str(workspace)],
        cwd=ROOT,
        env={**stack.env, "EVIDENCE_LOG_JSON": "true"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip().splitlines()[-1]


def hold_a_message(broker_url: str) -> str:
    """Send a sweep due in five minutes (the sweeper reserves it until then); its task id."""
    from celery import Celery

    client = Celery("json-logs-test", broker=broker_url)
    try:
        return str(client.send_task("evidence.sweep", queue="sweep", countdown=300).id)
    finally:
        client.close()


class TestJsonLogs:
    """Every line of API, worker, sweeper, beat and Flower output parses as JSON."""

    def test_every_line_of_every_process_is_json(
        self, stack: Stack, tmp_path: Path, site: TLSSite
    ) -> None:
        """Banners, "Task ... received/succeeded", beat's schedule, Flower, shutdown, what kombu
        prints: all JSON."""
        env = {**stack.env, "EVIDENCE_LOG_JSON": "true", "EVIDENCE_LOG_LEVEL": "INFO"}
        api_port, flower_port = env["EVIDENCE_API_PORT"], env["EVIDENCE_FLOWER_PORT"]
        name = uuid.uuid4().hex[:6]
        processes = {
            "api": Process(["api", "--port", api_port], tmp_path / "api.log", env),
            "worker": Process(
                [
                    "worker",
                    "--queues",
                    "retrievals",
                    "--concurrency",
                    "1",
                    "--hostname",
                    f"jw-{name}@%h",
                ],
                tmp_path / "worker.log",
                env,
            ),
            "sweeper": Process(
                [
                    "worker",
                    "--queues",
                    "sweep",
                    "--concurrency",
                    "1",
                    "--hostname",
                    f"js-{name}@%h",
                ],
                tmp_path / "sweeper.log",
                env,
            ),
            "beat": Process(
                ["beat", "--schedule", str(tmp_path / "beat-schedule")], tmp_path / "beat.log", env
            ),
            "flower": Process(["flower", "--port", flower_port], tmp_path / "flower.log", env),
        }
        api_url, flower_url = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{flower_port}"
        for process in processes.values():
            process.start()
        try:
            wait_for(
                lambda: (
                    _answers(f"{api_url}/healthz")
                    and _answers(f"{flower_url}/api/workers")
                    and " ready." in processes["worker"].log()
                    and "Task evidence.sweep[" in processes["sweeper"].log()
                ),
                timeout=120,
                interval=0.5,
            )
            workspace = uuid.uuid4()
            key = create_key(stack, workspace)
            ready = site.page(f"/json/{uuid.uuid4().hex}", article("Plain lines"))
            missing = site.url(f"/json/{uuid.uuid4().hex}")
            with httpx.Client(base_url=api_url, timeout=10) as client:
                api = Api(client, key)
                ids = [
                    api.post(body(url, workspace)).json()["retrieval"]["id"]
                    for url in (ready, missing)
                ]
                done = [api.wait(rid, SETTLED, timeout=60) for rid in ids]
            assert [r["result"]["status"] for r in done] == ["ready", "unavailable"]
            tasks = httpx.get(
                f"{flower_url}/api/tasks",
                auth=tuple(env["EVIDENCE_FLOWER_BASIC_AUTH"].split(":")),
                timeout=10,
            )
            assert tasks.status_code == 200
            # A sweep due in five minutes: the sweeper holds it unacknowledged, and at shutdown
            # kombu prints that it puts it back ("Restoring 1 unacknowledged message(s)").
            held = hold_a_message(env["EVIDENCE_BROKER_URL"])
            wait_for(
                lambda: f"Task evidence.sweep[{held}] received" in processes["sweeper"].log(), 30
            )
        finally:
            for process in processes.values():
                process.stop()  # SIGTERM: Celery's warm shutdown notices are part of the check

        logs = {name: process.log() for name, process in processes.items()}
        assert {name: not_json(text) for name, text in logs.items()} == dict.fromkeys(logs, [])
        # The lines that used to be plain text are there, as JSON.
        worker = events(logs["worker"])
        for rid in ids:
            assert any(
                "Task evidence.retrieve[" in e and "succeeded" in e and rid in e for e in worker
            )
        assert any("Warm shutdown" in e for e in worker), worker
        sweeper = events(logs["sweeper"])
        assert any(e.startswith("Task evidence.sweep[") for e in sweeper)
        assert any(re.fullmatch(r"Restoring \d+ unacknowledged message\(s\)", e) for e in sweeper)
        assert any(e.startswith("Scheduler: Sending due task") for e in events(logs["beat"]))
        assert any(e.startswith("Visit me at") for e in events(logs["flower"]))
        assert "retrieval_created" in events(logs["api"])
