"""Revision numbers anywhere up to the contract's bound (2^53-1): never a 5xx.

The columns are 32-bit INTEGERs on PostgreSQL; a larger number bound to a comparison with them
failed in the database and was answered 503 "database unavailable" (and SQLite overflowed past
2^63 into a 500). Such a revision cannot exist: it is a miss, or stale, like any other.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.factories import Api, check_envelope
from tests.support.read_client import ReadApi
from worker.content.results import Content, content_result
from worker.domain import clock
from worker.store import db, evidence

pytestmark = pytest.mark.lifecycle

MAX_SAFE_INTEGER = 2**53 - 1
#: Past 32 bits, up to the contract's bound.
LARGE = (2**31, 2**40, MAX_SAFE_INTEGER)
CONTENT = {
    "title": "Bounds",
    "question": "Do large revisions fail?",
    "summary": "",
    "findings": [],
    "angles": [],
    "notes": "",
    "project_id": None,
    "project_revision": None,
    "corpus_snapshot_id": None,
    "language": "en",
}


@pytest.fixture
def evidence_id(workspace: uuid.UUID) -> uuid.UUID:
    """An evidence item with one revision in the test's workspace."""
    url = f"https://example.org/bounds/{uuid.uuid4().hex}"
    content = Content(text="Notes on the river.", source_url=url, content_kind="document_text")
    result = content_result("url_text", content, clock.now())
    stored, _, _ = db.with_transient_retry(
        lambda s: evidence.record(s, workspace, "url_text", url, result, clock.now())
    )
    return stored


class TestEvidenceRevision:
    """`GET /research-api/evidence/{id}?revision=N`."""

    def test_large_revision_is_a_miss(self, api: Api, evidence_id: uuid.UUID) -> None:
        """A revision past 32 bits, within the bound, is 404 like any missing one."""
        assert api.evidence(str(evidence_id), revision=1).status_code == 200
        for revision in LARGE:
            check_envelope(api.evidence(str(evidence_id), revision=revision), 404, "not_found")

    def test_beyond_the_bound_is_400(self, api: Api, evidence_id: uuid.UUID) -> None:
        """Past 2^53-1 it is 400 naming `revision` (the query parameter, not "query")."""
        for revision in (MAX_SAFE_INTEGER + 1, 10**20):
            response = api.evidence(str(evidence_id), revision=revision)
            assert check_envelope(response, 400, "invalid_input")["field"] == "revision"

    def test_retrieve_is_not_an_evidence_id(self, api: Api) -> None:
        """GET on the retrieve route is 405 naming POST, not a 400 about a malformed id."""
        response = api.client.get("/research-api/evidence/retrieve", headers=api.headers)
        check_envelope(response, 405, "invalid_input")
        assert response.headers["allow"] == "POST"


class TestBriefRevision:
    """The brief routes with revisions past 32 bits."""

    def test_large_revisions(self, api: Api, workspace: uuid.UUID) -> None:
        """get: 404; revise: 409 stale; review: 409 no such revision. Nothing is written."""
        read = ReadApi(api)
        ws = str(workspace)
        brief = read.ok("briefs/create", {"workspace_id": ws, "content": CONTENT})["brief"]
        ids = {"workspace_id": ws, "id": brief["id"]}
        for revision in LARGE:
            check_envelope(read.call("briefs/get", {**ids, "revision": revision}), 404, "not_found")
            stale = read.call(
                "briefs/revise", {**ids, "expected_revision": revision, "content": CONTENT}
            )
            assert check_envelope(stale, 409, "invalid_input")["field"] == "expected_revision"
            review = read.call("briefs/review", {**ids, "revision": revision})
            assert check_envelope(review, 409, "invalid_input")["field"] == "revision"
        assert read.ok("briefs/get", ids)["brief"]["revision"] == 1
