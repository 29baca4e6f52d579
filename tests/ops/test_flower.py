"""Flower beside a real worker: its HTTP API lists the run's tasks, behind basic auth."""

from __future__ import annotations

import ast
import re
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import Env, Services
from tests.ops.conftest import scrape, value
from tests.support.factories import Api, body, cancel_open
from tests.support.pages import article, slow
from tests.support.services import Process, free_port, wait_for
from tests.support.tls_site import TLSSite

pytestmark = pytest.mark.usefixtures("services")

LOGIN = ("ops", f"pw-{uuid.uuid4().hex[:12]}")


def quiet_the_batch_lane(env: Env) -> None:
    """Cancel what earlier tests left open and drop the batch lane's tokens.

    Left alone, the session's worker drains them while these tests run, and each token is a
    task whose events Flower processes in turn: in a full suite run its task list lagged more
    than 30 s behind the worker. Earlier tests have ended, so nothing open is still awaited.
    """
    import redis

    from worker.jobs.celery_app import BATCH_QUEUE

    cancel_open(None)
    client = redis.Redis.from_url(env.broker_url)
    try:
        client.delete(BATCH_QUEUE)
    finally:
        client.close()


@pytest.fixture(scope="module")
def flower(env: Env) -> Iterator[str]:
    """`evidence flower --port P` against the test broker; its base URL once it sees events."""
    quiet_the_batch_lane(env)
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


