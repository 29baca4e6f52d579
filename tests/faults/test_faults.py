"""Faults injected against the real services; every test ends by checking the invariants.

I1 nothing stuck, I2 one retrieval per mutation, I3 one revision per distinct content,
I4 no 500, nothing leaked, every 503 with Retry-After, I5 every accepted request settled,
within max_attempts, once.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

import psycopg
import pytest

from tests.conftest import Env, Services
from tests.faults.history import History
from tests.support import hostile
from tests.support.factories import body
from tests.support.pages import article
from tests.support.services import POSTGRES_ADMIN_URL, Process, wait_for
from tests.support.slowdown import scaled
from tests.support.tls_site import TLSSite


def submit(history: History, urls: list[str]) -> list[str]:
    """POST each URL once (fresh mutation ids); return the retrieval ids accepted."""
    ids = []
    for url in urls:
        response = history.post(body(url, history.workspace))
        assert response is not None and response.status_code in (200, 202), response
        ids.append(response.json()["retrieval"]["id"])
    return ids


def state_of(history: History, retrieval_id: str) -> str:
    response = history.get(retrieval_id)
    assert response is not None
    return str(response.json()["retrieval"]["state"])


def wait_running(history: History, retrieval_id: str, timeout: float = 20) -> None:
    wait_for(lambda: state_of(history, retrieval_id) == "running", timeout=timeout)


def attempt_of(retrieval_id: str) -> int:
    from worker.store import db, retrieval_view

    with db.session_scope(readonly=True) as session:
        row = retrieval_view.get_retrieval(session, uuid.UUID(retrieval_id))
        assert row is not None
        return row.attempt


def logged(log: str, retrieval_id: str, *events: str) -> dict[str, Any] | None:
    """The first JSON log record of one of `events` for `retrieval_id` in a worker's log."""
    for line in log.splitlines():
        if not line.startswith("{") or retrieval_id not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") in events and record.get("retrieval_id") == retrieval_id:
            return record  # type: ignore[no-any-return]
    return None


def signal_children(services: Services, sig: int) -> list[int]:
    pids = services.worker.children()
    for pid in pids:
        os.kill(pid, sig)
    return pids


def pause_worker(services: Services) -> None:
    """SIGSTOP the whole worker (main and pool), so not even its time limit can act."""
    os.killpg(services.worker.pid, signal.SIGSTOP)


def resume_worker(services: Services) -> None:
    os.killpg(services.worker.pid, signal.SIGCONT)


@contextmanager
def database_refusing_connections(name: str) -> Iterator[None]:
    """PostgreSQL refuses new connections to `name` and cuts the open ones (as while it restarts
    or fails over), until the block ends."""

    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def assert_survived(services: Services) -> None:
    """A broker outage ends no process: each reconnects on its own (no restart by the test)."""
    dead = [name for name, process in services.processes().items() if not process.alive()]
    assert not dead, f"exited during the broker outage: {dead}"


