"""Flower beside a real worker: its HTTP API lists the run's tasks, behind basic auth."""

from __future__ import annotations

import ast
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Env
from tests.ops.conftest import scrape, value
from tests.support.factories import Api, body
from tests.support.services import Process, free_port, wait_for
from tests.support.tls_site import TLSSite

pytestmark = pytest.mark.usefixtures("services")

LOGIN = ("ops", f"pw-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="module")
def flower(env: Env) -> Iterator[str]:
    """`evidence flower --port P` against the test broker; its base URL once it sees events."""
    port = free_port()
    process = Process(
        ["flower", "--port", str(port)],
        env.tmp / f"flower-{port}.log",
        env={"EVIDENCE_FLOWER_BASIC_AUTH": ":".join(LOGIN)},
    ).start()
    url = f"http://127.0.0.1:{port}"

    def sees_worker() -> bool:
        try:
            samples = scrape(f"{url}/metrics")
        except (httpx.HTTPError, AssertionError):
            return False
        return value(samples, "flower_worker_online") >= 1

    try:
        wait_for(sees_worker, timeout=60, interval=0.5)
        yield url
    finally:
        process.stop()


class TestFlower:
    """What an operator sees in Flower during a real run."""

    def test_tasks_are_listed_with_retrieval_ids(
        self, flower: str, api: Api, workspace: uuid.UUID, site: TLSSite
    ) -> None:
        """/api/tasks names evidence.retrieve tasks whose only argument is the retrieval id."""
        urls = [site.page(f"/fl/{uuid.uuid4().hex}", "<p>flower</p>") for _ in range(3)]
        ids = [api.post(body(url, workspace)).json()["retrieval"]["id"] for url in urls]
        for rid in ids:
            api.wait(rid)

        def listed() -> dict[str, dict] | None:
            response = httpx.get(
                f"{flower}/api/tasks",
                params={"taskname": "evidence.retrieve", "limit": 1000},
                auth=LOGIN,
                timeout=10,
            )
            assert response.status_code == 200, response.text
            by_id = {ast.literal_eval(t["args"])[0]: t for t in response.json().values()}
            done = all(by_id.get(rid, {}).get("state") == "SUCCESS" for rid in ids)
            return by_id if done else None

        tasks = wait_for(listed, timeout=30, interval=0.5)
        for rid in ids:
            task = tasks[rid]  # type: ignore[index]
            assert task["name"] == "evidence.retrieve"
            assert task["args"] == repr([rid])
            assert task["kwargs"] in ("{}", {}, None)
            assert api.key not in str(task)

    def test_api_requires_basic_auth(self, flower: str) -> None:
        """Without the login (or with a wrong one) Flower's API answers 401."""
        assert httpx.get(f"{flower}/api/tasks", timeout=10).status_code == 401
        wrong = (LOGIN[0], "not-the-password")
        assert httpx.get(f"{flower}/api/tasks", auth=wrong, timeout=10).status_code == 401
        assert httpx.get(f"{flower}/api/workers", auth=LOGIN, timeout=10).status_code == 200

    def test_prometheus_endpoint(
        self, flower: str, api: Api, workspace: uuid.UUID, site: TLSSite
    ) -> None:
        """Flower's /metrics serves Prometheus text with per-task event counts and runtimes."""
        url = site.page(f"/fl/{uuid.uuid4().hex}", "<p>flower metrics</p>")
        api.wait(api.post(body(url, workspace)).json()["retrieval"]["id"])

        def counted() -> dict | None:
            samples = scrape(f"{flower}/metrics")
            done = {"task": "evidence.retrieve", "type": "task-succeeded"}
            return samples if value(samples, "flower_events_total", **done) >= 1 else None

        samples = wait_for(counted, timeout=30, interval=0.5)
        runtime = "flower_task_runtime_seconds_count"
        assert value(samples, runtime, task="evidence.retrieve") >= 1  # type: ignore[arg-type]
        assert value(samples, "flower_worker_online") >= 1  # type: ignore[arg-type]
