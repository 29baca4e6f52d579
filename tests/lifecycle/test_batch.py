"""The batch routes: `POST …/retrieve/batch` and `POST …/retrievals/batch-get`."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.conftest import Env
from tests.support.factories import Api, body, cancel_open, check_envelope, make_key
from tests.support.pages import article
from tests.support.slowdown import scaled
from tests.support.tls_site import TLSSite

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]

BATCH = "/research-api/evidence/retrieve/batch"
BATCH_GET = "/research-api/evidence/retrievals/batch-get"


@pytest.fixture
def page(site: TLSSite) -> str:
    path = f"/batch/{uuid.uuid4().hex}"
    return site.page(path, article("Batches of lakes", marker=path))


def unpublished(workspace: uuid.UUID, count: int) -> list[str]:
    """Retrievals recorded directly (never published: they stay pending while a test runs)."""
    from datetime import timedelta

    from worker.domain import clock
    from worker.retrieval import records as retrievals
    from worker.store import db

    ids = []
    for _ in range(count):
        new = retrievals.NewRetrieval(
            workspace, uuid.uuid4(), "https://example.org/", "url_text", None
        )
        row, _ = db.with_transient_retry(
            lambda s, new=new: retrievals.create_retrieval(s, new, clock.now(), timedelta(hours=1))
        )
        ids.append(str(row.id))
    return ids


def count_rows(workspace: uuid.UUID) -> int:
    import sqlalchemy as sa

    from worker.store import db
    from worker.store.models import Retrieval

    T = Retrieval.__table__.c  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        query = sa.select(sa.func.count()).where(T.workspace_id == workspace)
        return int(session.execute(query).scalar_one())


def lanes_of(ids: list[str]) -> set[str]:
    import sqlalchemy as sa

    from worker.store import db
    from worker.store.models import Retrieval

    T = Retrieval.__table__.c  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        rows = session.execute(sa.select(T.lane).where(T.id.in_([uuid.UUID(i) for i in ids])))
        return {row.lane for row in rows}


class TestBatchRetrieve:
    """One result per item, in order; each item answered as the single route would."""

    def test_results_in_order_and_settle(
        self, api: Api, site: TLSSite, workspace: uuid.UUID
    ) -> None:
        """Five items: five 202s in the order given, recorded in the batch lane, all completed."""
        urls = [
            site.page(f"/batch/{uuid.uuid4().hex}", article("Five", marker=str(n)))
            for n in range(5)
        ]
        items = [body(url, workspace) for url in urls]
        response = api.batch(items)
        assert response.status_code == 200
        results = response.json()["results"]
        assert [r["status"] for r in results] == [202] * 5
        assert [r["retrieval"]["mutation_id"] for r in results] == [i["mutation_id"] for i in items]
        ids = [r["retrieval"]["id"] for r in results]
        assert lanes_of(ids) == {"batch"}
        done = [api.wait(i) for i in ids]
        # Each settled from its own page: a result without a source URL is one that never got
        # a response (a bound ran out first), so say which.
        outcomes = [(d["state"], d["result"] and d["result"]["status"]) for d in done]
        assert outcomes == [("completed", "ready")] * 5, [d["result"] for d in done]
        assert [d["result"]["provenance"]["source_url"] for d in done] == urls

    def test_one_bad_item_never_rejects_the_others(
        self, api: Api, http: object, page: str, workspace: uuid.UUID
    ) -> None:
        """400 (bad field, not an object), 403 (other workspace), 409 (conflict) per item."""
        known = body(page, workspace)
        first = api.post(known).json()["retrieval"]
        items = [
            body(page, workspace),
            {**body(page, workspace), "url": "not a url"},
            "just a string",
            body(page, uuid.uuid4()),
            {**known, "url": "https://example.org/other"},
            known,
            {**body(page, workspace), "colour": "blue"},
            body(page, workspace),
        ]
        results = api.batch(items).json()["results"]
        assert [r["status"] for r in results] == [202, 400, 400, 403, 409, 200, 400, 202]
        assert results[1]["error"] == {
            "code": "invalid_input",
            "message": results[1]["error"]["message"],
            "field": "url",
        }
        assert results[2]["error"]["code"] == "invalid_input"
        assert results[3]["error"]["code"] == "not_entitled"
        assert results[4]["error"]["code"] == "invalid_input"
        assert results[4]["error"]["field"] == "mutation_id"
        assert results[5]["retrieval"]["id"] == first["id"]
        assert results[6]["error"]["field"] == "colour"
        # What was accepted is real: it settles.
        for index in (0, 7):
            assert api.wait(results[index]["retrieval"]["id"])["state"] == "completed"

    def test_idempotent_per_mutation_id(self, api: Api, page: str, workspace: uuid.UUID) -> None:
        """The same batch again answers 200 with the same retrievals; duplicates inside one
        batch are one retrieval; a single POST of an item sees the batch's retrieval."""
        items = [body(page, workspace) for _ in range(3)]
        items.append(dict(items[0]))
        first = api.batch(items).json()["results"]
        assert [r["status"] for r in first] == [202, 202, 202, 200]
        assert first[3]["retrieval"]["id"] == first[0]["retrieval"]["id"]
        again = api.batch(items).json()["results"]
        assert [r["status"] for r in again] == [200] * 4
        assert [r["retrieval"]["id"] for r in again] == [r["retrieval"]["id"] for r in first]
        single = api.post(items[1])
        assert single.status_code == 200
        assert single.json()["retrieval"]["id"] == first[1]["retrieval"]["id"]

    def test_a_thousand_items(self, api: Api, workspace: uuid.UUID, env: Env) -> None:
        """1 000 items in one request: 1 000 results in order, one row each, all readable."""
        # On a path robots.txt disallows: what the worker does with them is settled without a
        # request, so they hold none of the shared site's per-host slots from later tests.
        robots_site = env.robots_site
        items = [body(robots_site.url(f"/private/thousand/{n}"), workspace) for n in range(1000)]
        started = time.monotonic()
        response = api.batch(items)
        elapsed = time.monotonic() - started
        results = response.json()["results"]
        assert [r["status"] for r in results] == [202] * 1000
        assert [r["retrieval"]["mutation_id"] for r in results] == [i["mutation_id"] for i in items]
        # Coarse, only a hang: one transaction, one publish pipeline (speed: bench/).
        assert elapsed < scaled(30), elapsed
        ids = [r["retrieval"]["id"] for r in results]
        assert len(set(ids)) == 1000 and count_rows(workspace) == 1000
        found = api.batch_get(ids).json()["retrievals"]
        assert [r["id"] for r in found] == ids
        assert {r["state"] for r in found} <= {"pending", "running", "completed"}
        # Running them all would keep the session's two worker processes busy for a minute:
        # cancel what is still open (their messages then claim nothing).
        cancel_open(workspace)

    @pytest.mark.parametrize(
        ("payload", "field"),
        [
            ([], None),
            ({}, "items"),
            ({"items": []}, "items"),
            ({"items": "x"}, "items"),
            ({"items": [{}] * 1001}, "items"),
            ({"items": [], "extra": 1}, None),
        ],
    )
    def test_malformed_envelope_is_400(self, api: Api, payload: object, field: str | None) -> None:
        """A body that is not `{"items": [1..1000]}` is one 400 for the whole request."""
        response = api.client.post(BATCH, json=payload, headers=api.headers)
        error = check_envelope(response, 400, "invalid_input")
        if field is not None:
            assert error["field"] == field

    def test_needs_a_key(self, http: object, page: str, workspace: uuid.UUID) -> None:
        """No key: 401 for the whole batch."""
        response = http.post(BATCH, json={"items": [body(page, workspace)]})  # type: ignore[attr-defined]
        check_envelope(response, 401, "not_entitled")