class TestWorkerDeath:
    """Workers die or stop mid-fetch; the database lease and the sweep recover the work."""

    def test_sigkill_child_mid_fetch_reruns_once(
        self, history: History, services: Services, pages, max_attempts: int
    ) -> None:
        """SIGKILL of the pool child mid-fetch: re-run as attempt 2, completed, one revision."""
        (rid,) = submit(history, [pages(slow_seconds=3)])
        wait_running(history, rid)
        signal_children(services, signal.SIGKILL)
        rows = history.check(max_attempts)
        assert rows[0].state == "completed" and rows[0].attempt == 2

    def test_sigkill_whole_worker_then_restart(
        self, history: History, services: Services, pages, max_attempts: int
    ) -> None:
        """SIGKILL of main and children; a restarted worker finishes via lease + sweep."""
        (rid,) = submit(history, [pages(slow_seconds=3)])
        wait_running(history, rid)
        services.worker.kill_group()
        time.sleep(scaled(2))
        services.start_worker()
        rows = history.check(max_attempts)
        assert rows[0].state == "completed" and rows[0].attempt == 2

    def test_sigterm_warm_shutdown_finishes_the_task(
        self, history: History, services: Services, pages, max_attempts: int
    ) -> None:
        """SIGTERM (warm shutdown) mid-fetch: the task finishes and settles on attempt 1."""
        (rid,) = submit(history, [pages(slow_seconds=3)])
        wait_running(history, rid)
        services.worker.signal(signal.SIGTERM)
        services.worker.proc.wait(scaled(30))  # type: ignore[union-attr]
        rows = history.check(max_attempts, settle_timeout=5)
        assert rows[0].state == "completed" and rows[0].attempt == 1
        services.start_worker()

    def test_cold_shutdown_reruns_via_sweep(
        self, history: History, services: Services, pages, max_attempts: int
    ) -> None:
        """SIGTERM twice (cold shutdown) mid-fetch: re-run after the lease; settled once."""
        (rid,) = submit(history, [pages(slow_seconds=3)])
        wait_running(history, rid)
        services.worker.signal(signal.SIGTERM)
        time.sleep(scaled(0.3))  # the warm shutdown has begun
        services.worker.signal(signal.SIGTERM)
        services.worker.proc.wait(scaled(30))  # type: ignore[union-attr]
        services.start_worker()
        rows = history.check(max_attempts)
        assert rows[0].state == "completed"
        assert rows[0].attempt in (1, 2)

    def test_paused_worker_past_lease_is_fenced(
        self, history: History, services: Services, env: Env, site: TLSSite, max_attempts: int
    ) -> None:
        """SIGSTOP past the lease; the zombie (attempt 1) wakes while attempt 2 is still
        fetching, so the row is `running` and only the attempt fence refuses its settle."""
        deliveries = itertools.count(1)
        served: list[int] = []

        def route(handler: BaseHTTPRequestHandler) -> None:
            n = next(deliveries)
            served.append(n)
            page = article("Fenced", marker=f"delivery{n}").encode()
            # Attempt 1 is paused mid-body; attempt 2 trickles 2.5 s (inside the 4 s fetch
            # bound), time for the zombie to wake and try to settle while attempt 2 runs.
            seconds = 3.0 if n == 1 else 2.5
            hostile.trickle(page, interval=seconds / 20, step=len(page) // 20 + 1)(handler)

        url = site.add(f"/ft/zombie/{uuid.uuid4().hex}", route)
        (rid,) = submit(history, [url])
        wait_running(history, rid)
        wait_for(lambda: served, timeout=10)  # attempt 1 is mid-fetch
        pause_worker(services)
        helper = Process(
            ["worker", "--concurrency", "1", "--hostname", f"helper-{uuid.uuid4().hex[:6]}@%h"],
            env.tmp / "helper-worker.log",
        ).start()
        try:
            try:
                wait_for(lambda: len(served) >= 2, timeout=40)  # attempt 2 is mid-fetch
            finally:
                resume_worker(services)
            assert attempt_of(rid) == 2
            late = wait_for(
                lambda: logged(services.worker.log(), rid, "settled", "settle_fenced"), timeout=10
            )
            assert late["event"] == "settle_fenced", f"the zombie's settle was accepted: {late}"
            wait_for(lambda: state_of(history, rid) == "completed", timeout=30)
        finally:
            helper.stop()
        settled = logged(helper.log(), rid, "settled")
        assert late["attempt"] == 1 and settled is not None and settled["attempt"] == 2
        # Refused before attempt 2 settled: the state alone would have let it through.
        assert late["timestamp"] < settled["timestamp"], (late, settled)
        rows = history.check(max_attempts)
        assert rows[0].state == "completed" and rows[0].attempt == 2
        assert "delivery2" in rows[0].result["text"] and "delivery1" not in rows[0].result["text"]


class TestBrokerFaults:
    """Redis stops and starts; the outbox and the sweep make sure nothing is lost."""

    def test_post_while_broker_down(
        self, history: History, env: Env, services: Services, pages, max_attempts: int
    ) -> None:
        """20 POSTs with Redis down: all 202, /readyz 503; all settle once Redis is back."""
        env.redis.stop()
        try:
            submit(history, [pages() for _ in range(20)])
            ready = history.api.client.get("/readyz")
            assert ready.status_code == 503 and ready.headers.get("Retry-After")
        finally:
            env.redis.start()
        rows = history.check(max_attempts, settle_timeout=60)
        assert all(r.state == "completed" for r in rows) and len(rows) == 20
        assert_survived(services)

    def test_redis_restart_loses_queue(
        self, history: History, env: Env, services: Services, pages, max_attempts: int
    ) -> None:
        """A backlog queued and running when Redis restarts without saving: all settle, and
        the worker that was running tasks when the broker went away is still the same process."""
        worker_pid = services.worker.pid
        submit(history, [pages(slow_seconds=1) for _ in range(4)] + [pages() for _ in range(30)])
        time.sleep(scaled(1.0))
        env.redis.stop()
        time.sleep(scaled(3))
        env.redis.start()
        rows = history.check(max_attempts, settle_timeout=90)
        assert len(rows) == 34
        assert {r.state for r in rows} <= {"completed", "unconfirmed"}
        assert sum(r.state == "completed" for r in rows) >= 30
        assert_survived(services)
        assert services.worker.pid == worker_pid

    def test_duplicate_deliveries_execute_once(
        self, history: History, pages, max_attempts: int
    ) -> None:
        """The same task published three more times (and to two workers): one claim, one settle."""
        from worker.jobs import outbox

        (rid,) = submit(history, [pages(slow_seconds=2)])
        for _ in range(3):
            assert outbox.publish([uuid.UUID(rid)])
        rows = history.check(max_attempts)
        assert rows[0].state == "completed" and rows[0].attempt == 1

    def test_delivery_after_cancel_or_expiry_does_nothing(
        self, history: History, pages, max_attempts: int
    ) -> None:
        """A task delivered after its retrieval was cancelled or expired claims nothing."""
        from worker.domain import clock
        from worker.jobs import outbox
        from worker.retrieval import records as retrievals
        from worker.store import db

        url = pages()
        made = []
        for created_at in (clock.now(), clock.now() - timedelta(hours=2)):
            new = retrievals.NewRetrieval(history.workspace, uuid.uuid4(), url, "url_text", None)
            row, _ = db.with_transient_retry(
                lambda s, n=new, at=created_at: retrievals.create_retrieval(
                    s, n, at, timedelta(hours=1)
                )
            )
            made.append(row.id)
        cancelled, stale = made
        history.cancel(str(cancelled))
        outbox.publish([cancelled, stale])
        rows = {str(r.id): r for r in history.check(max_attempts)}
        assert rows[str(cancelled)].state == "cancelled" and rows[str(cancelled)].attempt == 0
        assert rows[str(stale)].state == "expired" and rows[str(stale)].attempt == 0


class TestIdempotencyFaults:
    """Retried POSTs arrive together, while the broker is away; one request is still one row."""

    def test_hundred_concurrent_retries_during_broker_outage_make_one_retrieval(
        self, history: History, env: Env, services: Services, pages, max_attempts: int
    ) -> None:
        """100 concurrent POSTs of one mutation_id with Redis down, then the same again once
        it is back: one row, one 202 and 199 x 200 naming it, one execution (attempt 1)."""
        payload = body(pages(), history.workspace)
        env.redis.stop()
        try:
            with ThreadPoolExecutor(max_workers=16) as pool:
                list(pool.map(lambda _: history.post(payload), range(100)))
        finally:
            env.redis.start()
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda _: history.post(payload), range(100)))
        rows = history.check(max_attempts, settle_timeout=60)
        codes = sorted(op.status for op in history.ops if op.action == "post")
        assert codes == [200] * 199 + [202], codes
        assert len(rows) == 1 and rows[0].state == "completed" and rows[0].attempt == 1
        assert_survived(services)

    def test_other_payload_for_a_known_mutation_conflicts_and_changes_nothing(
        self, history: History, pages, max_attempts: int
    ) -> None:
        """The same mutation_id with another URL, concurrently with its replays: every such POST
        is 409 invalid_input, and the one retrieval settles with the first URL's content."""
        first = body(pages(), history.workspace)
        other = {**first, "url": pages()}
        history.post(first)
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(history.post, [other, first] * 20))
        rows = history.check(max_attempts)
        posts = [op for op in history.ops if op.action == "post"]
        conflicts = [op for op in posts if op.status == 409]
        assert sorted(op.status for op in posts) == [200] * 20 + [202] + [409] * 20
        assert all(op.body["error"]["code"] == "invalid_input" for op in conflicts)
        assert len(rows) == 1 and rows[0].url == first["url"] and rows[0].state == "completed"


