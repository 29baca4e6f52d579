"""Nothing lost, nothing stuck: broker and database outages, killed workers, expiry."""

from __future__ import annotations

import os
import signal
import time
import uuid
from datetime import timedelta

import httpx
import pytest

from tests.conftest import Env, Services
from tests.support.factories import Api, body, check_envelope
from tests.support.pages import article, slow
from tests.support.services import Process, free_port, wait_for
from tests.support.tls_site import TLSSite

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]


@pytest.fixture
def page(site: TLSSite) -> str:
    path = f"/rc/{uuid.uuid4().hex}"
    return site.page(path, article("Recovery", marker=path))


@pytest.fixture
def slow_page(site: TLSSite) -> str:
    site.add("/rc/slow", slow)
    return site.url("/rc/slow?s=3")


def row(retrieval_id: str):  # type: ignore[no-untyped-def]
    from worker.store import db, retrieval_view

    with db.session_scope() as session:
        return retrieval_view.get_retrieval(session, uuid.UUID(retrieval_id))


class TestBrokerOutage:
    """A POST while the broker is down is still accepted; the sweep publishes it later."""

    def test_post_accepted_then_published_by_sweep(
        self, api: Api, env: Env, page: str, workspace: uuid.UUID
    ) -> None:
        """202 while Redis is down (published_at NULL, /readyz 503); completed once it is back."""
        env.redis.stop()
        try:
            response = api.post(body(page, workspace))
            assert response.status_code == 202
            created = response.json()["retrieval"]
            assert created["state"] == "pending"
            assert row(created["id"]).published_at is None
            ready = api.client.get("/readyz")
            assert ready.status_code == 503 and ready.headers["Retry-After"]
            assert ready.json()["checks"]["broker"] is False
        finally:
            env.redis.start()
        done = api.wait(created["id"], timeout=60)
        assert done["state"] == "completed"
        assert done["result"]["status"] == "ready"
        assert api.client.get("/readyz").status_code == 200


