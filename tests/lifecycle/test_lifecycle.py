"""The retrieval lifecycle end to end: API, outbox, a real Celery worker, the sweep."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.factories import Api, body, check_envelope, make_key
from tests.support.pages import article, slow
from tests.support.slowdown import scaled
from tests.support.tls_site import TLSSite

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]


@pytest.fixture
def page(site: TLSSite) -> str:
    """A fresh article URL on the loopback site."""
    path = f"/lc/{uuid.uuid4().hex}"
    return site.page(path, article("Oxygen in alpine lakes", marker=path))


@pytest.fixture
def slow_page(site: TLSSite) -> str:
    site.add("/lc/slow", slow)
    return site.url("/lc/slow?s=3")


def running(api: Api, retrieval_id: str) -> dict:
    return api.wait(retrieval_id, states={"running"}, timeout=15)


class TestHappyPath:
    """POST, then poll, until the worker completes the retrieval."""

    def test_post_then_poll_completes(self, api: Api, page: str, workspace: uuid.UUID) -> None:
        """A new mutation is recorded (202 pending) and settles completed with evidence."""
        response = api.post(body(page, workspace))
        assert response.status_code == 202
        created = response.json()["retrieval"]
        assert created["state"] == "pending"
        assert created["result"] is None and created["settled_at"] is None
        done = api.wait(created["id"])
        assert done["state"] == "completed"
        result = done["result"]
        assert result["status"] == "ready", result
        assert "Paragraph 3" in result["text"]
        assert result["provenance"]["source_url"] == page
        assert done["evidence"]["revision"] == 1
        assert done["settled_at"] >= done["created_at"]

    def test_valid_until_is_created_plus_ttl(
        self, api: Api, page: str, workspace: uuid.UUID
    ) -> None:
        """valid_until is created_at plus the receipt lifetime."""
        from datetime import datetime

        from worker.platform.settings import get_settings

        created = api.post(body(page, workspace)).json()["retrieval"]
        start = datetime.fromisoformat(created["created_at"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(created["valid_until"].replace("Z", "+00:00"))
        assert (end - start).total_seconds() == get_settings().receipt_ttl_seconds


class TestPublishedAfterTheAnswer:
    """A new retrieval's message goes to the broker once its 202 has been sent: the answer
    waits for the commit only (a process that dies before the publish leaves it to the sweep,
    as a broker that is down does)."""

    def test_answer_then_publish_then_completed(
        self, api: Api, page: str, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from api.http.app import app
        from api.services import retrievals as service

        events: list[str] = []
        publish = service.publish_new

        def recorded(retrieval_id: uuid.UUID, lane: str) -> None:
            events.append("publish")
            publish(retrieval_id, lane)

        monkeypatch.setattr(service, "publish_new", recorded)
        status, answer = asyncio.run(
            _post_through_asgi(app, make_key([workspace]), body(page, workspace), events)
        )
        assert status == 202
        assert events == ["http.response.start", "http.response.body", "publish"]
        done = api.wait(answer["retrieval"]["id"])
        assert done["state"] == "completed"

    def test_the_answer_is_timed_without_the_publish(
        self, page: str, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The request histogram says how long the client waited, not how long the publish
        after it took (held here for seconds)."""
        from api.http.app import app
        from api.http.metrics import REGISTRY
        from api.services import retrievals as service

        publish = service.publish_new

        hold = scaled(2.0)

        def held(retrieval_id: uuid.UUID, lane: str) -> None:
            time.sleep(hold)
            publish(retrieval_id, lane)

        labels = {"method": "POST", "route": "/research-api/evidence/retrieve"}

        def timed() -> tuple[float, float]:
            name = "evidence_http_request_duration_seconds"
            count = REGISTRY.get_sample_value(f"{name}_count", labels) or 0.0
            return count, REGISTRY.get_sample_value(f"{name}_sum", labels) or 0.0

        monkeypatch.setattr(service, "publish_new", held)
        count, total = timed()
        events: list[str] = []
        status, _ = asyncio.run(
            _post_through_asgi(app, make_key([workspace]), body(page, workspace), events)
        )
        assert status == 202
        count_after, total_after = timed()
        assert count_after == count + 1
        assert total_after - total < hold

    def test_a_publish_that_never_happened_is_left_to_the_sweep(
        self, api: Api, page: str, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """As when the API process dies between its answer and the publish: the row is pending
        with its message never sent, and the sweep publishes it as one presumed lost."""
        from api.services import retrievals as service

        skipped: list[uuid.UUID] = []
        monkeypatch.setattr(service, "publish_new", lambda rid, _lane: skipped.append(rid))
        created = api.post(body(page, workspace)).json()["retrieval"]
        assert [str(rid) for rid in skipped] == [created["id"]]
        done = api.wait(created["id"], timeout=60)
        assert done["state"] == "completed"

    def test_a_replay_publishes_nothing(
        self, api: Api, page: str, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from api.services import retrievals as service

        sent = body(page, workspace)
        assert api.post(sent).status_code == 202
        published: list[uuid.UUID] = []
        monkeypatch.setattr(service, "publish_new", lambda rid, _lane: published.append(rid))
        assert api.post(sent).status_code == 200
        assert published == []


async def _post_through_asgi(
    app: Any, key: str, payload: dict[str, Any], events: list[str]
) -> tuple[int, dict[str, Any]]:
    """POST /retrieve straight to the ASGI app, noting each message it sends in `events`."""
    data = json.dumps(payload).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/research-api/evidence/retrieve",
        "raw_path": b"/research-api/evidence/retrieve",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"authorization", f"Bearer {key}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": data, "more_body": False}
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError("unreachable")

    status, chunks = 0, []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        events.append(message["type"])
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, json.loads(b"".join(chunks))


class TestIdempotency:
    """(workspace_id, mutation_id) identifies one retrieval forever."""

    def test_replay_answers_200_with_current_state(
        self, api: Api, page: str, workspace: uuid.UUID
    ) -> None:
        """The same payload again answers 200 with the same retrieval as it stands now."""
        payload = body(page, workspace)
        first = api.post(payload).json()["retrieval"]
        api.wait(first["id"])
        again = api.post(payload)
        assert again.status_code == 200
        assert again.json()["retrieval"]["id"] == first["id"]
        assert again.json()["retrieval"]["state"] == "completed"

    def test_language_compares_case_insensitively(
        self, api: Api, page: str, workspace: uuid.UUID
    ) -> None:
        """'EN' and 'en' are the same request (language tags are case-insensitive)."""
        payload = body(page, workspace, language="en-GB")
        first = api.post(payload).json()["retrieval"]
        again = api.post({**payload, "language": "EN-gb"})
        assert again.status_code == 200
        assert again.json()["retrieval"]["id"] == first["id"]

    @pytest.mark.parametrize(
        "change",
        [{"url": "https://example.org/other"}, {"kind": "published_captions"}, {"language": "fr"}],
    )
    def test_different_payload_conflicts(
        self, api: Api, page: str, workspace: uuid.UUID, change: dict
    ) -> None:
        """A known mutation_id with another url, kind or language answers 409; nothing changes."""
        payload = body(page, workspace, language="en")
        first = api.post(payload).json()["retrieval"]
        error = check_envelope(api.post({**payload, **change}), 409, "invalid_input")
        assert error["field"] == "mutation_id"
        assert api.get(first["id"]).json()["retrieval"]["id"] == first["id"]

    def test_same_mutation_in_two_workspaces_is_two_retrievals(
        self, http: object, page: str
    ) -> None:
        """mutation_id is scoped by workspace."""
        a, b = uuid.uuid4(), uuid.uuid4()
        client = Api(http, make_key([a, b]))
        mutation = str(uuid.uuid4())
        ra = client.post({**body(page, a), "mutation_id": mutation})
        rb = client.post({**body(page, b), "mutation_id": mutation})
        assert ra.status_code == rb.status_code == 202
        assert ra.json()["retrieval"]["id"] != rb.json()["retrieval"]["id"]

    def test_concurrent_duplicates_create_one(
        self, api: Api, page: str, workspace: uuid.UUID
    ) -> None:
        """100 concurrent POSTs of one mutation_id: one 202, 99 x 200, one row, one execution."""
        payload = body(page, workspace)
        with ThreadPoolExecutor(max_workers=25) as pool:
            responses = list(pool.map(lambda _: api.post(payload), range(100)))
        codes = sorted(r.status_code for r in responses)
        assert codes == [200] * 99 + [202]
        ids = {r.json()["retrieval"]["id"] for r in responses}
        assert len(ids) == 1
        done = api.wait(ids.pop())
        assert done["state"] == "completed"
        rows = count_rows("retrieval", workspace)
        assert rows == 1
        assert attempts_of(done["id"]) == 1


def count_rows(table: str, workspace: uuid.UUID) -> int:
    import sqlalchemy as sa

    from worker.store import db

    with db.session_scope() as session:
        return int(
            session.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE workspace_id = :w"),
                {"w": workspace if db.get_engine().dialect.name == "postgresql" else workspace.hex},
            ).scalar_one()
        )