class TestBatchGet:
    """Many retrievals by id, in order; unknown and other workspaces' ids are null."""

    def test_in_order_with_nulls(self, api: Api, http: object, workspace: uuid.UUID) -> None:
        """Known ids in order, unknown and foreign ones null (existence never leaks)."""
        mine = unpublished(workspace, 2)
        foreign = unpublished(uuid.uuid4(), 1)
        ids = [mine[1], str(uuid.uuid4()), mine[0], foreign[0], mine[1]]
        found = api.batch_get(ids).json()["retrievals"]
        assert [r and r["id"] for r in found] == [mine[1], None, mine[0], None, mine[1]]
        assert found[0]["state"] == "pending"
        stranger = Api(http, make_key([uuid.uuid4()]))
        assert stranger.batch_get(mine).json()["retrievals"] == [None, None]

    @pytest.mark.parametrize(
        "payload",
        [{"ids": []}, {"ids": ["nope"]}, {"ids": [str(uuid.uuid4())] * 1001}, {"id": []}],
    )
    def test_malformed_is_400(self, api: Api, payload: object) -> None:
        """Ids must be 1 to 1 000 UUIDs."""
        response = api.client.post(BATCH_GET, json=payload, headers=api.headers)
        error = check_envelope(response, 400, "invalid_input")
        assert error.get("field") in ("ids", "ids[0]", "id")