def flower_tasks(flower: str, taskname: str) -> dict[str, dict[str, Any]]:
    """Flower's /api/tasks for one task name: {task id: task}."""
    response = httpx.get(
        f"{flower}/api/tasks",
        params={"taskname": taskname, "limit": 1000},
        auth=LOGIN,
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return response.json()


def running(api: Api, rid: str) -> None:
    def is_running() -> bool:
        return api.get(rid).json()["retrieval"]["state"] == "running"

    wait_for(is_running, timeout=30, interval=0.05)


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

    def test_task_results_name_the_outcome(
        self, flower: str, api: Api, workspace: uuid.UUID, site: TLSSite
    ) -> None:
        """A retrieval task's result says how the retrieval ended, not only SUCCESS.

        Four deliveries: one settles a ready page, one a missing page (not_found), one loses
        its claim to a cancel while it fetches (fenced), one is a late copy of a retrieval
        already cancelled (skipped).
        """
        from worker.domain import clock
        from worker.jobs import outbox
        from worker.retrieval import records as retrievals
        from worker.store import db

        tag = uuid.uuid4().hex
        ready = site.page(f"/fl/{tag}/ready", article("Flower outcomes"))
        missing = site.url(f"/fl/{tag}/missing")
        site.add(f"/fl/{tag}/slow", slow)
        ids = {
            "ready": api.post(body(ready, workspace)).json()["retrieval"]["id"],
            "missing": api.post(body(missing, workspace)).json()["retrieval"]["id"],
        }
        ids["fenced"] = api.post(body(site.url(f"/fl/{tag}/slow?s=3"), workspace)).json()[
            "retrieval"
        ]["id"]
        running(api, ids["fenced"])
        assert api.cancel(ids["fenced"]).json()["retrieval"]["state"] == "cancelled"

        late = retrievals.NewRetrieval(workspace, uuid.uuid4(), ready, "url_text", None)
        row, _ = db.with_transient_retry(
            lambda s: retrievals.create_retrieval(s, late, clock.now(), timedelta(hours=1))
        )
        ids["skipped"] = str(row.id)
        assert api.cancel(ids["skipped"]).json()["retrieval"]["state"] == "cancelled"
        assert outbox.publish([row.id]) == [row.id]  # a delivery the broker made anyway

        done = {name: api.wait(rid) for name, rid in ids.items()}
        assert done["ready"]["result"]["status"] == "ready"
        assert done["missing"]["result"]["reason"] == "not_found"

        listed: dict[str, Any] = {}

        def results() -> dict[str, dict[str, Any]] | None:
            by_rid = {
                ast.literal_eval(t["args"])[0]: t
                for t in flower_tasks(flower, "evidence.retrieve").values()
            }
            listed.update({name: by_rid.get(rid, {}).get("state") for name, rid in ids.items()})
            tasks = [by_rid.get(rid, {}) for rid in ids.values()]
            if not all(t.get("state") == "SUCCESS" and t.get("result") for t in tasks):
                return None
            return {name: ast.literal_eval(by_rid[rid]["result"]) for name, rid in ids.items()}

        try:
            seen = wait_for(results, timeout=30, interval=0.5)
        except TimeoutError:
            pytest.fail(f"Flower's task states after 30 s: {listed}")
        expected = {
            "ready": ("settled", "completed", "ready", None, 1),
            "missing": ("settled", "completed", "unavailable", "not_found", 1),
            "fenced": ("fenced", "cancelled", "cancelled", "cancelled", 1),
            "skipped": ("skipped", "cancelled", "cancelled", "cancelled", None),
        }
        for name, (delivery, state, status, reason, attempt) in expected.items():
            assert seen[name] == {  # type: ignore[index]
                "retrieval_id": ids[name],
                "delivery": delivery,
                "state": state,
                "status": status,
                "reason": reason,
                "attempt": attempt,
            }, name
            assert (state, status, reason) == (
                done[name]["state"],
                done[name]["result"]["status"],
                done[name]["result"]["reason"],
            )


#: The worker's log line for each task it ran: `Task evidence.sweep[<id>] succeeded in ...`.
SWEEP_DONE = re.compile(r"Task evidence\.sweep\[([0-9a-f-]{36})\] succeeded")


class EventRecorder:
    """Every event on the test broker's event exchange, as Flower would receive them."""

    def __init__(self) -> None:
        from worker.jobs.celery_app import app

        self.events: list[dict[str, Any]] = []
        self._connection = app.connection_for_read()
        self._receiver = app.events.Receiver(self._connection, handlers={"*": self.events.append})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def __enter__(self) -> EventRecorder:
        self._thread.start()
        # Listening once any worker's heartbeat (every 2 s) has come through.
        wait_for(lambda: self.events, timeout=15, interval=0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        self._receiver.should_stop = True
        self._thread.join(10)
        self._connection.release()


class TestSweepEvents:
    """The sweep runs every few seconds without a trace in Flower's task list."""

    def test_sweeps_send_no_task_events(
        self, flower: str, services: Services, api: Api, workspace: uuid.UUID, site: TLSSite
    ) -> None:
        """While sweeps run, no task event comes from the sweeper; retrievals still send theirs.

        The sweeper stays visible as a worker (its heartbeats), and Flower lists no sweep.
        """
        args = services.sweeper.args
        sweeper = args[args.index("--hostname") + 1].split("@")[0] + "@"
        before = set(SWEEP_DONE.findall(services.sweeper.log()))
        url = site.page(f"/fl/{uuid.uuid4().hex}", "<p>between sweeps</p>")
        with EventRecorder() as recorder:
            rid = api.post(body(url, workspace)).json()["retrieval"]["id"]
            api.wait(rid)

            def swept() -> set[str]:
                done = set(SWEEP_DONE.findall(services.sweeper.log())) - before
                return done if len(done) >= 3 else set()

            sweeps: set[str] = wait_for(swept, timeout=30, interval=0.2)  # type: ignore[assignment]
            time.sleep(2.5)  # one more heartbeat interval: late events would arrive by now
        events = recorder.events

        from_sweeper = [e for e in events if e.get("hostname", "").startswith(sweeper)]
        assert any(e["type"] == "worker-heartbeat" for e in from_sweeper), events
        assert [e for e in from_sweeper if e["type"].startswith("task-")] == []
        assert not [e for e in events if e.get("uuid") in sweeps]
        # The same recorder saw the retrieval's task events: the check above is not vacuous.
        received = [e for e in events if e["type"] == "task-received" and rid in e.get("args", "")]
        assert len(received) == 1 and received[0]["name"] == "evidence.retrieve"
        succeeded = [
            e
            for e in events
            if e["type"] == "task-succeeded" and e.get("uuid") == received[0]["uuid"]
        ]
        assert len(succeeded) == 1 and rid in succeeded[0]["result"]
        assert flower_tasks(flower, "evidence.sweep") == {}