class TestDatabaseFaults:
    """PostgreSQL connections are cut while the API accepts and the workers settle."""

    def test_backends_terminated_under_load(
        self, history: History, env: Env, pages, max_attempts: int
    ) -> None:
        """Backends killed repeatedly: answers are 2xx or 503, never 500; all settle."""
        if env.db_kind != "postgres":
            pytest.skip("terminating backends is a PostgreSQL fault")
        from worker.store import db

        stop = threading.Event()
        terminated: list[int] = []

        # A connection of its own, outside the process's pool: a pooled one may be one that
        # the previous round cut (the pool tests only connections idle for a second).
        url = db.get_engine().url.set(drivername="postgresql")
        own = psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)

        def terminate() -> None:
            with own:
                while not stop.is_set():
                    row = own.execute(
                        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                        "FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    ).fetchone()
                    terminated.append(row[0] if row else 0)
                    time.sleep(0.3)

        killer = threading.Thread(target=terminate, daemon=True)
        killer.start()
        try:
            urls = [pages() for _ in range(40)]
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda u: history.post(body(u, history.workspace)), urls))
            time.sleep(scaled(3))
        finally:
            stop.set()
            killer.join(5)
        # The fault happened: backends of this database (the API's, the workers') were cut.
        assert sum(terminated) >= 1, f"no backend was terminated in {len(terminated)} rounds"
        rows = history.check(max_attempts, settle_timeout=90)
        assert rows, "nothing was accepted"
        codes = {op.status for op in history.ops if op.action == "post"}
        assert codes <= {202, 503}, codes

    def test_database_refusing_connections_answers_503_with_retry_after(
        self, history: History, env: Env, services: Services, pages, max_attempts: int
    ) -> None:
        """While the database refuses connections, POSTs and GETs are 503 upstream_unavailable
        with Retry-After (checked over the history), never 500; the same POSTs, retried once it
        is back, are accepted and settle, and no service process exited."""
        if env.db_kind != "postgres":
            pytest.skip("refusing connections is a PostgreSQL fault")
        assert env.db_name is not None
        (known,) = submit(history, [pages()])
        history.wait_settled(30)
        payloads = [body(pages(), history.workspace) for _ in range(5)]
        with database_refusing_connections(env.db_name):
            for payload in payloads:
                history.post(payload)
            history.get(known)
        assert [op.status for op in history.ops[-6:]] == [503] * 6, history.ops[-6:]
        for payload in payloads:
            again = history.post(payload)
            assert again is not None and again.status_code == 202, again
        rows = history.check(max_attempts)
        assert len(rows) == 6 and all(r.state == "completed" for r in rows)
        assert_survived(services)


