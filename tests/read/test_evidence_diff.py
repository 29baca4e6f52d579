"""`GET /research-api/evidence/{id}/diff?from=A&to=B` over real revisions (PostgreSQL, SQLite).

Revisions are recorded as the worker records them (`evidence.record`); every 200 answer is
validated against the route's schema in /openapi.json.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator, FormatChecker

from tests.support.factories import Api, check_envelope, make_key
from worker.content.results import Content, Kind, Segment, content_result
from worker.domain import clock
from worker.store import db, evidence

pytestmark = pytest.mark.lifecycle

MAX_SAFE_INTEGER = 2**53 - 1
BEFORE = "The lake is cold.\nIts water is clear.\nFish are few."
AFTER = "The lake is cold.\nIts water is green.\nFish are few.\nBirds nest nearby."
CUES = [Segment(1_000 * n, 1_000 * n + 800, f"Cue {n}: the river rises.") for n in range(1, 7)]


def record(workspace: uuid.UUID, url: str, kind: Kind, content: Content) -> tuple[uuid.UUID, int]:
    """Record one revision of `url` in the workspace, as the worker does."""
    result = content_result(kind, content, clock.now())
    return db.with_transient_retry(
        lambda s: evidence.record(s, workspace, kind, url, result, clock.now())
    )[:2]


def page(workspace: uuid.UUID, texts: Sequence[str], title: str = "Lake") -> uuid.UUID:
    """A url_text item with one revision per text, in order."""
    url = f"https://example.org/lake/{uuid.uuid4().hex}"
    ids = {
        record(workspace, url, "url_text", Content(text=t, title=title, source_url=url))[0]
        for t in texts
    }
    assert len(ids) == 1
    return ids.pop()


def track(workspace: uuid.UUID, tracks: Sequence[Sequence[Segment]]) -> uuid.UUID:
    """A published_captions item with one revision per track, in order."""
    url = f"https://example.org/talk/{uuid.uuid4().hex}.vtt"
    ids = set()
    for cues in tracks:
        content = Content(
            text="\n".join(c.text for c in cues),
            segments=cues,
            source_url=url,
            content_kind="published_caption_file",
            caption_format="webvtt",
        )
        ids.add(record(workspace, url, "published_captions", content)[0])
    assert len(ids) == 1
    return ids.pop()


@pytest.fixture(scope="module")
def validator(http: Any) -> Draft202012Validator:
    """Validates an answer against EvidenceDiffResponse, as /openapi.json documents it."""
    document = http.get("/openapi.json").json()
    schema = {"$ref": "#/components/schemas/EvidenceDiffResponse"}
    return Draft202012Validator({**document, **schema}, format_checker=FormatChecker())


def get_diff(api: Api, evidence_id: uuid.UUID, **params: Any) -> httpx.Response:
    return api.client.get(
        f"/research-api/evidence/{evidence_id}/diff", params=params, headers=api.headers
    )


def diff_of(
    api: Api, validator: Draft202012Validator, evidence_id: uuid.UUID, old: int, new: int
) -> dict[str, Any]:
    """The 200 answer's `diff`, validated."""
    response = get_diff(api, evidence_id, **{"from": old, "to": new})
    assert response.status_code == 200, response.text
    answer = response.json()
    validator.validate(answer)
    diff: dict[str, Any] = answer["diff"]
    return diff


class TestTextDiff:
    """Two revisions of a page."""

    def test_forward(self, api: Api, workspace: uuid.UUID, validator: Any) -> None:
        """A replaced and an added line: the unified diff, its counts, the changed field."""
        item = page(workspace, [BEFORE, AFTER])
        diff = diff_of(api, validator, item, 1, 2)
        assert (diff["from_revision"], diff["to_revision"], diff["kind"]) == (1, 2, "url_text")
        assert diff["changed"] == ["text"] and diff["cues"] is None
        text = diff["text"]
        assert (text["lines_added"], text["lines_removed"]) == (2, 1)
        assert text["unified"].splitlines() == [
            "--- revision 1",
            "+++ revision 2",
            "@@ -1,3 +1,4 @@",
            " The lake is cold.",
            "-Its water is clear.",
            "+Its water is green.",
            " Fish are few.",
            "+Birds nest nearby.",
        ]
        assert not text["truncated"] and not diff["truncated"]

    def test_backward(self, api: Api, workspace: uuid.UUID, validator: Any) -> None:
        """`from` after `to` is the same diff run backwards."""
        item = page(workspace, [BEFORE, AFTER])
        text = diff_of(api, validator, item, 2, 1)["text"]
        assert (text["lines_added"], text["lines_removed"]) == (1, 2)
        assert "-Birds nest nearby." in text["unified"].splitlines()

    def test_same_revision_is_empty(self, api: Api, workspace: uuid.UUID, validator: Any) -> None:
        """from == to: nothing changed, an empty unified text."""
        item = page(workspace, [BEFORE])
        diff = diff_of(api, validator, item, 1, 1)
        assert diff["changed"] == []
        assert diff["text"] == {
            "unified": "",
            "lines_added": 0,
            "lines_removed": 0,
            "approximate": False,
            "truncated": False,
        }