class TestDatabaseOutage:
    """With the database unreachable, clients get 503 upstream_unavailable with Retry-After."""

    @pytest.fixture
    def dead_db_api(self, env: Env) -> httpx.Client:
        dead = (
            "postgresql+psycopg://postgres@127.0.0.1:1/none"
            if env.db_kind == "postgres"
            else "sqlite:////proc/evidence-nowhere/evidence.db"
        )
        port = free_port()
        proc = Process(
            ["api", "--port", str(port)],
            env.tmp / "dead-db-api.log",
            env={"EVIDENCE_DATABASE_URL": dead},
        ).start()
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20)

        def up() -> bool:
            try:
                return client.get("/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=30)
        yield client
        client.close()
        proc.stop()

    def test_every_route_answers_503(self, dead_db_api: httpx.Client, workspace: uuid.UUID) -> None:
        """POST, GET, cancel and evidence answer 503 with Retry-After, never 500."""
        headers = {"Authorization": "Bearer evk_anything"}
        calls = [
            ("POST", "/research-api/evidence/retrieve", body("https://example.org/", workspace)),
            ("GET", f"/research-api/evidence/retrievals/{uuid.uuid4()}", None),
            ("POST", f"/research-api/evidence/retrievals/{uuid.uuid4()}/cancel", None),
            ("GET", f"/research-api/evidence/{uuid.uuid4()}", None),
        ]
        for method, path, payload in calls:
            response = dead_db_api.request(method, path, json=payload, headers=headers)
            check_envelope(response, 503, "upstream_unavailable")
            assert int(response.headers["Retry-After"]) > 0
        ready = dead_db_api.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"] is False


def end_lease(retrieval_id: str) -> None:
    """The running claim's lease ends now, as if its whole time had passed."""
    import sqlalchemy as sa

    from worker.domain import clock
    from worker.store import db, retrieval_view

    table = retrieval_view.RETRIEVAL
    db.with_transient_retry(
        lambda s: s.execute(
            sa.update(table)
            .where(table.c.id == uuid.UUID(retrieval_id), table.c.state == "running")
            .values(lease_until=clock.now() - timedelta(seconds=1))
        )
    )


class TestLostWorker:
    """A worker killed mid-task: the lease runs out, the sweep re-runs it, or gives up."""

    def kill_children_while_running(self, api: Api, services: Services, retrieval_id: str) -> None:
        api.wait(retrieval_id, states={"running"}, timeout=20)
        # Only the pool's children die; the worker's main process replaces them.
        for pid in services.worker.children():
            os.kill(pid, signal.SIGKILL)

    def test_killed_once_then_completed(
        self, api: Api, services: Services, slow_page: str, workspace: uuid.UUID
    ) -> None:
        """SIGKILL of the pool child mid-fetch: attempt 2 completes; one revision."""
        created = api.post(body(slow_page, workspace)).json()["retrieval"]
        self.kill_children_while_running(api, services, created["id"])
        done = api.wait(created["id"], timeout=60)
        assert done["state"] == "completed"
        assert done["result"]["status"] == "ready"
        assert row(created["id"]).attempt == 2
        assert done["evidence"]["revision"] == 1

    def test_killed_on_last_attempt_is_unconfirmed(
        self, api: Api, services: Services, slow_page: str, workspace: uuid.UUID
    ) -> None:
        """Killed on every attempt (max 2): the retrieval ends unconfirmed, never stuck.

        The test above waits for a lease to run out by itself; here each lease is cut short
        once its worker is dead (two full leases are most of a minute on a busy machine)."""
        created = api.post(body(slow_page, workspace)).json()["retrieval"]
        self.kill_children_while_running(api, services, created["id"])
        end_lease(created["id"])
        wait_for(lambda: row(created["id"]).attempt == 2, timeout=40)
        self.kill_children_while_running(api, services, created["id"])
        end_lease(created["id"])
        done = api.wait(created["id"], timeout=60)
        assert done["state"] == "unconfirmed"
        assert done["result"] is None and done["evidence"] is None
        assert done["settled_at"] is not None


class TestExpiry:
    """Nothing outlives valid_until."""

    def test_pending_past_valid_until_expires(
        self, api: Api, page: str, workspace: uuid.UUID
    ) -> None:
        """A pending retrieval whose valid_until passed is expired by the sweep; replays see it."""
        from worker.domain import clock
        from worker.jobs.sweep import run_sweep
        from worker.retrieval import records as retrievals
        from worker.store import db

        mutation = uuid.uuid4()
        past = clock.now() - timedelta(hours=2)
        new = retrievals.NewRetrieval(workspace, mutation, page, "url_text", None)
        created, _ = db.with_transient_retry(
            lambda s: retrievals.create_retrieval(s, new, past, timedelta(hours=1))
        )
        run_sweep()
        expired = api.get(str(created.id)).json()["retrieval"]
        assert expired["state"] == "expired"
        assert expired["result"] is None and expired["settled_at"] is not None
        replay = api.post({**body(page, workspace), "mutation_id": str(mutation)})
        assert replay.status_code == 200
        assert replay.json()["retrieval"]["state"] == "expired"

    def test_running_past_valid_until_refuses_late_settle(
        self, api: Api, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """Expired while the worker fetches: the worker's late settle is fenced off.

        Its valid_until is moved into the past once it runs, then the sweep runs: a short TTL
        set ahead would, on a busy machine, expire it before any worker claimed it."""
        import sqlalchemy as sa

        from worker.domain import clock
        from worker.jobs.sweep import run_sweep
        from worker.store import db, retrieval_view

        site.add("/rc/slower", slow)
        created = api.post(body(site.url("/rc/slower?s=5"), workspace)).json()["retrieval"]
        api.wait(created["id"], states={"running"}, timeout=20)
        R = retrieval_view.RETRIEVAL.c
        db.with_transient_retry(
            lambda s: s.execute(
                sa.update(retrieval_view.RETRIEVAL)
                .where(R.id == uuid.UUID(created["id"]))
                .values(valid_until=clock.now() - timedelta(seconds=1))
            )
        )
        run_sweep()
        expired = api.get(created["id"]).json()["retrieval"]
        assert expired["state"] == "expired"
        time.sleep(6)  # the fetch ends and the worker tries to settle
        assert api.get(created["id"]).json()["retrieval"] == expired