class TestExpiryAndCancel:
    """The clock passes valid_until while a worker is paused; cancels race late workers."""

    def test_paused_worker_past_valid_until(
        self,
        history: History,
        services: Services,
        pages,
        max_attempts: int,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Expired while its worker is stopped: after SIGCONT the late settle is refused."""
        from worker.platform.settings import get_settings

        monkeypatch.setattr(get_settings(), "receipt_ttl_seconds", 3)
        payload = body(pages(slow_seconds=1), history.workspace)
        first = history.post(payload)
        assert first is not None and first.status_code == 202
        rid = first.json()["retrieval"]["id"]
        wait_running(history, rid)
        pause_worker(services)
        try:
            wait_for(lambda: state_of(history, rid) == "expired", timeout=20)
        finally:
            resume_worker(services)
        time.sleep(scaled(2))  # the resumed worker tries its late settle
        rows = history.check(max_attempts)
        assert rows[0].state == "expired" and rows[0].result is None
        again = history.post(payload)
        assert again is not None and again.status_code == 200
        assert again.json()["retrieval"]["state"] == "expired"
        assert again.json()["retrieval"]["id"] == rid

    def test_cancel_races_running_workers(self, history: History, pages, max_attempts: int) -> None:
        """Cancels sent while workers run: every cancelled retrieval stays cancelled."""
        ids = submit(history, [pages(slow_seconds=1) for _ in range(6)])
        time.sleep(scaled(0.5))
        for rid in ids[::2]:
            history.cancel(rid)
        rows = {str(r.id): r for r in history.check(max_attempts)}
        for rid in ids[::2]:
            assert rows[rid].state in ("cancelled", "completed")
            if rows[rid].state == "cancelled":
                assert rows[rid].evidence_id is None


class TestBeatDown:
    """Without beat, lost work is visible in readiness; it settles once beat returns."""

    def test_stuck_row_visible_then_rescued(
        self, history: History, services: Services, pages, max_attempts: int
    ) -> None:
        """Beat and a worker child die: /readyz shows the oldest running age; beat recovers it."""
        services.beat.kill_group()
        (rid,) = submit(history, [pages(slow_seconds=3)])
        wait_running(history, rid)
        signal_children(services, signal.SIGKILL)
        time.sleep(scaled(11))  # past the lease (scaled too): nothing rescues it without beat
        assert state_of(history, rid) == "running"
        checks = history.api.client.get("/readyz").json()["checks"]
        assert checks["oldest_age_seconds"]["running"] >= 10
        services.beat.start()
        rows = history.check(max_attempts)
        assert rows[0].state == "completed" and rows[0].attempt == 2