def attempts_of(retrieval_id: str) -> int:
    from worker.store import db, retrieval_view

    with db.session_scope() as session:
        row = retrieval_view.get_retrieval(session, uuid.UUID(retrieval_id))
        assert row is not None
        return row.attempt


class TestEvidenceRevisions:
    """Content becomes immutable, citable evidence revisions."""

    def test_unchanged_content_confirms_revision(
        self, api: Api, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """Two retrievals of identical content name the same evidence revision."""
        url = site.page(f"/lc/same-{uuid.uuid4().hex}", article("Same every time"))
        first = api.wait(api.post(body(url, workspace)).json()["retrieval"]["id"])
        second = api.wait(api.post(body(url, workspace)).json()["retrieval"]["id"])
        assert first["evidence"] == second["evidence"]
        assert first["evidence"]["revision"] == 1

    def test_changed_content_makes_new_revision(
        self, api: Api, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """New content makes revision 2; revision 1 stays readable, unchanged."""
        path = f"/lc/changing-{uuid.uuid4().hex}"
        url = site.page(path, article("First version", marker="alpha"))
        first = api.wait(api.post(body(url, workspace)).json()["retrieval"]["id"])
        site.page(path, article("Second version", marker="omega"))
        second = api.wait(api.post(body(url, workspace)).json()["retrieval"]["id"])
        assert first["evidence"]["evidence_id"] == second["evidence"]["evidence_id"]
        assert (first["evidence"]["revision"], second["evidence"]["revision"]) == (1, 2)
        evidence_id = first["evidence"]["evidence_id"]
        latest = api.evidence(evidence_id).json()["evidence"]
        assert latest["revision"] == 2 and "omega" in latest["text"]
        old = api.evidence(evidence_id, revision=1).json()["evidence"]
        assert old["revision"] == 1 and "alpha" in old["text"] and "omega" not in old["text"]
        assert [r["revision"] for r in latest["revisions"]] == [1, 2]
        check_envelope(api.evidence(evidence_id, revision=3), 404, "not_found")

    def test_concurrent_identical_content_one_revision(
        self, api: Api, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """Concurrent retrievals of the same content record exactly one revision."""
        url = site.page(f"/lc/race-{uuid.uuid4().hex}", article("Raced"))
        ids = [api.post(body(url, workspace)).json()["retrieval"]["id"] for _ in range(6)]
        settled = [api.wait(i) for i in ids]
        assert {s["evidence"]["revision"] for s in settled} == {1}
        assert len({s["evidence"]["evidence_id"] for s in settled}) == 1

    def test_failure_names_no_evidence(self, api: Api, site: TLSSite, workspace: uuid.UUID) -> None:
        """A result without text (here a 404) completes with evidence null."""
        done = api.wait(
            api.post(body(site.url("/lc/missing-page"), workspace)).json()["retrieval"]["id"]
        )
        assert done["state"] == "completed"
        assert done["result"]["status"] == "unavailable"
        assert done["result"]["reason"] == "not_found"
        assert done["evidence"] is None


class TestWorkspaceIsolation:
    """A key sees only its workspaces; anything else is a 404, never a leak."""

    def test_other_workspace_is_not_found(
        self, api: Api, http: object, page: str, workspace: uuid.UUID
    ) -> None:
        """Another workspace's key gets 404 for the retrieval, its evidence and its cancel."""
        done = api.wait(api.post(body(page, workspace)).json()["retrieval"]["id"])
        stranger = Api(http, make_key([uuid.uuid4()]))
        check_envelope(stranger.get(done["id"]), 404, "not_found")
        check_envelope(stranger.cancel(done["id"]), 404, "not_found")
        check_envelope(stranger.evidence(done["evidence"]["evidence_id"]), 404, "not_found")
        assert api.evidence(done["evidence"]["evidence_id"]).status_code == 200


class TestCancel:
    """Cancel works for pending and running retrievals, and a late worker records nothing."""

    def test_cancel_running(self, api: Api, slow_page: str, workspace: uuid.UUID) -> None:
        """A running retrieval is cancelled; the worker's late result is refused."""
        created = api.post(body(slow_page, workspace)).json()["retrieval"]
        running(api, created["id"])
        cancelled = api.cancel(created["id"]).json()["retrieval"]
        assert cancelled["state"] == "cancelled"
        assert cancelled["result"]["status"] == "cancelled"
        assert cancelled["result"]["reason"] == "cancelled"
        time.sleep(4.5)  # the slow fetch (3 s) finishes and tries to settle
        after = api.get(created["id"]).json()["retrieval"]
        assert after == cancelled
        assert after["evidence"] is None

    def test_cancel_pending_and_settled(self, api: Api, page: str, workspace: uuid.UUID) -> None:
        """Cancelling twice, or after settling, returns the retrieval unchanged."""
        from worker.domain import clock
        from worker.retrieval import records as retrievals
        from worker.store import db

        new = retrievals.NewRetrieval(workspace, uuid.uuid4(), page, "url_text", None)
        from datetime import timedelta

        row, _ = db.with_transient_retry(
            lambda s: retrievals.create_retrieval(s, new, clock.now(), timedelta(hours=1))
        )
        first = api.cancel(str(row.id)).json()["retrieval"]
        assert first["state"] == "cancelled"
        assert api.cancel(str(row.id)).json()["retrieval"] == first
        done = api.wait(api.post(body(page, workspace)).json()["retrieval"]["id"])
        assert api.cancel(done["id"]).json()["retrieval"] == done