class TestCaptionDiff:
    """Two revisions of a caption track."""

    def test_shift_and_edit(self, api: Api, workspace: uuid.UUID, validator: Any) -> None:
        """Every cue 500 ms later, one reworded and one added: only those two are listed."""
        later = [Segment(c.start_ms + 500, c.end_ms + 500, c.text) for c in CUES]
        later[2] = Segment(later[2].start_ms, later[2].end_ms, "Cue 3: the river falls.")
        later.append(Segment(9_000, 9_500, "Applause."))
        item = track(workspace, [CUES, later])
        diff = diff_of(api, validator, item, 1, 2)
        assert diff["text"] is None and diff["changed"] == ["text", "segments"]
        cues = diff["cues"]
        assert cues["offset_ms"] == 500
        counts = [cues[k] for k in ("unchanged", "shifted", "changed", "added", "removed")]
        assert counts == [0, 5, 1, 1, 0]
        assert [(e["change"], (e["to"] or {}).get("text")) for e in cues["entries"]] == [
            ("changed", "Cue 3: the river falls."),
            ("added", "Applause."),
        ]
        assert cues["entries"][0]["from"] == CUES[2].as_dict()


class TestRules:
    """The rules of `GET /research-api/evidence/{id}`: scope, workspace, revisions, input."""

    def test_other_workspace_is_404(self, api: Api, validator: Any) -> None:
        """Another workspace's item is answered like an unknown one."""
        item = page(uuid.uuid4(), [BEFORE, AFTER])
        check_envelope(get_diff(api, item, **{"from": 1, "to": 2}), 404, "not_found")
        check_envelope(get_diff(api, uuid.uuid4(), **{"from": 1, "to": 2}), 404, "not_found")

    def test_scope_and_key(self, api: Api, workspace: uuid.UUID) -> None:
        """No key is 401; a key without the research scope is 403."""
        item = page(workspace, [BEFORE])
        params = {"from": 1, "to": 1}
        url = f"/research-api/evidence/{item}/diff"
        check_envelope(api.client.get(url, params=params), 401, "not_entitled")
        other = Api(api.client, make_key([workspace], scopes=("agent:other",)))
        check_envelope(get_diff(other, item, **params), 403, "not_entitled")

    @pytest.mark.parametrize(("old", "new"), [(1, 3), (3, 1), (2**31, 1), (1, MAX_SAFE_INTEGER)])
    def test_unknown_revision_is_404(
        self, api: Api, workspace: uuid.UUID, old: int, new: int
    ) -> None:
        """A revision the item does not have, up to the contract's bound, is 404."""
        item = page(workspace, [BEFORE, AFTER])
        error = check_envelope(get_diff(api, item, **{"from": old, "to": new}), 404, "not_found")
        assert str(max(old, new)) in error["message"]

    @pytest.mark.parametrize(
        ("params", "field"),
        [
            ({"to": 1}, "from"),
            ({"from": 1}, "to"),
            ({}, "from"),
            ({"from": 0, "to": 1}, "from"),
            ({"from": 1, "to": -2}, "to"),
            ({"from": "one", "to": 1}, "from"),
            ({"from": 1, "to": "1.5"}, "to"),
            ({"from": 1, "to": MAX_SAFE_INTEGER + 1}, "to"),
        ],
    )
    def test_bad_revisions_are_400(
        self, api: Api, workspace: uuid.UUID, params: dict[str, Any], field: str
    ) -> None:
        """from/to missing, not integers, or out of 1..2^53-1: 400 naming the parameter."""
        item = page(workspace, [BEFORE])
        error = check_envelope(get_diff(api, item, **params), 400, "invalid_input")
        assert error["field"] == field
