"""Ids, URLs and tags must match their pattern exactly: a trailing newline is bad input.

Python's `$` also matches before a final newline, so `"<uuid>\\n"` once passed the checks and
then failed `uuid.UUID()` (a 500 over HTTP, `internal` over MCP), and a newline in a brief's
`project_id` or `findings[].id` was stored, breaking the output schema. Every such value is a
400 naming the field, over HTTP and over MCP, and nothing is recorded.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import sqlalchemy as sa

from tests.support.factories import Api, body, check_envelope, make_key
from tests.support.read_client import ReadApi

URL = "https://example.org/page"
NL = "\n"

Payload = Callable[[str], dict[str, Any]]


def brief_content(**change: Any) -> dict[str, Any]:
    """Valid brief content with one finding citing one (never looked up) evidence revision."""
    finding = {
        "id": str(uuid.uuid4()),
        "statement": "Oxygen falls at night.",
        "basis": "observed",
        "evidence": [{"evidence_id": str(uuid.uuid4()), "revision": 1}],
        "uncertainty": "",
    }
    finding.update(change.pop("finding", {}))
    return {
        "title": "Alpine lakes",
        "question": "Do alpine lakes lose oxygen at night?",
        "summary": "",
        "findings": [finding],
        "angles": [],
        "notes": "",
        "project_id": str(uuid.uuid4()),
        "project_revision": 1,
        "corpus_snapshot_id": str(uuid.uuid4()),
        "language": "en",
        **change,
    }


def _id() -> str:
    return str(uuid.uuid4())


#: (route, field named in the error, body builder given the workspace id).
HTTP_CASES: list[tuple[str, str, Payload]] = [
    ("evidence/retrieve", "url", lambda ws: body(URL + NL, uuid.UUID(ws))),
    (
        "evidence/retrieve",
        "workspace_id",
        lambda ws: {**body(URL, uuid.UUID(ws)), "workspace_id": ws + NL},
    ),
    (
        "evidence/retrieve",
        "mutation_id",
        lambda ws: {**body(URL, uuid.UUID(ws)), "mutation_id": _id() + NL},
    ),
    ("evidence/retrieve", "language", lambda ws: body(URL, uuid.UUID(ws), language="en" + NL)),
    ("chunks/search", "workspace_id", lambda ws: {"workspace_id": ws + NL, "query": "x"}),
    (
        "chunks/search",
        "language",
        lambda ws: {"workspace_id": ws, "query": "x", "language": "en" + NL},
    ),
    ("images/search", "workspace_id", lambda ws: {"workspace_id": ws + NL, "query": "x"}),
    ("briefs/get", "workspace_id", lambda ws: {"workspace_id": ws + NL, "id": _id()}),
    ("briefs/get", "id", lambda ws: {"workspace_id": ws, "id": _id() + NL}),
    (
        "briefs/create",
        "workspace_id",
        lambda ws: {"workspace_id": ws + NL, "content": brief_content()},
    ),
    (
        "briefs/create",
        "content.project_id",
        lambda ws: {"workspace_id": ws, "content": brief_content(project_id=_id() + NL)},
    ),
    (
        "briefs/create",
        "content.corpus_snapshot_id",
        lambda ws: {"workspace_id": ws, "content": brief_content(corpus_snapshot_id=_id() + NL)},
    ),
    (
        "briefs/create",
        "content.findings[0].id",
        lambda ws: {"workspace_id": ws, "content": brief_content(finding={"id": _id() + NL})},
    ),
    (
        "briefs/create",
        "content.findings[0].evidence[0].evidence_id",
        lambda ws: {
            "workspace_id": ws,
            "content": brief_content(
                finding={"evidence": [{"evidence_id": _id() + NL, "revision": 1}]}
            ),
        },
    ),
    (
        "briefs/revise",
        "id",
        lambda ws: {
            "workspace_id": ws,
            "id": _id() + NL,
            "expected_revision": 1,
            "content": brief_content(),
        },
    ),
    (
        "briefs/revise",
        "content.findings[0].id",
        lambda ws: {
            "workspace_id": ws,
            "id": _id(),
            "expected_revision": 1,
            "content": brief_content(finding={"id": _id() + NL}),
        },
    ),
    ("briefs/review", "id", lambda ws: {"workspace_id": ws, "id": _id() + NL, "revision": 1}),
    (
        "briefs/review",
        "workspace_id",
        lambda ws: {"workspace_id": ws + NL, "id": _id(), "revision": 1},
    ),
    ("briefs/archive", "id", lambda ws: {"workspace_id": ws, "id": _id() + NL}),
    ("briefs/archive", "workspace_id", lambda ws: {"workspace_id": ws + NL, "id": _id()}),
]


def recorded(workspace: uuid.UUID) -> dict[str, int]:
    """How many retrievals and briefs the workspace has in the database."""
    from worker.store import db
    from worker.store.models import Retrieval
    from worker.store.read_models import Brief

    counts = {}
    with db.session_scope(readonly=True) as session:
        for name, model in (("retrieval", Retrieval), ("brief", Brief)):
            query = sa.select(sa.func.count()).where(model.workspace_id == workspace)
            counts[name] = session.execute(query).scalar_one()
    return counts


class TestHttp:
    """Every route refuses a value with a trailing newline as 400 naming the field."""

    @pytest.mark.parametrize(
        ("route", "field", "payload"),
        HTTP_CASES,
        ids=[f"{route}:{field}" for route, field, _ in HTTP_CASES],
    )
    def test_trailing_newline_is_refused(
        self, api: Api, workspace: uuid.UUID, route: str, field: str, payload: Payload
    ) -> None:
        """400 invalid_input naming the field; no retrieval and no brief is recorded."""
        response = api.client.post(
            f"/research-api/{route}", json=payload(str(workspace)), headers=api.headers
        )
        error = check_envelope(response, 400, "invalid_input")
        assert error["field"] == field, error
        assert recorded(workspace) == {"retrieval": 0, "brief": 0}

    def test_a_brief_stored_without_newlines_reads_back_valid(
        self, api: Api, workspace: uuid.UUID
    ) -> None:
        """The same brief without the newlines is stored and reads back schema-valid."""
        read = ReadApi(api)
        content = brief_content(finding={"evidence": []})
        ws = str(workspace)
        created = read.ok("briefs/create", {"workspace_id": ws, "content": content})["brief"]
        got = read.ok("briefs/get", {"workspace_id": ws, "id": created["id"]})["brief"]
        assert got["content"]["project_id"] == content["project_id"]
        assert got["content"]["findings"][0]["id"] == content["findings"][0]["id"]


#: Odd spellings of an id in a path, and whether they are malformed (400) or just unknown (404).
ODD_PATH_IDS: list[tuple[Callable[[str], str], int]] = [
    (lambda i: i + "%0A", 400),
    (lambda i: i + "%0D%0A", 400),
    (lambda i: "%0A" + i, 400),
    (lambda i: i + "%00", 400),
    (lambda i: "%7B" + i + "%7D", 400),
    (lambda i: "urn:uuid:" + i, 400),
    (lambda i: i.replace("-", ""), 400),
    (lambda i: i + "0", 400),
    (lambda i: "%20" + i, 400),
    (lambda i: "x" * 5000, 400),
    (lambda i: i.upper(), 404),
    (lambda i: i, 404),
]


class TestPathIds:
    """Ids in paths: malformed is 400 naming the parameter, well-formed but unknown is 404."""

    @pytest.mark.parametrize(("spell", "status"), ODD_PATH_IDS)
    @pytest.mark.parametrize(
        ("method", "template", "param"),
        [
            ("GET", "/research-api/evidence/retrievals/{}", "retrieval_id"),
            ("POST", "/research-api/evidence/retrievals/{}/cancel", "retrieval_id"),
            ("GET", "/research-api/evidence/{}", "evidence_id"),
        ],
    )
    def test_odd_path_id(
        self,
        api: Api,
        method: str,
        template: str,
        param: str,
        spell: Callable[[str], str],
        status: int,
    ) -> None:
        """Never a 500: a 400 naming the parameter, or a 404, in the envelope.

        The evidence route matches only a UUID (so `GET …/evidence/retrieve` is a 405, not a
        malformed id): any other spelling there names no resource, a 404.
        """
        url = template.format(spell(str(uuid.uuid4())))
        response = api.client.request(method, url, headers=api.headers)
        if status == 400 and param != "evidence_id":
            assert check_envelope(response, 400, "invalid_input")["field"] == param
        else:
            check_envelope(response, 404, "not_found")

    def test_existing_retrieval_in_upper_case(self, api: Api, workspace: uuid.UUID) -> None:
        """Upper-case hex is the same id (both schemas accept it); braces are not."""
        created = api.post(body(URL, workspace)).json()["retrieval"]
        same = api.get(created["id"].upper())
        assert same.status_code == 200 and same.json()["retrieval"]["id"] == created["id"]
        check_envelope(api.get("{" + created["id"] + "}"), 400, "invalid_input")

    @pytest.mark.parametrize("revision", ["0", "-1", "x", "1.5", "%0A"])
    def test_odd_evidence_revision(self, api: Api, revision: str) -> None:
        """A malformed revision is 400 naming it (the location "query" is not a field)."""
        url = f"/research-api/evidence/{uuid.uuid4()}?revision={revision}"
        response = api.client.get(url, headers=api.headers)
        assert check_envelope(response, 400, "invalid_input")["field"] == "revision"


#: (tool, field named in the error, arguments given the workspace id).
MCP_CASES: list[tuple[str, str, Payload]] = [
    ("sosoapi_research_evidence_retrieve", "url", lambda ws: body(URL + NL, uuid.UUID(ws))),
    (
        "sosoapi_research_evidence_retrieve",
        "workspace_id",
        lambda ws: {**body(URL, uuid.UUID(ws)), "workspace_id": ws + NL},
    ),
    (
        "sosoapi_research_evidence_retrieve",
        "mutation_id",
        lambda ws: {**body(URL, uuid.UUID(ws)), "mutation_id": _id() + NL},
    ),
    (
        "sosoapi_research_evidence_retrieve",
        "language",
        lambda ws: body(URL, uuid.UUID(ws), language="en" + NL),
    ),
    ("research_chunk_search", "workspace_id", lambda ws: {"workspace_id": ws + NL, "query": "x"}),
    (
        "research_chunk_search",
        "language",
        lambda ws: {"workspace_id": ws, "query": "x", "language": "en" + NL},
    ),
    ("research_image_search", "workspace_id", lambda ws: {"workspace_id": ws + NL, "query": "x"}),
    (
        "sosoapi_research_briefs_get",
        "workspace_id",
        lambda ws: {"workspace_id": ws + NL, "id": _id()},
    ),
    ("sosoapi_research_briefs_get", "id", lambda ws: {"workspace_id": ws, "id": _id() + NL}),
]


class TestMcp:
    """The MCP tools refuse the same values as invalid_input naming the argument."""

    @pytest.mark.parametrize(
        ("tool", "field", "arguments"),
        MCP_CASES,
        ids=[f"{tool}:{field}" for tool, field, _ in MCP_CASES],
    )
    def test_trailing_newline_is_refused(
        self, workspace: uuid.UUID, tool: str, field: str, arguments: Payload
    ) -> None:
        """The server's call path answers a tool error with invalid_input and the field."""
        from api.mcp.server import call
        from api.mcp.tools import REGISTRY
        from tests.mcp.support import error_of

        key = make_key([workspace])
        args = arguments(str(workspace))
        result = anyio.run(call, REGISTRY[tool], f"Bearer {key}", args)
        assert error_of(result, "invalid_input")["field"] == field
        assert recorded(workspace) == {"retrieval": 0, "brief": 0}

    def test_input_schema_patterns_are_ecma(self) -> None:
        """The advertised schema alone refuses "en\\n": its `$` is the end of the text."""
        from api.mcp.tools import _input_validator

        good = body(URL, uuid.uuid4())
        validator = _input_validator("evidence_retrieve")
        assert not list(validator.iter_errors({**good, "language": "en-GB"}))
        errors = list(validator.iter_errors({**good, "language": "en" + NL}))
        assert [list(error.path) for error in errors] == [["language"]]
